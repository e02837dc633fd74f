"""Async reward functions: TRL's GRPOTrainer awaiting veristep, and slime's custom RM shape."""

from __future__ import annotations

import asyncio
import json
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
from veristep.verifiers.async_adapters import (
    AsyncTRLRewardFunction,
    async_rm,
    async_trl_reward_func,
    batched_async_rm,
    slime_rm,
)


def test_async_trl_function_scores_like_the_sync_one():
    f = async_trl_reward_func("math", workers=1)
    assert isinstance(f, AsyncTRLRewardFunction)
    completions = ["\\boxed{4}", [{"role": "assistant", "content": "\\boxed{5}"}], "\\boxed{1}"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        rewards = asyncio.run(f(completions, answer=["4", "4", None]))
    assert rewards == [1.0, 0.0, None]
    assert f.unjudged_counts == {"bad_reference": 1}


def test_trl_grpo_trainer_awaits_the_async_reward(tiny_model_dir, tmp_path: Path):
    pytest.importorskip("trl")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    reward = async_trl_reward_func("math", workers=1)
    seen = []

    async def recording(completions, **kwargs):
        rewards = await reward(completions, **kwargs)
        seen.append((list(kwargs["answer"]), rewards))
        return rewards

    recording.__name__ = reward.__name__
    rows = [{"prompt": f"What is {i} + {i}? ", "answer": str(2 * i) if i % 2 == 0 else None}
            for i in range(8)]
    args = GRPOConfig(
        output_dir=str(tmp_path / "grpo"), per_device_train_batch_size=4, num_generations=2,
        max_completion_length=8, max_steps=2, use_cpu=True, report_to="none", logging_steps=1,
        save_strategy="no", bf16=False, learning_rate=1e-3, seed=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        trainer = GRPOTrainer(model=str(tiny_model_dir), reward_funcs=[recording], args=args,
                              train_dataset=Dataset.from_list(rows))
        trainer.train()
    assert trainer.state.global_step == 2
    assert len(seen) == 2
    for answers, rewards in seen:
        assert len(rewards) == 4
        # a row without a reference is unjudged (None), never a 0
        assert all((r is None) == (a is None) for r, a in zip(rewards, answers, strict=True))
    logs = [h for h in trainer.state.log_history if "veristep_math/unjudged_frac" in h]
    assert [log["veristep_math/unjudged_frac"] for log in logs] == [
        pytest.approx(a.count(None) / 4) for a, _ in seen
    ]


def _sample(response, label, **metadata):
    return SimpleNamespace(prompt="Q", response=response, label=label, metadata=metadata)


def test_slime_async_rm_shapes():
    args = SimpleNamespace(rm_type=None, custom_rm_path="veristep.verifiers.async_adapters.async_rm")
    assert asyncio.run(async_rm(args, _sample("so \\boxed{12}", "12"))) == 1.0
    assert asyncio.run(batched_async_rm(args, [_sample("\\boxed{1}", "2"), _sample("\\boxed{2}", "2")])) == [0.0, 1.0]

    code_label = json.dumps({"language": "python", "tests": [{"stdin": "2\n", "stdout": "4\n"}]})
    rm = slime_rm("math", unjudged_reward=-1.0, as_dict=True)
    rm.configs["code"] = {"workers": 1, "timeout": 10.0}
    samples = [
        _sample("\\boxed{3}", "3"),
        _sample("\\boxed{3}", None),  # no reference: unjudged, the caller's value
        _sample("```python\nprint(int(input())*2)\n```", code_label, veristep_kind="code"),
        _sample("```python\nprint(1)\n```", '{"language": "python"}', veristep_kind="code"),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out = asyncio.run(rm.batch(args, samples))
    assert out[0]["reward"] == 1.0 and out[0]["judged"]
    assert out[1] == {**out[1], "reward": -1.0, "judged": False, "status": "bad_reference"}
    assert out[2]["reward"] == 1.0 and out[2]["status"] == "correct"
    assert out[3]["status"] == "bad_reference" and out[3]["reward"] == -1.0
    assert rm.unjudged_counts == {"bad_reference": 2}
    for v in rm._verifiers.values():
        v.close()

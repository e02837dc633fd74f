"""The verl adapter driven by verl's own code: config composition, reward managers, DataProto.

verl 0.9.x is installed without its heavy dependencies (`make verl`: `pip install --no-deps
verl` plus the `verl-test` extra); these tests skip without it unless VERISTEP_REQUIRE_VERL=1.
"""

from __future__ import annotations

import asyncio
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

if os.environ.get("VERISTEP_REQUIRE_VERL") != "1":
    pytest.importorskip("verl")
    pytest.importorskip("hydra")

import cloudpickle  # noqa: E402
import torch  # noqa: E402
import veristep.verifiers.adapters as adapters  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from verl import DataProto  # noqa: E402

ADAPTERS_FILE = Path(adapters.__file__)
CORRECT = "Let me think. The answer is \\boxed{12}."
# (data_source, response, ground_truth, expected score, expected status)
ROWS = [
    ("openai/gsm8k", "so the total is \\boxed{72}", "72", 1.0, "correct"),
    ("openai/gsm8k", "so the total is \\boxed{71}", "72", 0.0, "wrong"),
    ("lighteval/MATH", "\\boxed{\\frac{1}{2}}", "0.5", 1.0, "correct"),
    ("tools", '<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>',
     '[{"name": "f", "arguments": {"x": 1}}]', 1.0, "correct"),
    ("tools", '<tool_call>{"name": "f", "arguments": {"x": 2}}</tool_call>',
     '[{"name": "f", "arguments": {"x": 1}}]', 0.0, "wrong_arguments"),
    ("tools", '<tool_call>{"name": "f", "arguments": {}}</tool_call>', '{"expected": "not a list"}', 0.0,
     "bad_reference"),
]


@pytest.fixture(autouse=True)
def fresh_event_loop():
    """Each test gets its own event loop: verl's managers bind to the current one at
    construction, and one manager's run (prime's process pool) can leave it closed, which made
    the remote-manager test fail after it ("Event loop is closed")."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        yield loop
    finally:
        loop.close()
        asyncio.set_event_loop(None)


@pytest.fixture(scope="module")
def ray_session():
    """One small Ray session for the tests that need it (starting Ray is most of their time)."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def tokenizer():
    from veristep.train.demo.tiny import build_char_tokenizer

    return build_char_tokenizer()


def _batch(tokenizer, responses_ids: list[list[int]], sources: list[str], truths: list[str],
           prompt_len: int, width: int) -> DataProto:
    """A batch shaped as verl's trainer builds it: left-padded prompts, right-padded responses."""
    n = len(responses_ids)
    prompts = torch.full((n, prompt_len), tokenizer.pad_token_id, dtype=torch.long)
    responses = torch.full((n, width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((n, prompt_len + width), dtype=torch.long)
    for i, ids in enumerate(responses_ids):
        ids = ids[:width]
        prompts[i, -1] = tokenizer.pad_token_id + 1
        mask[i, prompt_len - 1] = 1
        responses[i, : len(ids)] = torch.tensor(ids)
        mask[i, prompt_len : prompt_len + len(ids)] = 1
    return DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "attention_mask": mask,
                 "input_ids": torch.cat([prompts, responses], dim=1)},
        non_tensors={
            "data_source": np.array(sources, dtype=object),
            "reward_model": np.array([{"ground_truth": t, "style": "rule"} for t in truths], dtype=object),
            "extra_info": np.array([{"index": i} for i in range(n)], dtype=object),
        },
    )


def _data(tokenizer, rows=ROWS) -> DataProto:
    """The ROWS batch: (data source, response text, ground truth, ...) per row."""
    ids = [tokenizer(r[1], add_special_tokens=False)["input_ids"] for r in rows]
    return _batch(tokenizer, ids, [r[0] for r in rows], [r[2] for r in rows], prompt_len=4, width=96)


def _config(*overrides: str):
    import verl.trainer.config as verl_config

    config_dir = str(Path(verl_config.__file__).parent)
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


def _last_token_scores(reward: torch.Tensor, data: DataProto) -> list[float]:
    prompt_len = data.batch["prompts"].shape[-1]
    lengths = data.batch["attention_mask"][:, prompt_len:].sum(-1)
    assert torch.count_nonzero(reward).item() <= len(data)  # nothing but the last response token
    return [reward[i, lengths[i] - 1].item() for i in range(len(data))]


def test_documented_keys_compose_and_load_veristep(tokenizer):
    from verl.trainer.ppo.reward import get_custom_reward_fn

    config = _config(f"reward.custom_reward_function.path={ADAPTERS_FILE}",
                     "reward.custom_reward_function.name=compute_score",
                     "+reward.custom_reward_function.reward_kwargs.veristep_config.math.timeout=5")
    assert config.reward.custom_reward_function.path == str(ADAPTERS_FILE)
    fn = get_custom_reward_fn(config)
    result = fn(data_source="openai/gsm8k", solution_str="\\boxed{72}", ground_truth="72")
    assert result["score"] == 1.0 and result["status"] == "correct"
    # the loaded function is the installed package's: pickles by reference, both ways
    raw = fn.args[0]  # verl wraps the loaded function in partial(_call_with_kwargs, fn, kwargs)
    assert raw is adapters.compute_score
    for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, pickle.loads)):
        assert loads(dumps(raw)) is adapters.compute_score


@pytest.mark.parametrize("manager", ["naive", "dapo"])
def test_reward_loop_managers_score_every_item(manager, tokenizer):
    from verl.trainer.ppo.reward import get_custom_reward_fn, resolve_reward_manager_cls

    config = _config(f"reward.custom_reward_function.path={ADAPTERS_FILE}",
                     f"reward.reward_manager.name={manager}")
    cls = resolve_reward_manager_cls(config)
    rm = cls(config, tokenizer, get_custom_reward_fn(config))
    data = _data(tokenizer)

    async def score_all():
        return await asyncio.gather(*(rm.run_single(data[i : i + 1]) for i in range(len(data))))

    outputs = rm.loop.run_until_complete(score_all())  # the loop verl bound the manager to
    assert [o["reward_score"] for o in outputs] == pytest.approx([r[3] for r in ROWS])
    assert [o["reward_extra_info"]["status"] for o in outputs] == [r[4] for r in ROWS]
    assert [o["reward_extra_info"]["judged"] for o in outputs] == [r[4] != "bad_reference" for r in ROWS]


def test_legacy_naive_manager_with_sigalrm_timeout(tokenizer):
    from verl.workers.reward_manager.naive import NaiveRewardManager

    rm = NaiveRewardManager(tokenizer, num_examine=0, compute_score=adapters.compute_score,
                            compute_score_timeout=30)
    data = _data(tokenizer)
    out = rm(data, return_dict=True)
    assert _last_token_scores(out["reward_tensor"], data) == pytest.approx([r[3] for r in ROWS])
    assert list(out["reward_extra_info"]["status"]) == [r[4] for r in ROWS]


def test_legacy_batch_manager_scores_the_whole_batch(tokenizer):
    from verl.workers.reward_manager.batch import BatchRewardManager

    rm = BatchRewardManager(tokenizer, num_examine=0, compute_score=adapters.compute_score_batch)
    data = _data(tokenizer)
    out = rm(data, return_dict=True)
    assert _last_token_scores(out["reward_tensor"], data) == pytest.approx([r[3] for r in ROWS])
    assert list(out["reward_extra_info"]["judged"]) == [r[4] != "bad_reference" for r in ROWS]


@pytest.mark.parametrize("loaded_by", ["file", "package"])
def test_legacy_prime_manager_scores_in_its_process_pool(loaded_by, tokenizer):
    """PrimeRewardManager pickles the function into a ProcessPoolExecutor and reads result[0]."""
    from verl.trainer.ppo.reward import get_custom_reward_fn
    from verl.workers.reward_manager.prime import PrimeRewardManager

    path = str(ADAPTERS_FILE) if loaded_by == "file" else "pkg://veristep.verifiers.adapters"
    fn = get_custom_reward_fn(_config(f"reward.custom_reward_function.path={path}"))
    rm = PrimeRewardManager(tokenizer, num_examine=0, compute_score=fn)
    data = _data(tokenizer)
    reward = rm(data)
    assert _last_token_scores(reward, data) == pytest.approx([r[3] for r in ROWS])


@pytest.mark.parametrize("loaded_by", ["file", "package"])
def test_remote_manager_scores_in_ray_actors(loaded_by, tokenizer, ray_session):
    """verl's `remote` reward-loop manager cloudpickles the function into Ray actors."""
    from verl.trainer.ppo.reward import get_custom_reward_fn, resolve_reward_manager_cls

    path = str(ADAPTERS_FILE) if loaded_by == "file" else "pkg://veristep.verifiers.adapters"
    config = _config(f"reward.custom_reward_function.path={path}", "reward.reward_manager.name=remote",
                     "reward.num_workers=1")
    rm = resolve_reward_manager_cls(config)(config, tokenizer, get_custom_reward_fn(config))
    data = _data(tokenizer)

    async def score_all():
        return await asyncio.gather(*(rm.run_single(data[i : i + 1]) for i in range(len(data))))

    outputs = rm.loop.run_until_complete(score_all())
    assert [o["reward_score"] for o in outputs] == pytest.approx([r[3] for r in ROWS])
    assert [o["reward_extra_info"]["status"] for o in outputs] == [r[4] for r in ROWS]


# ---------------------------------------------------------------------------------------------
# Truncation (issue 31.3): verl passes compute_score no end-of-sequence flag of its own.

CUT = "She sold 40 on Monday and 32 on Tuesday, 40 + 32 = 72, so in total she sol"


def test_compute_score_reads_the_explicit_truncation_flag():
    plain = adapters.compute_score("openai/gsm8k", CUT, "72", {"index": 0})
    assert plain["status"] == "correct"  # no signal: judged as before
    for info in ({"truncated": True}, {"truncated": np.bool_(True)}, {"truncated": "true"},
                 {"finish_reason": "length"}, {"stop_reason": "length"}):
        cut = adapters.compute_score("openai/gsm8k", CUT, "72", info)
        assert (cut["score"], cut["status"], cut["judged"]) == (0.0, "no_answer", True), info
    for info in ({"truncated": False}, {"finish_reason": "stop"}):
        assert adapters.compute_score("openai/gsm8k", CUT, "72", info)["status"] == "correct", info
    # an answer stated with a marker before the limit keeps its reward
    boxed = adapters.compute_score("openai/gsm8k", "so \\boxed{72}, and then we ch", "72",
                                   {"truncated": True})
    assert boxed["score"] == 1.0
    batch = adapters.compute_score_batch(["gsm8k", "gsm8k"], [CUT, CUT], ["72", "72"],
                                         [{"truncated": True}, None])
    assert [s["status"] for s in batch] == ["no_answer", "correct"]


def _window_data(tokenizer, rows: list[tuple[str, bool]], width: int) -> DataProto:
    """Responses in a `width`-token window; each row's text, then the eos token if the bool says."""
    ids = [tokenizer(text, add_special_tokens=False)["input_ids"] + ([tokenizer.eos_token_id] if eos else [])
           for text, eos in rows]
    return _batch(tokenizer, ids, ["openai/gsm8k"] * len(rows), ["72"] * len(rows), prompt_len=2, width=width)


@pytest.mark.parametrize("manager", ["VeristepRewardManager", "VeristepDAPORewardManager"])
def test_veristep_manager_marks_responses_cut_by_the_length_limit(manager, tokenizer):
    """Loaded the documented way (importlib source, by file path) and run by verl's reward loop."""
    from veristep.verifiers import verl_manager
    from verl.trainer.ppo.reward import get_custom_reward_fn, resolve_reward_manager_cls

    width = len(CUT)
    config = _config(f"reward.custom_reward_function.path={ADAPTERS_FILE}",
                     "reward.reward_manager.source=importlib",
                     f"reward.reward_manager.name={manager}",
                     f"reward.reward_manager.module.path={verl_manager.__file__}")
    cls = resolve_reward_manager_cls(config)
    assert cls is getattr(verl_manager, manager)  # the installed package's class, loaded by path
    rm = cls(config, tokenizer, get_custom_reward_fn(config))
    rows = [
        (CUT, False),                              # fills the window, no eos: cut off
        (CUT[:-4] + " 72", True),                  # eos as the window's last token: finished
        (CUT[:-4], False),                         # stopped before the limit (a stop string)
        ("so \\boxed{72}, and " + "x" * width, False),  # cut off after a marked answer
    ]
    data = _window_data(tokenizer, rows, width)
    infos_before = [dict(d) for d in data.non_tensor_batch["extra_info"]]

    async def score_all():
        return await asyncio.gather(*(rm.run_single(data[i : i + 1]) for i in range(len(data))))

    outputs = rm.loop.run_until_complete(score_all())
    assert [o["reward_extra_info"]["status"] for o in outputs] == ["no_answer", "correct", "correct", "correct"]
    assert [o["reward_score"] for o in outputs][:3] == pytest.approx([0.0, 1.0, 1.0])
    # the batch's own extra_info dicts are left as they were
    assert [dict(d) for d in data.non_tensor_batch["extra_info"]] == infos_before


def test_response_truncated_rule(tokenizer):
    from veristep.verifiers.verl_manager import eos_ids, response_truncated

    eos = eos_ids(tokenizer)
    assert eos == {tokenizer.eos_token_id}
    assert eos_ids(type("T", (), {"eos_token_id": [5, 7]})(), extra=[9]) == {5, 7, 9}
    data = _window_data(tokenizer, [(CUT, False), ("", False), (CUT[:-1], True)], len(CUT))
    assert [response_truncated(data[i], eos) for i in range(3)] == [True, False, False]


def test_the_rollouts_own_finish_reason_and_odd_inputs_are_kept(tokenizer):
    from types import MappingProxyType

    from veristep.verifiers.verl_manager import eos_ids, mark_truncated_rows, response_truncated

    # A per-turn max_tokens cut this response short of the window: it was marked finished,
    # over the rollout's own "length", and the cut-off text scored 1.0.
    data = _window_data(tokenizer, [(CUT[:-4], False)] * 3, len(CUT))
    data.non_tensor_batch["extra_info"] = np.array(
        [{"finish_reason": "length"}, MappingProxyType({"veristep_kind": "math"}), {"truncated": False}], dtype=object)
    infos = mark_truncated_rows(data, tokenizer).non_tensor_batch["extra_info"]
    assert adapters.truncation_flag(infos[0]) is True and "truncated" not in infos[0]
    assert infos[1] == {"veristep_kind": "math", "truncated": False}  # a non-dict mapping is read
    assert infos[2] == {"truncated": False}
    # numpy's integer eos id (it was ignored: every full response ending in eos read as cut off)
    assert eos_ids(type("T", (), {"eos_token_id": np.int64(5)})()) == {5}
    empty = _window_data(tokenizer, [("", False)], 0)
    assert response_truncated(empty[0], eos_ids(tokenizer)) is False  # IndexError before

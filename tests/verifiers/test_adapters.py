"""TRL reward function and verl compute_score adapters, including a real TRL GRPOTrainer run."""

from __future__ import annotations

import importlib.util
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import veristep.verifiers.adapters as adapters
from veristep.verifiers.adapters import (
    TRLRewardFunction,
    UnknownDataSource,
    VerlScorer,
    compute_score,
    kind_for_data_source,
    trl_reward_func,
)

# ----------------------------------------------------------------------------- TRL, unit level


def test_trl_plain_completions_read_reference_from_dataset_columns(exact_kind):
    f = trl_reward_func(exact_kind)
    assert f.__name__ == "veristep_exact"
    rewards = f(
        completions=["Answer: 4", "Answer: 5", "no answer here"],
        prompts=["q1", "q1", "q2"],
        answer=["4", "4", "7"],
        completion_ids=[[1], [2], [3]],
    )
    assert rewards == [1.0, 0.0, 0.0]


def test_trl_conversational_completions_and_reference_column(exact_kind):
    f = trl_reward_func(exact_kind, reference_column="solution")
    completions = [
        [{"role": "assistant", "content": "Answer: 12"}],
        [{"role": "assistant", "content": [{"type": "text", "text": "Answer: 3"}]}],
    ]
    assert f(completions, solution=["12", "12"], answer=["x", "x"]) == [1.0, 0.0]


def test_trl_unjudged_is_none_and_hooks_are_fed(exact_kind):
    metrics, extra = {}, {}
    f = trl_reward_func(exact_kind)
    rewards = f(
        ["Answer: 1", "Answer: 1"],
        answer=["1", None],
        log_metric=lambda name, value: metrics.__setitem__(name, value),
        log_extra=lambda column, values: extra.__setitem__(column, values),
        trainer_state=object(),
    )
    assert rewards == [1.0, None]
    assert metrics == {"veristep_exact/correct_frac": 0.5, "veristep_exact/unjudged_frac": 0.5}
    assert extra == {"veristep_exact_status": ["correct", "internal_error"]}


def test_trl_missing_column_is_a_clear_error(exact_kind):
    f = trl_reward_func(exact_kind)
    with pytest.raises(ValueError, match="no column 'answer'.*columns: question"):
        f(["Answer: 1"], question=["q"], trainer_state=None)
    g = trl_reward_func(exact_kind, reference_column="gold")
    with pytest.raises(ValueError, match="no column 'gold'"):
        g(["Answer: 1"], answer=["1"])


def test_trl_odd_completion_shapes_never_raise(exact_kind):
    f = trl_reward_func(exact_kind)
    assert f([None, 42, {"role": "assistant", "content": None}], answer=["1", "1", "1"]) == [
        0.0,
        0.0,
        0.0,
    ]


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("completion", [
    [{"role": "assistant", "content": "", "tool_calls": [{"function": "f"}]}],
    [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 10**5000}}}]}],
    [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": _nested(5000)}}]}],
    [{"role": "assistant", "content": 10**5000}],
    _nested(5000),
])
def test_trl_chat_completions_python_cannot_write_never_raise(completion):
    # Each raised out of the reward function (AttributeError, ValueError, RecursionError) and
    # took the whole batch's rewards with it.
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    f = trl_reward_func("tools", workers=1)
    good = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    assert f([completion, good], tools=[tools, tools], expected=[[{"name": "f", "arguments": {}}]] * 2) == [0.0, 1.0]


def test_trl_function_pickles_without_its_verifier(exact_kind, exact_cls):
    f = trl_reward_func(exact_kind)
    f(["Answer: 1"], answer=["1"])
    clone = pickle.loads(pickle.dumps(f))
    assert clone._verifier is None and clone.__name__ == f.__name__
    assert clone(["Answer: 1"], answer=["1"]) == [1.0]
    with pytest.raises(ValueError):
        TRLRewardFunction(exact_cls(), rel_close=0.1)  # config only goes with a kind
    with pytest.raises(ValueError, match="unknown verifier kind"):
        trl_reward_func("no-such-kind")


# ----------------------------------------------------------------------------- verl


def test_verl_data_source_dispatch():
    assert kind_for_data_source("openai/gsm8k") == "math"
    assert kind_for_data_source("lighteval/MATH") == "math"
    assert kind_for_data_source("HuggingFaceH4/MATH-500") == "math"
    assert kind_for_data_source("aime2024") == "math"
    assert kind_for_data_source("codeforces") == "code"
    assert kind_for_data_source("livecodebench/code_generation") == "code"
    assert kind_for_data_source("google-research-datasets/mbpp") == "code"
    assert kind_for_data_source("openai/openai_humaneval") == "code"
    assert kind_for_data_source("bfcl_v3") == "tools"
    assert kind_for_data_source("anything", {"veristep_kind": "format"}) == "format"
    with pytest.raises(UnknownDataSource) as info:
        kind_for_data_source("hiyouga/geometry3k")
    assert isinstance(info.value, NotImplementedError)  # what verl's own dispatcher raises


def test_verl_score_dict_has_stable_keys_and_types(exact_kind):
    scorer = VerlScorer()
    info = {"veristep_kind": exact_kind}
    right = scorer("my_source", "Answer: 42", "42", info)
    none = scorer("my_source", "nothing", "42", info)
    unjudged = scorer("my_source", "Answer: 1", None, info)
    assert right == {
        "score": 1.0,
        "acc": True,
        "pred": "42",
        "status": "correct",
        "judged": True,
        "kind": exact_kind,
    }
    assert none["score"] == 0.0 and none["pred"] == "" and none["status"] == "no_answer"
    assert unjudged["score"] == 0.0 and unjudged["judged"] is False
    for result in (right, none, unjudged):
        assert list(result) == ["score", "acc", "pred", "status", "judged", "kind"]
        assert isinstance(result["score"], float) and isinstance(result["pred"], str)


def test_verl_batch_groups_by_kind_and_keeps_order(exact_cls):
    calls = []

    class Counting(exact_cls):
        def verify_batch(self, completions, references):
            calls.append(len(completions))
            return super().verify_batch(completions, references)

    from veristep.verifiers.core.registry import register_verifier

    register_verifier("counting", Counting, replace=True)
    scorer = VerlScorer()
    infos = [{"veristep_kind": "counting"}] * 3 + [{"veristep_kind": "exact"}]
    out = scorer.batch(
        ["a", "b", "c", "d"],
        ["Answer: 1", "Answer: 2", "x", "Answer: 4"],
        ["1", "1", "1", "4"],
        infos,
    )
    assert [o["score"] for o in out] == [1.0, 0.0, 0.0, 1.0]
    assert calls == [3]  # one verify_batch for the three items of that kind


def test_compute_score_loads_as_a_standalone_file_like_verl(exact_kind):
    # verl imports custom_reward_function.path with spec_from_file_location, outside the package.
    path = Path(adapters.__file__)
    spec = importlib.util.spec_from_file_location("custom_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = module.compute_score
    result = fn(
        data_source="x",
        solution_str="Answer: 3",
        ground_truth="3",
        extra_info={"veristep_kind": exact_kind},
    )
    assert result["score"] == 1.0
    batch = module.compute_score_batch(
        data_sources=["x", "x"],
        solution_strs=["Answer: 3", "Answer: 2"],
        ground_truths=["3", "3"],
        extra_infos=[{"veristep_kind": exact_kind}] * 2,
    )
    assert [b["score"] for b in batch] == [1.0, 0.0]


@pytest.mark.parametrize(("completion", "truth"), [
    ("\\boxed{nan}", float("nan")),  # str() made it the answer "nan": 1.0
    ("\\boxed{nan}", np.float64("nan")),
    ("\\boxed{nan}", np.array([np.nan])),
    ("\\boxed{\\infty}", float("inf")),
])
def test_verl_missing_number_ground_truth_is_bad_reference(completion, truth):
    score = compute_score("gsm8k", completion, truth, veristep_config={"math": {"workers": 1}})
    assert (score["status"], score["judged"], score["score"]) == ("bad_reference", False, 0.0)


@pytest.mark.parametrize(("data_source", "truth", "extra_info"), [
    ("gsm8k", int("7" * 4000) ** 2, None),  # str() raised ValueError past 4,300 digits
    ("gsm8k", b"\xff\xfe", None),  # UnicodeDecodeError
    ("gsm8k", "1", "not a dict"),  # AttributeError on extra_info.get
], ids=["huge int", "not UTF-8", "extra_info a string"])
def test_verl_careless_ground_truth_never_raises(data_source, truth, extra_info):
    scorer = VerlScorer({"math": {"workers": 1}})
    try:
        scores = scorer.batch([data_source] * 2, ["\\boxed{1}"] * 2, [truth, "1"], [extra_info, None])
    finally:
        scorer.close()
    assert scores[1]["status"] == "correct"
    assert scores[0]["status"] in ("bad_reference", "correct"), scores[0]


def test_verl_tools_ground_truth_json_cannot_read_is_text():
    record = adapters._reference_record("tools", "[" * 100_000, None)  # raised RecursionError
    assert record["ground_truth"] == "[" * 100_000


def test_verl_ground_truth_reaches_the_verifiers_parser_unchanged():
    record = adapters._reference_record(
        "code", '{"inputs": ["1 2\\n", ["3", "4"]], "outputs": ["3\\n", "7"]}', {"index": 0}
    )
    # the code verifier's own reference_from_record reads APPS, MBPP ... (one parser per kind)
    assert record["inputs"] == ["1 2\n", ["3", "4"]] and record["outputs"] == ["3\n", "7"]
    assert record["index"] == 0 and "tests" not in record
    math_record = adapters._reference_record("math", "[1, 2]", {"answer": "long solution"})
    assert math_record["answer"] == "[1, 2]"  # intervals stay text, extra_info's answer is replaced
    tools_record = adapters._reference_record("tools", '[{"name": "f", "arguments": {}}]', None)
    assert tools_record["expected"] == [{"name": "f", "arguments": {}}]


def test_verl_math():
    right = compute_score("openai/gsm8k", "so the answer is $\\boxed{18}$", "18")
    wrong = compute_score("lighteval/MATH", "$\\boxed{\\frac{1}{3}}$", "\\frac{1}{2}")
    assert right["score"] == 1.0 and right["acc"] is True and right["pred"]
    assert wrong["score"] == 0.0 and wrong["status"] == "wrong"
    # Unusable ground truths are unjudged, never a silent wrong answer (None is not "None").
    for truth in (None, "", "   "):
        missing = compute_score("openai/gsm8k", "$\\boxed{18}$", truth)
        assert missing["status"] == "bad_reference" and missing["judged"] is False, truth


def test_trl_math():
    f = trl_reward_func("math", workers=1)
    rewards = f(
        [[{"role": "assistant", "content": "$\\boxed{2}$"}], "I think $\\boxed{3}$"],
        answer=["2", "2"],
    )
    assert rewards == [1.0, 0.0]


# ----------------------------------------------------------------------------- TRL GRPOTrainer


def _grpo_run(model_dir: Path, out_dir: Path, reward_func, dataset_rows: list[dict]):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(
        output_dir=str(out_dir),
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=8,
        max_steps=2,
        use_cpu=True,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        bf16=False,
        learning_rate=1e-3,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=str(model_dir),
        reward_funcs=[reward_func],
        args=args,
        train_dataset=Dataset.from_list(dataset_rows),
    )
    trainer.train()
    return trainer


@pytest.mark.parametrize("conversational", [True, False])
def test_trl_grpo_trainer_runs_two_steps_with_veristep_rewards(
    tiny_model_dir, tmp_path, exact_kind, conversational
):
    pytest.importorskip("trl")
    seen = []
    veristep_reward = trl_reward_func(exact_kind)

    def recording(completions, **kwargs):
        rewards = veristep_reward(completions, **kwargs)
        seen.append((completions, list(kwargs["answer"]), rewards))
        return rewards

    recording.__name__ = veristep_reward.__name__
    # Conversational prompts go through the tokenizer's chat template, plain ones as they are;
    # odd rows have no reference, so veristep cannot judge them (None).
    rows = [
        {
            "prompt": [{"role": "user", "content": f"What is {i} + {i}?"}] if conversational
            else f"What is {i} + {i}? Answer: ",
            "answer": str(2 * i) if i % 2 == 0 else None,
        }
        for i in range(8)
    ]
    trainer = _grpo_run(tiny_model_dir, tmp_path / "grpo", recording, rows)
    assert trainer.state.global_step == 2
    assert len(seen) == 2
    for completions, answers, rewards in seen:
        if conversational:
            assert all(isinstance(c, list) and c[0]["role"] == "assistant" for c in completions)
        else:
            assert all(isinstance(c, str) for c in completions)
        assert len(rewards) == len(completions) == len(answers) == 4
        assert all((r is None) == (a is None) for r, a in zip(rewards, answers, strict=True))
    logs = [h for h in trainer.state.log_history if "veristep_exact/unjudged_frac" in h]
    assert len(logs) == 2
    for log, (_, answers, rewards) in zip(logs, seen, strict=True):
        # What TRL logged is what veristep returned for that step.
        assert log["veristep_exact/unjudged_frac"] == pytest.approx(answers.count(None) / 4)
        judged = [r for r in rewards if r is not None]
        if judged:
            assert log["rewards/veristep_exact/mean"] == pytest.approx(sum(judged) / len(judged))


def test_verl_reward_kwargs_config_and_missing_data_sources(exact_kind):
    info = {"veristep_kind": exact_kind}
    loose = {exact_kind: {"rel_close": 0.5}}
    # rel_close only changes numeric_close, which verl does not see; the config must reach it.
    assert adapters._scorer(loose).verifier(exact_kind).rel_close == 0.5
    assert adapters._scorer(None).verifier(exact_kind).rel_close == 1e-2
    assert compute_score("x", "Answer: 2", "2", info, veristep_config=loose)["score"] == 1.0
    # verl's offline evaluation passes data_sources=None.
    out = adapters.compute_score_batch(None, ["Answer: 2", "Answer: 3"], ["2", "2"], [info, info])
    assert [o["score"] for o in out] == [1.0, 0.0]
    with pytest.raises(UnknownDataSource):
        adapters.compute_score_batch(None, ["Answer: 2"], ["2"], None)
    with pytest.raises(ValueError, match="lack 'answer'"):
        VerlScorer().batch(["x"], ["Answer: 1"], [{"not": "an answer"}], [info])


_WEATHER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


@pytest.mark.parametrize(
    "truth",
    [
        {"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]},  # APPS
        {"tests": [{"stdin": "1 2\n", "stdout": "3\n"}]},  # veristep's own format
    ],
)
def test_verl_code_ground_truth_gets_the_same_verdict_as_the_api(truth):
    """verl passes ground truth through to the code verifier's parser: same verdict as the API."""
    from veristep.verifiers import get_verifier

    program = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    api_verifier = get_verifier("code", workers=1)
    for text in (program, program.replace("a + b", "a * b")):
        try:
            api = api_verifier.verify(text, api_verifier.reference_from_record(dict(truth))).status.value
        except (KeyError, ValueError):
            api = "refused"
        try:
            verl = compute_score("apps", text, json.dumps(truth))
            assert verl["kind"] == "code"
            verl_status = verl["status"]
        except ValueError:
            verl_status = "refused"
        assert verl_status == api


def test_verl_and_trl_tools():
    truth = {
        "tools": _WEATHER_TOOLS,
        "expected": [{"name": "get_weather", "arguments": {"city": ["Paris"]}}],
    }
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    assert compute_score("bfcl_simple", text, json.dumps(truth))["score"] == 1.0
    assert compute_score("tools", "no call", truth)["status"] == "no_call"
    # TRL conversational completion with structured tool_calls, as parse_response returns it.
    f = trl_reward_func("tools")
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    completion = [{"role": "assistant", "content": "", "tool_calls": [call]}]
    assert f([completion], tools=[_WEATHER_TOOLS], expected=[truth["expected"]]) == [1.0]


def test_a_slow_program_scores_zero_but_a_slow_checker_is_unjudged():
    from veristep.verifiers import Status, VerifyResult

    assert VerifyResult(0.0, False, Status.TIMEOUT).judged is False  # the checker gave up
    assert VerifyResult(0.0, False, Status.TIMEOUT, judged=True).judged is True
    assert VerifyResult(0.0, False, Status.WRONG).judged is True

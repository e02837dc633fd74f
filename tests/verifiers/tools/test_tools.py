"""ToolCallVerifier end to end: statuses, rewards, partial credit, batches, the shipped sample."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from veristep.verifiers import Status, Verifier, get_verifier
from veristep.verifiers.tools import ToolCallVerifier

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {
                "type": "object",
                "properties": {"tz": {"type": "string"}},
                "required": ["tz"],
            },
        },
    },
]
EXPECTED = [
    {"name": "get_weather", "arguments": {"city": "Paris", "days": [3, ""]}},
    {"name": "get_time", "arguments": {"tz": "UTC"}},
]
REF = {"tools": TOOLS, "expected": EXPECTED, "format": "auto"}


def hermes(*calls):
    return "\n".join(
        f"<tool_call>{json.dumps({'name': n, 'arguments': a})}</tool_call>" for n, a in calls
    )


@pytest.fixture(scope="module")
def verifier():
    return ToolCallVerifier(workers=0)


def test_registry_builds_a_verifier_that_meets_the_protocol():
    v = get_verifier("tools", workers=0, partial_credit=True)
    assert isinstance(v, ToolCallVerifier) and isinstance(v, Verifier) and v.kind == "tools"


@pytest.mark.parametrize(
    "completion,status",
    [
        (hermes(("get_time", {"tz": "UTC"}), ("get_weather", {"city": "PARIS"})), Status.CORRECT),
        ("Sunny, probably.", Status.NO_CALL),
        (hermes(("get_time", {"tz": "UTC"})) + "<tool_call>{oops}</tool_call>", Status.PARSE_ERROR),
        (hermes(("get_time", {"tz": "UTC"}), ("get_news", {})), Status.UNKNOWN_FUNCTION),
        (
            hermes(("get_time", {"tz": "UTC"}), ("get_weather", {"city": "Paris", "days": "3"})),
            Status.SCHEMA_VIOLATION,
        ),
        (
            hermes(("get_time", {"tz": "UTC"}), ("get_weather", {"city": "Paris", "hours": 3})),
            Status.SCHEMA_VIOLATION,
        ),
        (
            hermes(("get_time", {"tz": "UTC"}), ("get_weather", {"city": "Rome"})),
            Status.WRONG_ARGUMENTS,
        ),
        (hermes(("get_time", {"tz": "UTC"})), Status.WRONG_COUNT),
        (hermes(("get_time", {"tz": "UTC"}), ("get_time", {"tz": "CET"})), Status.WRONG),
    ],
)
def test_statuses(verifier, completion, status):
    result = verifier.verify(completion, REF)
    assert result.status is status
    assert result.correct is (status is Status.CORRECT)
    assert result.reward == (1.0 if status is Status.CORRECT else 0.0)
    assert status is Status.CORRECT or result.detail


def test_output_record_carries_calls_errors_and_format(verifier):
    completion = hermes(("get_time", {"tz": "UTC"})) + "<tool_call>{oops}</tool_call>"
    record = verifier.verify(completion, REF).to_record()
    assert record["status"] == "parse_error" and record["correct"] is False
    assert record["calls"] == [{"name": "get_time", "arguments": {"tz": "UTC"}}]
    assert record["errors"][0]["index"] == 1 and record["format"] == "hermes"
    json.dumps(record)  # everything is JSON-serialisable


def test_partial_credit_counts_unreadable_calls_against_the_score():
    v = ToolCallVerifier(workers=0, partial_credit=True)
    one_good = hermes(("get_time", {"tz": "UTC"}))
    assert v.verify(one_good, REF).reward == 0.5
    with_bad = one_good + "<tool_call>{oops}</tool_call>" + "<tool_call>{oops}</tool_call>"
    result = v.verify(with_bad, REF)
    assert result.status is Status.PARSE_ERROR and result.reward == pytest.approx(1 / 3)
    assert (
        v.verify(
            hermes(("get_time", {"tz": "UTC"}), ("get_weather", {"city": "Paris"})), REF
        ).reward
        == 1.0
    )


def test_no_call_expected():
    v = ToolCallVerifier(workers=0)
    ref = {"tools": TOOLS, "expected": []}
    assert v.verify("I don't need a tool for that.", ref).status is Status.CORRECT
    assert v.verify(hermes(("get_time", {"tz": "UTC"})), ref).status is Status.WRONG_COUNT


def test_reference_without_tools_skips_the_schema_check(verifier):
    ref = {"expected": [{"name": "lookup", "arguments": {"q": "x"}}]}
    assert verifier.verify('[lookup(q="X")]', ref).status is Status.CORRECT
    assert verifier.verify("[lookup(q=1)]", ref).status is Status.WRONG_ARGUMENTS


def test_explicit_format_only_reads_that_format(verifier):
    completion = '[get_time(tz="UTC")]'
    ref = {"tools": TOOLS, "expected": [EXPECTED[1]], "format": "hermes"}
    assert verifier.verify(completion, ref).status is Status.NO_CALL
    assert verifier.verify(completion, {**ref, "format": "pythonic"}).status is Status.CORRECT


def test_never_raises_on_model_output(verifier):
    for completion in [None, 42, "\x00" * 1000, "<tool_call>" * 1000, "[" * 100_000]:
        result = verifier.verify(completion, REF)  # type: ignore[arg-type]
        assert result.status in (Status.NO_CALL, Status.PARSE_ERROR)


def test_output_lists_are_capped_for_huge_completions():
    v = ToolCallVerifier(workers=0, max_reported=5)
    result = v.verify(hermes(*[("get_time", {"tz": "UTC"})] * 50), REF)
    assert result.status is Status.WRONG_COUNT
    assert len(result.extra["calls"]) == 5 and result.extra["n_calls"] == 50


def test_a_flood_of_calls_is_wrong_count_without_checking_each():
    v = ToolCallVerifier(workers=0, max_calls=10, partial_credit=True)
    flood = hermes(*[("get_time", {"tz": "UTC"})] * 11)
    result = v.verify(flood, REF)
    assert (
        result.status is Status.WRONG_COUNT
        and result.reward == 0.0
        and "max_calls" in result.detail
    )
    assert "matched" not in result.extra
    assert v.verify("<tool_call>{bad}</tool_call>" + flood, REF).status is Status.PARSE_ERROR
    # never below the number of expected calls
    many = {"expected": [{"name": "f", "arguments": {}}] * 12}
    assert v.verify("[" + ", ".join(["f()"] * 12) + "]", many).status is Status.CORRECT


@pytest.mark.parametrize(
    "reference,message",
    [
        ({"tools": TOOLS}, "expected"),
        ({"tools": TOOLS, "expected": {"name": "get_time"}}, "must be a list"),
        ({"tools": TOOLS, "expected": [{"name": "nope", "arguments": {}}]}, "missing from tools"),
        ({"tools": "x", "expected": []}, "must be a list"),
        ({"tools": TOOLS, "expected": [], "format": "yaml"}, "unknown tool-call format"),
    ],
)
def test_bad_references_raise_value_error(verifier, reference, message):
    with pytest.raises(ValueError, match=message):
        verifier.verify("x", reference)


@pytest.mark.parametrize(
    "config",
    [
        {"format": "yaml"},
        {"string_match": "fuzzy"},
        {"max_depth": 0},
        {"workers": -1},
        {"timeout": 0},
    ],
)
def test_bad_configuration_raises_value_error(config):
    with pytest.raises(ValueError):
        ToolCallVerifier(**config)


def test_reference_from_record():
    v = ToolCallVerifier(workers=0, format="pythonic")
    record = {"completion": "x", "tools": TOOLS, "expected": EXPECTED}
    assert v.reference_from_record(record) == {
        "tools": TOOLS,
        "expected": EXPECTED,
        "format": "pythonic",
    }
    with pytest.raises(KeyError):
        v.reference_from_record({"completion": "x"})


def test_sample_file_statuses(test_data_dir):
    v = ToolCallVerifier(workers=0)
    lines = (test_data_dir / "tools_sample.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert {r["format"] for r in records} >= {
        "auto",
        "hermes",
        "llama3_json",
        "mistral",
        "pythonic",
        "qwen3_xml",
    }
    for record in records:
        result = v.verify(record["completion"], v.reference_from_record(record))
        assert result.status.value == record["expected_status"], record["id"]


def test_verify_batch_in_worker_processes_matches_in_process(test_data_dir):
    records = [
        json.loads(line) for line in (test_data_dir / "tools_sample.jsonl").read_text().splitlines()
    ]
    completions = [r["completion"] for r in records]
    inline = ToolCallVerifier(workers=0)
    pooled = ToolCallVerifier(workers=2)
    try:
        refs = [pooled.reference_from_record(r) for r in records]
        batch = pooled.verify_batch(completions, refs)
        again = pooled.verify_batch(completions[:3], refs[:3])  # workers are reused
    finally:
        pooled.close()
    expected = [inline.verify(c, r) for c, r in zip(completions, refs, strict=True)]
    assert [r.status for r in batch] == [r.status for r in expected]
    assert [r.extra["calls"] for r in batch] == [r.extra["calls"] for r in expected]
    assert [r.status for r in again] == [r.status for r in expected[:3]]
    with pytest.raises(ValueError, match="references"):
        inline.verify_batch(completions, refs[:1])


_PIECES = [
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "[TOOL_CALLS]",
    "<function=get_time>",
    "<parameter=tz>",
    "</parameter>",
    "</function>",
    '{"name": "get_time", "arguments": {"tz": "UTC"}}',
    '{"name": "get_weather"',
    "[get_time(tz='UTC')]",
    "[ARGS]",
    "{",
    "}",
    "[",
    "]",
    '"',
    ",",
    " ",
    "\n",
]


@settings(max_examples=150, deadline=None)
@given(text=st.lists(st.sampled_from(_PIECES), max_size=30).map("".join), partial=st.booleans())
def test_property_verify_never_raises_and_reward_is_consistent(text, partial):
    v = ToolCallVerifier(workers=0, partial_credit=partial)
    result = v.verify(text, REF)
    assert result.status is not Status.INTERNAL_ERROR
    assert 0.0 <= result.reward <= 1.0
    assert (result.reward == 1.0) is result.correct is (result.status is Status.CORRECT)
    json.dumps(result.to_record())

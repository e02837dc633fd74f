"""ToolCallVerifier end to end: statuses, rewards, partial credit, batches, the shipped sample."""

from __future__ import annotations

import json
import pickle
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from veristep.verifiers import Status, Verifier, get_verifier
from veristep.verifiers.tools import ToolCallVerifier


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


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
        ({"format": "hermes"}, "expected"),
        ({"tools": TOOLS, "expected": None}, "must be a list"),
        ({"tools": TOOLS, "expected": {"name": "get_time"}}, "must be a list"),
        ({"tools": TOOLS, "expected": [{"name": "nope", "arguments": {}}]}, "missing from tools"),
        ({"tools": "x", "expected": []}, "must be a list"),
        ({"tools": TOOLS, "expected": [], "format": "yaml"}, "unknown tool-call format"),
        # RecursionError escaped verify() and verify_batch(), or came back as internal_error
        ({"expected": _nested(3000)}, "nested too deeply"),
        ({"expected": [{"name": "f", "arguments": {"a": _nested(3000)}}]}, "nested too deeply"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"a": _nested(960)}}}}], "expected": []}, "nested too deeply"),
    ],
)
def test_bad_references_are_unjudged_with_the_reason(verifier, reference, message):
    with pytest.raises(ValueError, match=message):
        verifier.check_reference(reference)
    for result in (verifier.verify("x", reference), verifier.verify_batch(["x"], [reference])[0]):
        assert result.status is Status.BAD_REFERENCE and not result.judged and result.reward == 0.0
        assert re.search(message, result.detail)


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


# ----------------------------------------------------------------------------- schema-only mode


def test_schema_only_mode_rewards_any_valid_call(verifier):
    ref = {"tools": TOOLS}  # no "expected": any call that fits the tools scores 1
    cases = [
        (hermes(("get_weather", {"city": "Oslo"})), Status.CORRECT, 1.0),
        (hermes(("get_weather", {"city": "Oslo"}), ("get_time", {"tz": "CET"})), Status.CORRECT, 1.0),
        (hermes(("get_weather", {"days": 2})), Status.SCHEMA_VIOLATION, 0.0),
        (hermes(("book_hotel", {"city": "Oslo"})), Status.UNKNOWN_FUNCTION, 0.0),
        ("<tool_call>{broken</tool_call>", Status.PARSE_ERROR, 0.0),
        ("I would rather not call anything.", Status.NO_CALL, 0.0),
    ]
    for text, status, reward in cases:
        for result in (verifier.verify(text, ref), ToolCallVerifier(workers=1).verify_batch([text], [ref])[0]):
            assert (result.status, result.reward) == (status, reward), text
    partial = ToolCallVerifier(workers=0, partial_credit=True)
    mixed = hermes(("get_weather", {"city": "Oslo"}), ("get_weather", {"days": 2}))
    assert partial.verify(mixed, ref).reward == 0.5


def test_schema_only_mode_from_a_record_needs_tools():
    v = ToolCallVerifier(workers=0)
    ref = v.reference_from_record({"completion": "x", "tools": TOOLS})
    assert "expected" not in ref and v.check_reference(ref).expected is None
    with pytest.raises(KeyError):
        v.reference_from_record({"completion": "x", "tools": []})


# ----------------------------------------------------------------------------- BFCL conformance

UNIT_TOOLS = [{"name": "convert", "parameters": {"type": "dict", "properties": {
    "value": {"type": "float"},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    "count": {"type": "integer"},
    "note": {"type": "string"}},
    "required": ["value", "note"]}}]


@pytest.mark.parametrize(
    "arguments,status",
    [
        ({"value": 1.0, "note": "x", "unit": ""}, Status.CORRECT),  # "" = left out; enum need not list it
        ({"value": 1.0, "note": "x"}, Status.CORRECT),
        ({"value": 1.0, "note": "x", "unit": "celsius"}, Status.CORRECT),
        ({"value": 1.0, "note": "x", "count": ""}, Status.SCHEMA_VIOLATION),  # "" is no integer (BFCL: type error)
        ({"value": 1.0, "note": ""}, Status.WRONG_ARGUMENTS),  # required: "" is a value, and not "x"
    ],
)
def test_explicit_empty_string_where_the_expected_call_allows_omission(verifier, arguments, status):
    ref = {"tools": UNIT_TOOLS, "expected": [{"convert": {
        "value": [1.0], "note": ["x"], "unit": ["celsius", ""], "count": [3, ""]}}]}
    assert verifier.verify(hermes(("convert", arguments)), ref).status is status


NESTED_TOOLS = [{"name": "query", "parameters": {"type": "dict", "properties": {
    "filter": {"type": "dict", "properties": {
        "school": {"type": "string"},
        "range": {"type": "dict", "properties": {"lo": {"type": "integer"}, "hi": {"type": "integer"}}}}},
    "conditions": {"type": "array", "items": {"type": "dict", "properties": {
        "field": {"type": "string"}, "value": {"type": "string"}}}},
    "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["filter"]}}]
NESTED_EXPECTED = [{"query": {
    # allowed values per key, at any depth (BFCL's possible-answer shape)
    "filter": [{"school": ["Bluebird High School", "Bluebird HS"],
                "range": [{"lo": [1, 2], "hi": [10]}, ""]}],
    "conditions": [[{"field": ["age"], "value": ["25", "twenty-five"]}, {"field": ["job"], "value": ["engineer"]}], ""],
    "tags": [["a", "b"], ""],
}}]


@pytest.mark.parametrize(
    "arguments,correct",
    [
        ({"filter": {"school": "bluebird hs"}}, True),
        ({"filter": {"school": "Bluebird HS", "range": {"lo": 2, "hi": 10}}}, True),
        ({"filter": {"school": "Bluebird HS", "range": {"lo": 3, "hi": 10}}}, False),
        ({"filter": {"school": "Bluebird HS", "range": {"lo": 1}}}, False),
        ({"filter": {"school": "Bluebird HS", "other": 1}}, False),
        ({"filter": {"school": "X"}}, False),
        ({"filter": {"school": "Bluebird HS"},
          "conditions": [{"field": "age", "value": "twenty-five"}, {"field": "job", "value": "engineer"}]}, True),
        ({"filter": {"school": "Bluebird HS"},
          "conditions": [{"field": "job", "value": "engineer"}, {"field": "age", "value": "25"}]}, False),
        ({"filter": {"school": "Bluebird HS"}, "tags": ["a", "b"]}, True),  # an array parameter's literal list
        ({"filter": {"school": "Bluebird HS"}, "tags": ["a"]}, False),
    ],
)
def test_allowed_values_at_any_depth_of_nested_objects(verifier, arguments, correct):
    ref = {"tools": NESTED_TOOLS, "expected": NESTED_EXPECTED}
    result = verifier.verify(hermes(("query", arguments)), ref)
    assert result.correct is correct, result.detail


@pytest.mark.parametrize(
    "kind,value",
    [("String", "abc"), ("Boolean", True), ("boolean", False), ("long", 5), ("integer", 3), ("float", 1.5),
     ("double", 2.5), ("char", "c"), ("Array", [1]), ("ArrayList", ["x"]), ("HashMap", {"k": "v"}),
     ("Bigint", 7), ("any", "anything"), ("Any", 3)],
)
def test_java_and_javascript_type_names_are_read_as_json_schema(verifier, kind, value):
    tools = [{"name": "Util.run", "parameters": {"type": "dict", "properties": {"arg": {"type": kind}},
                                                  "required": ["arg"]}}]
    ref = {"tools": tools, "expected": [{"Util.run": {"arg": [value]}}]}
    assert verifier.verify(hermes(("Util.run", {"arg": value})), ref).status is Status.CORRECT


@pytest.mark.parametrize(
    "expected,message",
    [
        ({"value": [1.0], "note": ["x"], "unit": ["kelvin"]}, "breaks the function's own schema"),
        ({"value": [1.0], "note": [None]}, "breaks the function's own schema"),
        ({"value": [1.0], "note": [None, 5]}, "breaks the function's own schema"),
        ({"value": ["dontcare"], "note": ["x"]}, "breaks the function's own schema"),
        ({"value": [1.0]}, "lacks required parameter"),
        ({"value": [1.0], "note": ["x"], "colour": ["red"]}, "not a parameter"),
    ],
)
def test_expected_values_that_break_their_own_schema_are_a_bad_reference(verifier, expected, message):
    ref = {"tools": UNIT_TOOLS, "expected": [{"convert": expected}]}
    result = verifier.verify(hermes(("convert", {"value": 1.0, "note": "x"})), ref)
    assert result.status is Status.BAD_REFERENCE and not result.judged
    assert message in result.detail


def test_alternatives_that_break_the_schema_are_dropped_and_the_rest_judged(verifier):
    # BFCL's answers list alternatives such as venue: ["", true] or unit: "N/A": one bad
    # alternative used to make the whole reference unusable (issue 31: ~180 correct calls of
    # BFCL's live categories came back unjudged).
    expected = {"value": [1.0], "note": ["x", None], "unit": ["celsius", "N/A", ""]}
    ref = {"tools": UNIT_TOOLS, "expected": [{"convert": expected}]}
    for arguments, correct in [({"value": 1.0, "note": "x"}, True),
                               ({"value": 1.0, "note": "x", "unit": "celsius"}, True),
                               ({"value": 1.0, "note": "y"}, False)]:
        result = verifier.verify(hermes(("convert", arguments)), ref)
        assert result.judged and result.correct is correct, (arguments, result.detail)
        dropped = result.extra["dropped_alternatives"]
        assert len(dropped) == 2 and "note=None" in dropped[0] and "'N/A'" in dropped[1]
    # A required argument whose only alternative is to leave it out cannot be matched.
    only_omit = {"value": [1.0], "note": [None, ""]}
    result = verifier.verify(hermes(("convert", {"value": 1.0})), {"tools": UNIT_TOOLS,
                                                                   "expected": [{"convert": only_omit}]})
    assert result.status is Status.BAD_REFERENCE
    # ... and its detail says so (it read "every allowed value breaks the schema (None)")
    required_omit = {"value": [1.0], "note": [""]}
    result = verifier.verify(hermes(("convert", {"value": 1.0})), {"tools": UNIT_TOOLS,
                                                                   "expected": [{"convert": required_omit}]})
    assert result.status is Status.BAD_REFERENCE and 'only allowed value is ""' in result.detail, result.detail


def test_java_and_javascript_references_read_arguments_as_typed_literals(verifier):
    # BFCL's Java/JavaScript answers and calls carry "true", "5L", "1.5f", collection code:
    # BFCL accepts them, and a JSON Schema check called each a wrong type (issue 31.1).
    tools = [{"name": "Util.run", "parameters": {"type": "dict", "properties": {
        "flag": {"type": "boolean"}, "n": {"type": "long"}, "x": {"type": "float"},
        "xs": {"type": "ArrayList"}, "big": {"type": "Bigint"}}, "required": ["flag", "n"]}}]
    expected = [{"Util.run": {"flag": ["true"], "n": ["5L"], "x": ["1.5f", ""],
                              "xs": ["new ArrayList<>(Arrays.asList(1, 2))", ""], "big": ["7n", ""]}}]
    java = {"tools": tools, "expected": expected, "language": "java"}
    cases = [
        ({"flag": "true", "n": "5L"}, Status.CORRECT),
        ({"flag": True, "n": 5, "x": "1.5"}, Status.CORRECT),  # JSON values are read as before
        ({"flag": "true", "n": "5", "xs": "new ArrayList<>(Arrays.asList(1, 2))", "big": "7n"},
         Status.CORRECT),
        ({"flag": "false", "n": "5"}, Status.WRONG_ARGUMENTS),
        ({"flag": "true", "n": "6L"}, Status.WRONG_ARGUMENTS),
        ({"flag": "yes?", "n": "5"}, Status.SCHEMA_VIOLATION),  # not a Java boolean, nor a name
        ({"flag": "yes", "n": "5"}, Status.WRONG_ARGUMENTS),  # a name (a variable), and not "true"
    ]
    for arguments, status in cases:
        assert verifier.verify(hermes(("Util.run", arguments)), java).status is status, arguments
    # Without the language the same reference's values break the schema: unjudged, as before.
    plain = {"tools": tools, "expected": expected}
    assert verifier.verify(hermes(("Util.run", {"flag": "true", "n": "5L"})), plain).status \
        is Status.BAD_REFERENCE
    unknown = {**java, "language": "cobol"}
    assert verifier.verify(hermes(("Util.run", {"flag": True, "n": 5})), unknown).status \
        is Status.BAD_REFERENCE
    # A JSONL line / dataset row with "language" (the CLI, TRL and verl read references with
    # reference_from_record) keeps it; the bfcl bench's CLI run disagreed with verify() on 78
    # Java/JavaScript cases when it was dropped.
    record = {"completion": "", **java}
    assert verifier.reference_from_record(record)["language"] == "java"
    assert "language" not in verifier.reference_from_record({"tools": tools, "expected": expected})
    assert verifier.verify(hermes(("Util.run", {"flag": "true", "n": "5L"})),
                           verifier.reference_from_record(record)).status is Status.CORRECT


def test_batch_sends_each_reference_once_per_chunk_and_caches_it():
    v = ToolCallVerifier(workers=1)
    ref = {"tools": UNIT_TOOLS, "expected": [{"convert": {"value": [1.0], "note": ["x"]}}]}
    texts = [hermes(("convert", {"value": 1.0, "note": "x"})), hermes(("convert", {"value": 2.0, "note": "x"}))] * 40
    refs = [dict(ref) for _ in texts]  # equal references in different objects, as a JSONL file gives them
    sent = []
    original = v._runner.run

    def spy(items, references=None):
        sent.append((len(items), len(references)))
        return original(items, references)

    v._runner.run = spy
    results = v.verify_batch(texts, refs)
    assert [r.correct for r in results] == [True, False] * 40
    assert sent == [(80, 1)]
    v.close()


def test_reference_key_is_the_sorted_json_text_and_never_confuses_equal_looking_values():
    from verifiers.tools import verifier as tools_verifier

    refs = [{"tools": UNIT_TOOLS, "expected": [{"convert": {"value": [v]}}]} for v in (1, 1.0, True, "1", None)]
    refs.append({"expected": refs[0]["expected"], "tools": UNIT_TOOLS})  # another key order
    for _ in range(2):  # the second round answers from the cache
        for ref in refs:
            fresh = json.loads(json.dumps(ref))  # an equal value in new objects, as a decoded row is
            assert tools_verifier.reference_key(fresh) == json.dumps(ref, sort_keys=True)
    assert len({tools_verifier.reference_key(r) for r in refs}) == 5  # 1, 1.0, true, "1", null
    for not_json in ({"tools": {1, 2}}, {"tools": b"x"}, {("a",): 1}):  # marshal takes these, json does not
        for _ in range(2):
            with pytest.raises(TypeError):
                tools_verifier.reference_key(not_json)
    for i in range(tools_verifier._KEY_CACHE + 10):
        tools_verifier.reference_key({"tools": [], "n": i})
    assert len(tools_verifier._keys) <= tools_verifier._KEY_CACHE
    v = ToolCallVerifier(workers=1)
    [result] = v.verify_batch(["x"], [{"tools": {1, 2}}])
    assert result.status is Status.BAD_REFERENCE and "JSON data" in result.detail
    v.close()


def test_null_for_an_optional_parameter_means_not_given(verifier):
    # BFCL's answers list None for optional parameters (math.power(mod=None)); a JSON Schema
    # check called every such correct call a wrong type (issue 31.1, 128 cases in bfcl_bench).
    tools = [{"name": "math.power", "parameters": {"type": "dict", "properties": {
        "base": {"type": "integer"}, "exponent": {"type": "integer"}, "mod": {"type": "integer"}},
        "required": ["base", "exponent"]}}]

    def ref(mod):
        return {"tools": tools, "expected": [{"math.power": {"base": [2], "exponent": [3], "mod": mod}}]}

    given, left_out = {"base": 2, "exponent": 3, "mod": None}, {"base": 2, "exponent": 3}
    cases = [
        ([None], given, Status.CORRECT), ([None], left_out, Status.WRONG_ARGUMENTS),  # as BFCL
        ([None, ""], left_out, Status.CORRECT), ([""], given, Status.WRONG_ARGUMENTS),
        ([5], given, Status.WRONG_ARGUMENTS),
        ([None], {"base": None, "exponent": 3}, Status.SCHEMA_VIOLATION),  # required: typed
        ([None], {"base": 2, "exponent": 3, "mod": "x"}, Status.SCHEMA_VIOLATION),
    ]
    for mod, arguments, status in cases:
        assert verifier.verify(hermes(("math.power", arguments)), ref(mod)).status is status, (mod, arguments)


def test_a_value_equal_to_the_declared_default_passes_the_schema(verifier):
    # BFCL's live function docs declare defaults their own type or enum rejects (`year`:
    # integer, default "dontcare", "Use 'dontcare' to include songs from any year"; `unit`:
    # enum seconds/milliseconds, default "N/A"), and its answers list them: a call that sends
    # the documented default was a schema_violation (issue 31, ~150 cases in bfcl_bench).
    tools = [{"name": "find_music", "parameters": {"type": "dict", "properties": {
        "genre": {"type": "string", "enum": ["Rock", "Pop"], "default": "dontcare"},
        "year": {"type": "integer", "description": "Use 'dontcare' for any year.", "default": "dontcare"},
        "unit": {"type": "string", "enum": ["seconds", "milliseconds"], "default": "N/A"},
        "tags": {"type": "array", "items": {"type": "string"}, "default": []}},
        "required": ["genre"]}}]

    def ref(**allowed):
        expected = {"genre": ["Rock"], "year": ["", "dontcare"], "unit": ["", "N/A"], "tags": ["", []]}
        return {"tools": tools, "expected": [{"find_music": {**expected, **allowed}}]}

    cases = [
        (ref(), {"genre": "Rock", "year": "dontcare"}, Status.CORRECT),
        (ref(), {"genre": "Rock", "unit": "N/A", "tags": []}, Status.CORRECT),
        (ref(), {"genre": "Rock"}, Status.CORRECT),
        (ref(), {"genre": "Rock", "year": 1999}, Status.WRONG_ARGUMENTS),  # valid, not allowed
        (ref(year=[1999]), {"genre": "Rock", "year": "dontcare"}, Status.WRONG_ARGUMENTS),
        (ref(), {"genre": "Rock", "year": "any"}, Status.SCHEMA_VIOLATION),  # not the default
        (ref(), {"genre": "Rock", "unit": "n/a"}, Status.SCHEMA_VIOLATION),  # the default exactly
        (ref(), {"genre": "Rock", "year": 0}, Status.WRONG_ARGUMENTS),
        (ref(genre=["dontcare"]), {"genre": "dontcare"}, Status.BAD_REFERENCE),  # required: no default
        (ref(genre=["Rock", "dontcare"]), {"genre": "dontcare"}, Status.SCHEMA_VIOLATION),
    ]
    for reference, arguments, status in cases:
        result = verifier.verify(hermes(("find_music", arguments)), reference)
        assert result.status is status, (arguments, result.detail)
    # The documented default is an alternative like any other: not dropped from the reference.
    result = verifier.verify(hermes(("find_music", {"genre": "Rock", "year": "dontcare"})),
                             ref(year=["dontcare"]))
    assert result.correct and "dropped_alternatives" not in result.extra


def test_an_enum_of_item_values_on_an_array_parameter_constrains_its_items(verifier):
    # BFCL's live docs put the items' enum on the array (`metrics`: type array, enum
    # ["temperature", ...]): as written no array fits it, so every call was a schema_violation
    # and every reference naming metrics a bad_reference (issue 31).
    tools = [{"name": "read_sensors", "parameters": {"type": "dict", "properties": {
        "metrics": {"type": "array", "items": {"type": "string"},
                    "enum": ["temperature", "humidity", "co2"]},
        "pairs": {"type": "array", "enum": [[1, 2], [3]]}},
        "required": []}}]

    def ref(metrics, pairs=("",)):
        return {"tools": tools, "expected": [{"read_sensors": {"metrics": metrics, "pairs": list(pairs)}}]}

    cases = [
        (ref([["temperature", "humidity"]]), {"metrics": ["temperature", "humidity"]}, Status.CORRECT),
        (ref(["", []]), {"metrics": []}, Status.CORRECT),
        (ref([["co2"]]), {"metrics": ["view"]}, Status.SCHEMA_VIOLATION),
        (ref([["co2"]]), {"metrics": "co2"}, Status.SCHEMA_VIOLATION),
        (ref([["view"]]), {"metrics": ["view"]}, Status.BAD_REFERENCE),
        # an enum of arrays on an array is a list of whole values, as JSON Schema says
        (ref([["co2"]], [[1, 2]]), {"metrics": ["co2"], "pairs": [1, 2]}, Status.CORRECT),
        (ref([["co2"]], [[3], [1, 2]]), {"metrics": ["co2"], "pairs": [2, 1]}, Status.SCHEMA_VIOLATION),
    ]
    for reference, arguments, status in cases:
        result = verifier.verify(hermes(("read_sensors", arguments)), reference)
        assert result.status is status, (arguments, result.detail)


def test_java_and_javascript_names_of_constants_pass_as_values_of_any_type(verifier):
    # BFCL's Java answers pass constants (`suspendPolicy="EventRequest.SUSPEND_ALL"` for an
    # int): a name is an expression of the language whose type only its compiler knows, and
    # each such reference was a bad_reference (issue 31, simple_java_26/87/88).
    tools = [{"name": "Vm.request", "parameters": {"type": "dict", "properties": {
        "policy": {"type": "integer"}, "flag": {"type": "boolean"},
        "level": {"type": "integer", "enum": [1, 2]}}, "required": ["policy"]}}]

    def ref(language="java", **allowed):
        expected = {"policy": ["EventRequest.SUSPEND_ALL"], "flag": ["", "true"], "level": ["", "2"]}
        return {"tools": tools, "expected": [{"Vm.request": {**expected, **allowed}}], "language": language}

    cases = [
        (ref(), {"policy": "EventRequest.SUSPEND_ALL"}, Status.CORRECT),
        (ref(), {"policy": "EventRequest.SUSPEND_NONE"}, Status.WRONG_ARGUMENTS),
        (ref(), {"policy": "2"}, Status.WRONG_ARGUMENTS),
        (ref(policy=["2"]), {"policy": "EventRequest.SUSPEND_ALL"}, Status.WRONG_ARGUMENTS),
        (ref(policy=["2"]), {"policy": "2"}, Status.CORRECT),
        (ref(), {"policy": "EventRequest.SUSPEND_ALL", "flag": "isEnabled"}, Status.WRONG_ARGUMENTS),
        (ref(language="javascript", policy=["SUSPEND_ALL"]), {"policy": "SUSPEND_ALL"}, Status.CORRECT),
        (ref(), {"policy": "EventRequest.SUSPEND_ALL", "flag": "null"}, Status.SCHEMA_VIOLATION),
        (ref(), {"policy": "suspend all"}, Status.SCHEMA_VIOLATION),  # not a name
        (ref(), {"policy": "2 + x"}, Status.SCHEMA_VIOLATION),
        # without a language a string is a string, as JSON Schema says
        (ref(language=None, policy=[2]), {"policy": "SUSPEND_ALL"}, Status.SCHEMA_VIOLATION),
    ]
    for reference, arguments, status in cases:
        if reference["language"] is None:
            del reference["language"]
        result = verifier.verify(hermes(("Vm.request", arguments)), reference)
        assert result.status is status, (arguments, result.detail)


def test_default_follows_bfcl_on_left_out_and_restated_defaults_schema_defaults_opts_in():
    # BFCL rejects a left-out parameter whose answer lists no "" even when the expected value is
    # the schema's default, and an unexpected parameter even when it restates the default;
    # bfcl_bench found 69 such calls veristep accepted when schema_defaults was the default
    # (issue 31). The default is BFCL's rule now; schema_defaults=True is the opt-in that takes
    # "the same call in effect" as correct.
    tools = [{"name": "ttest", "parameters": {"type": "dict", "properties": {
        "xs": {"type": "array", "items": {"type": "float"}},
        "equal_variance": {"type": "boolean", "default": True},
        "alpha": {"type": "float", "default": 0.05}}, "required": ["xs"]}}]
    ref = {"tools": tools, "expected": [{"ttest": {"xs": [[1.0, 2.0]], "equal_variance": [True]}}]}
    cases = [
        # (arguments, by default = BFCL's verdict, with schema_defaults=True)
        ({"xs": [1.0, 2.0]}, Status.WRONG_ARGUMENTS, Status.CORRECT),
        ({"xs": [1.0, 2.0], "equal_variance": True}, Status.CORRECT, Status.CORRECT),
        ({"xs": [1.0, 2.0], "equal_variance": True, "alpha": 0.05}, Status.WRONG_ARGUMENTS, Status.CORRECT),
        ({"xs": [1.0, 2.0], "equal_variance": False}, Status.WRONG_ARGUMENTS, Status.WRONG_ARGUMENTS),
    ]
    default, opt_in = ToolCallVerifier(workers=0), ToolCallVerifier(workers=0, schema_defaults=True)
    assert default.schema_defaults is False
    for arguments, by_bfcl, by_opt_in in cases:
        text = hermes(("ttest", arguments))
        assert default.verify(text, ref).status is by_bfcl, arguments
        assert opt_in.verify(text, ref).status is by_opt_in, arguments
    # the registry and a pickled verifier (sent to workers) keep the choice
    assert get_verifier("tools").schema_defaults is False
    assert get_verifier("tools", schema_defaults=True).schema_defaults is True
    assert pickle.loads(pickle.dumps(opt_in)).verify(hermes(("ttest", {"xs": [1.0, 2.0]})), ref).correct


def test_a_float_for_an_integer_is_a_wrong_type_unless_integer_floats():
    # JSON Schema counts 2.0 as an integer; BFCL (and Python) call it a float: bfcl_bench's
    # side check found 2,512 of its questions' calls with 2 -> 2.0 that veristep accepted and
    # BFCL rejected (issue 31). BFCL's rule is the default now, at any depth;
    # integer_floats=True gives JSON Schema's.
    tools = [{"name": "book", "parameters": {"type": "dict", "properties": {
        "nights": {"type": "integer"}, "price": {"type": "float"},
        "rooms": {"type": "array", "items": {"type": "integer"}},
        "guest": {"type": "dict", "properties": {"age": {"type": "integer"}}},
        "retries": {"type": "integer", "default": 1.0}},
        "required": ["nights"]}}]
    ref = {"tools": tools, "expected": [{"book": {"nights": [2], "price": ["", 100.0], "rooms": ["", [1, 2]],
                                                  "guest": ["", {"age": [30]}], "retries": ["", 1.0]}}]}
    cases = [
        ({"nights": 2}, Status.CORRECT, Status.CORRECT),
        ({"nights": 2.0}, Status.CORRECT, Status.SCHEMA_VIOLATION),
        ({"nights": 2, "price": 100}, Status.CORRECT, Status.CORRECT),  # an int for a float: fine
        ({"nights": 2, "rooms": [1.0, 2]}, Status.CORRECT, Status.SCHEMA_VIOLATION),
        ({"nights": 2, "guest": {"age": 30.0}}, Status.CORRECT, Status.SCHEMA_VIOLATION),
        ({"nights": 2.5}, Status.SCHEMA_VIOLATION, Status.SCHEMA_VIOLATION),
        ({"nights": 2, "retries": 1.0}, Status.CORRECT, Status.CORRECT),  # the declared default
    ]
    lenient, strict = ToolCallVerifier(workers=0, integer_floats=True), ToolCallVerifier(workers=0)
    for arguments, by_json_schema, by_bfcl in cases:
        text = hermes(("book", arguments))
        assert lenient.verify(text, ref).status is by_json_schema, arguments
        result = strict.verify(text, ref)
        assert result.status is by_bfcl, (arguments, result.detail)
    result = strict.verify(hermes(("book", {"nights": 2.0})), ref)
    assert "2.0 is a float, not an integer" in result.detail, result.detail
    # the same in pythonic form, where 2.0 is a Python float
    assert strict.verify("[book(nights=2.0)]", ref).status is Status.SCHEMA_VIOLATION

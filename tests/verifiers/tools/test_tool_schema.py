"""Schema validation: one test per violation type, nested objects and arrays, BFCL type names."""

from __future__ import annotations

import pickle
import random
import time

import pytest
from veristep.verifiers.tools.parsers import ToolCall
from veristep.verifiers.tools.schema import ToolSchema, Violation, normalize_parameters_schema

BOOK = {
    "type": "function",
    "function": {
        "name": "book_flight",
        "description": "Book a flight.",
        "parameters": {
            "type": "object",
            "properties": {
                "origin": {"type": "string"},
                "seats": {"type": "integer", "minimum": 1},
                "cabin": {"type": "string", "enum": ["economy", "business"]},
                "refundable": {"type": "boolean"},
                "passengers": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                        "required": ["name"],
                        "additionalProperties": False,
                    },
                },
                "contact": {
                    "type": "object",
                    "properties": {"email": {"type": "string"}},
                    "required": ["email"],
                },
            },
            "required": ["origin", "seats"],
        },
    },
}
SCHEMA = ToolSchema.from_tools([BOOK])


def kinds(arguments, name="book_flight"):
    return [(i.kind, i.path) for i in SCHEMA.validate(ToolCall(name, arguments))]


def test_valid_call_has_no_issues():
    args = {
        "origin": "SFO",
        "seats": 2,
        "cabin": "economy",
        "refundable": False,
        "passengers": [{"name": "Ann", "age": 30}, {"name": "Bo"}],
        "contact": {"email": "a@b.c", "phone": "123"},  # nested objects are open unless closed
    }
    assert kinds(args) == []


def test_unknown_function():
    assert kinds({}, name="book_hotel") == [(Violation.UNKNOWN_FUNCTION, "")]


def test_missing_required():
    assert kinds({"origin": "SFO"}) == [(Violation.MISSING_REQUIRED, "")]


def test_unexpected_parameter_one_issue_per_name():
    assert kinds({"origin": "SFO", "seats": 1, "pets": 2, "meal": "veg"}) == [
        (Violation.UNEXPECTED_PARAMETER, "/pets"),
        (Violation.UNEXPECTED_PARAMETER, "/meal"),
    ]


@pytest.mark.parametrize(
    "value",
    ["2", 2.5, True, None, [2]],
    ids=["string", "float", "bool-is-not-int", "null", "list"],
)
def test_wrong_type(value):
    assert kinds({"origin": "SFO", "seats": value}) == [(Violation.WRONG_TYPE, "/seats")]


def test_integral_float_counts_as_integer_like_json_schema():
    assert kinds({"origin": "SFO", "seats": 2.0}) == []


def test_enum_violation():
    assert kinds({"origin": "SFO", "seats": 1, "cabin": "first"}) == [(Violation.ENUM, "/cabin")]


def test_other_constraints():
    assert kinds({"origin": "SFO", "seats": 0}) == [(Violation.CONSTRAINT, "/seats")]


def test_nested_array_of_objects():
    args = {"origin": "SFO", "seats": 1, "passengers": [{"name": "Ann"}, {"age": "old", "x": 1}]}
    assert sorted(kinds(args), key=str) == sorted(
        [
            (Violation.MISSING_REQUIRED, "/passengers/1"),
            (Violation.UNEXPECTED_PARAMETER, "/passengers/1"),
            (Violation.WRONG_TYPE, "/passengers/1/age"),
        ],
        key=str,
    )


def test_nested_object():
    assert kinds({"origin": "SFO", "seats": 1, "contact": {"email": 5}}) == [
        (Violation.WRONG_TYPE, "/contact/email")
    ]
    assert kinds({"origin": "SFO", "seats": 1, "contact": {}}) == [
        (Violation.MISSING_REQUIRED, "/contact")
    ]


def test_issue_count_is_bounded_for_huge_bad_calls():
    args = {"origin": "SFO", "seats": 1, "passengers": [{"name": i} for i in range(10_000)]}
    issues = SCHEMA.validate(ToolCall("book_flight", args))
    assert 1 <= len(issues) <= 20


UNIQUE = ToolSchema.from_tools([{"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"arr": {"type": "array", "uniqueItems": True}}}}}])


@pytest.mark.parametrize(("arr", "unique"), [
    ([{"a": i} for i in range(6_000)], True),  # jsonschema compared every pair: 45 s
    ([{"a": i} for i in range(6_000)] + [{"a": 0}], False),
    ([k * ((1 << 61) - 1) for k in range(1, 24_001)], True),  # integers whose hashes collide
    ([1, 1.0], False), ([1, True], True), ([[1], [1.0]], False), ([{"a": [True]}, {"a": [1]}], True),
])
def test_unique_items_is_checked_in_linear_time(arr, unique):
    started = time.monotonic()
    issues = UNIQUE.validate(ToolCall("f", {"arr": arr}))
    assert time.monotonic() - started < 3.0
    assert [i.kind for i in issues] == ([] if unique else [Violation.CONSTRAINT])
    if not unique:
        assert "non-unique elements" in issues[0].message


def test_unique_items_agrees_with_jsonschema():
    from jsonschema import Draft202012Validator

    values = [1, 1.0, True, False, 0, -0.0, 0.5, None, "a", "1", [1], [1.0], [True], {"a": 1},
              {"a": 1.0}, {"a": True}, [], {}, [[1]], [[True]], 2**70, float(2**70)]
    rng = random.Random(0)
    peer = Draft202012Validator({"uniqueItems": True})
    for _ in range(2_000):
        arr = [rng.choice(values) for _ in range(rng.randint(0, 4))]
        assert bool(UNIQUE.validate(ToolCall("f", {"arr": arr}))) == (not peer.is_valid(arr)), arr


def _with_pattern(pattern: str) -> ToolSchema:
    return ToolSchema.from_tools([{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"s": {"type": "string", "pattern": pattern}}}}}])


def test_a_runaway_pattern_is_the_arguments_violation_within_its_budget():
    # Under `re`, ^(a|a)*$ on 40 letters and a '!' runs for hours; the call was unjudged.
    schema = _with_pattern("^(a|a)*$")
    started = time.monotonic()
    issues = schema.validate(ToolCall("f", {"s": "a" * 40 + "!"}))
    assert time.monotonic() - started < 3.0
    assert [i.kind for i in issues] == [Violation.CONSTRAINT] and "counted as not matching" in issues[0].message


def test_a_completions_calls_share_one_pattern_budget():
    # With a budget per call, 20 calls of a runaway match outlasted the item's limit: unjudged.
    from veristep.verifiers.tools import ToolCallVerifier

    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"s": {"type": "string", "pattern": "^(a|a)*$"}}}}}]
    call = '<tool_call>{"name": "f", "arguments": {"s": "' + "a" * 40 + 'b"}}</tool_call>'
    with ToolCallVerifier(workers=1, timeout=5.0) as verifier:
        started = time.monotonic()
        result = verifier.verify_batch([call * 30], [{"tools": tools, "expected": [{"name": "f", "arguments": {}}] * 30}])[0]
        assert result.judged and result.reward == 0.0, (result.status, result.detail)
    assert time.monotonic() - started < 5.0


@pytest.mark.parametrize(("pattern", "value", "ok"), [
    ("^[a-z]+@example\\.com$", "ann@example.com", True),
    ("^[a-z]+@example\\.com$", "ann@example.org", False),
    ("\\d{3}", "ab123", True),  # search, not match, as JSON Schema says
    ("^\\d{3}$", "12", False),
])
def test_patterns_keep_their_meaning(pattern, value, ok):
    assert (_with_pattern(pattern).validate(ToolCall("f", {"s": value})) == []) is ok


def _with_pattern_properties(closed: bool, pattern: str = "^(a|a)*$") -> ToolSchema:
    params = {"type": "object", "properties": {"id": {"type": "string"}},
              "patternProperties": {pattern: {"type": "integer"}}}
    if closed:
        params["additionalProperties"] = False
    return ToolSchema.from_tools([{"type": "function", "function": {"name": "f", "parameters": params}}])


@pytest.mark.parametrize("closed", [False, True])
def test_a_property_name_that_runs_a_pattern_away_is_the_calls_violation(closed):
    # jsonschema matches property names with `re`: ^(a|a)*$ on 40 letters and a '!' runs for hours.
    started = time.monotonic()
    issues = _with_pattern_properties(closed).validate(ToolCall("f", {"a" * 40 + "!": 1}))
    assert time.monotonic() - started < 3.0
    assert issues and all("counted as not matching" in i.message for i in issues), issues


def test_pattern_and_additional_properties_agree_with_jsonschema():
    from jsonschema import Draft202012Validator

    rng = random.Random(0)
    names, values = ["a", "ab", "x1", "x", "id", "b_2", ""], [1, "s", 1.5, [1]]  # null: "not given" here
    for pattern in ("^a", "^x\\d$", "b", "^$"):
        for closed in (False, True):
            schema = _with_pattern_properties(closed, pattern)
            peer = Draft202012Validator(schema.functions["f"].parameters)
            for _ in range(300):
                args = {rng.choice(names): rng.choice(values) for _ in range(rng.randint(0, 3))}
                assert (schema.validate(ToolCall("f", args)) == []) == peer.is_valid(args), (pattern, closed, args)


def test_bfcl_type_names_and_open_parameters():
    bfcl = {
        "name": "calc",
        "parameters": {
            "type": "dict",
            "properties": {
                "x": {"type": "float"},
                "xs": {"type": "tuple", "items": {"type": "integer"}},
                "anything": {"type": "any"},
            },
            "required": ["x"],
        },
    }
    schema = ToolSchema.from_tools([bfcl])
    assert schema.validate(ToolCall("calc", {"x": 1, "xs": [1, 2], "anything": {"a": 1}})) == []
    assert [i.kind for i in schema.validate(ToolCall("calc", {"x": "1"}))] == [Violation.WRONG_TYPE]
    open_schema = ToolSchema.from_tools([bfcl], closed=False)
    assert open_schema.validate(ToolCall("calc", {"x": 1.5, "extra": 1})) == []


def test_function_without_parameters_accepts_only_empty_arguments():
    schema = ToolSchema.from_tools([{"type": "function", "function": {"name": "now"}}])
    assert schema.validate(ToolCall("now", {})) == []
    assert [i.kind for i in schema.validate(ToolCall("now", {"tz": "UTC"}))] == [
        Violation.UNEXPECTED_PARAMETER
    ]


def test_explicit_additional_properties_is_respected():
    params = normalize_parameters_schema({"type": "object", "additionalProperties": True})
    assert params["additionalProperties"] is True


@pytest.mark.parametrize(
    "tools,message",
    [
        ("not a list", "must be a list"),
        ([{"type": "function", "function": {"parameters": {}}}], "no function name"),
        ([{"type": "retrieval"}], "only function tools"),
        (
            [{"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": 5}}}}],
            "invalid parameters schema",
        ),
        ([{"name": "f"}, {"name": "f"}], "defined twice"),
    ],
)
def test_bad_tool_definitions_are_configuration_errors(tools, message):
    with pytest.raises(ValueError, match=message):
        ToolSchema.from_tools(tools)


def test_compiled_schema_pickles_for_worker_processes():
    clone = pickle.loads(pickle.dumps(SCHEMA))
    assert [i.kind for i in clone.validate(ToolCall("book_flight", {"origin": "SFO"}))] == [
        Violation.MISSING_REQUIRED
    ]


def test_a_closed_schema_with_pattern_properties_judges_names_by_its_patterns():
    # A name outside `properties` that matches a pattern is a parameter (the expected call was
    # refused as a bad reference), and one that matches none is the call's violation (it was
    # accepted: the per-name report skipped it and jsonschema's own was dropped as a duplicate).
    from veristep.verifiers.tools import ToolCallVerifier

    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {}, "patternProperties": {"^a": {"type": "integer"}},
        "additionalProperties": False}}}]
    reference = {"tools": tools, "expected": [{"name": "f", "arguments": {"ab": 1}}]}
    with ToolCallVerifier(workers=0) as verifier:
        got = [verifier.verify(f'<tool_call>{{"name": "f", "arguments": {args}}}</tool_call>', reference)
               for args in ('{"ab": 1}', '{"ab": 1, "zz": 1}', '{"ab": "x"}')]
    assert [(r.status.value, r.reward) for r in got] == [
        ("correct", 1.0), ("schema_violation", 0.0), ("schema_violation", 0.0)]

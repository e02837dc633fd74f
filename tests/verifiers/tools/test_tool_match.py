"""Matching: allowed values, optional parameters, type rules, string normalisation, order."""

from __future__ import annotations

import pytest
from veristep.verifiers.core.result import Status
from veristep.verifiers.tools.match import (
    StringMatch,
    argument_mismatch,
    argument_spec,
    expected_call,
    match_calls,
    normalize_string,
    values_equal,
)
from veristep.verifiers.tools.parsers import ToolCall
from veristep.verifiers.tools.schema import ToolSchema

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {
                        "type": "string",
                        "enum": ["celsius", "fahrenheit"],
                        "default": "celsius",
                    },
                    "days": {"type": "integer"},
                    "hours": {"type": "array", "items": {"type": "integer"}},
                    "ratio": {"type": "number"},
                },
                "required": ["city"],
            },
        },
    },
    {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
    },
]
SCHEMA = ToolSchema.from_tools(TOOLS)


def mismatch(arguments, expected_arguments, name="get_weather", defaults=False):
    spec = SCHEMA.get(name)
    exp = expected_call({"name": name, "arguments": expected_arguments}, spec)
    return argument_mismatch(ToolCall(name, arguments), exp, spec, defaults=defaults)


# ---------------------------------------------------------------- values and allowed values


def test_single_value_and_list_of_allowed_values():
    assert mismatch({"city": "Paris"}, {"city": "Paris"}) is None
    assert mismatch({"city": "Paris, France"}, {"city": ["Paris", "Paris, France"]}) is None
    assert "not in allowed" in mismatch({"city": "Rome"}, {"city": ["Paris", "Paris, France"]})


def test_array_parameters_literal_or_allowed_lists():
    assert mismatch({"city": "X", "hours": [1, 2]}, {"city": "X", "hours": [1, 2]}) is None
    assert (
        mismatch({"city": "X", "hours": [2, 1]}, {"city": "X", "hours": [[1, 2], [2, 1]]}) is None
    )
    assert mismatch({"city": "X", "hours": [2, 1]}, {"city": "X", "hours": [1, 2]}) is not None
    assert mismatch({"city": "X", "hours": []}, {"city": "X", "hours": []}) is None


def test_argument_spec_rules():
    assert argument_spec(5).allowed == [5]
    assert argument_spec([1, 2]).allowed == [1, 2]
    assert argument_spec([1, 2], {"type": "array"}).allowed == [[1, 2]]
    spec = argument_spec([[1], ""], {"type": "array"})
    assert spec.allowed == [[1]] and spec.may_omit
    assert argument_spec("").allowed == [""] and not argument_spec("").may_omit


# ---------------------------------------------------------------- optional parameters


def test_optional_parameter_omitted_with_bfcl_marker():
    assert mismatch({"city": "Paris"}, {"city": "Paris", "days": [3, ""]}) is None
    assert mismatch({"city": "Paris", "days": 3}, {"city": "Paris", "days": [3, ""]}) is None
    assert "missing argument 'days'" in mismatch({"city": "Paris"}, {"city": "Paris", "days": 3})


def test_optional_parameter_omitted_where_its_schema_default_is_expected():
    # BFCL's rule by default: only "" marks a parameter that may be left out
    assert "missing argument 'unit'" in mismatch({"city": "Paris"}, {"city": "Paris", "unit": "celsius"})
    # opt-in: the schema default stands in for the parameter
    assert mismatch({"city": "Paris"}, {"city": "Paris", "unit": "celsius"}, defaults=True) is None
    assert mismatch({"city": "Paris"}, {"city": "Paris", "unit": "fahrenheit"}, defaults=True) is not None


def test_unexpected_argument_fails_even_restating_the_default_unless_opted_in():
    assert "unexpected argument 'unit'" in mismatch({"city": "Paris", "unit": "celsius"}, {"city": "Paris"})
    assert mismatch({"city": "Paris", "unit": "celsius"}, {"city": "Paris"}, defaults=True) is None
    for defaults in (False, True):
        assert "unexpected argument 'unit'" in mismatch(
            {"city": "Paris", "unit": "fahrenheit"}, {"city": "Paris"}, defaults=defaults
        )
        assert "unexpected argument 'days'" in mismatch(
            {"city": "Paris", "days": 1}, {"city": "Paris"}, defaults=defaults
        )


# ---------------------------------------------------------------- type coercion rules


@pytest.mark.parametrize(
    "actual,expected,equal",
    [
        (2, 2.0, True),  # int where a float is expected (BFCL allows too)
        (2.0, 2, True),  # integral float where an int is expected (BFCL does not)
        (2.5, 2, False),
        (True, 1, False),  # booleans never equal numbers
        (1, True, False),
        (False, False, True),
        ("2", 2, False),  # no string-to-number coercion
        (None, None, True),
        (None, "", False),
        ([1, "A b"], [1.0, "ab"], True),
        ({"k": 1}, {"k": 1.0}, True),
        ({"k": 1, "j": 2}, {"k": 1}, False),
        (float("inf"), float("inf"), False),
    ],
)
def test_values_equal_type_rules(actual, expected, equal):
    assert values_equal(actual, expected) is equal


@pytest.mark.parametrize(
    "actual,expected,mode,equal",
    [
        ("April 1, 2024", "april 1 2024", StringMatch.BFCL, True),
        ("New-York", "new york", StringMatch.BFCL, True),
        ("it's", 'it"s', StringMatch.BFCL, True),
        ("Paris!", "Paris", StringMatch.BFCL, False),
        ("  New   York ", "new york", StringMatch.CASEFOLD, True),
        ("New-York", "new york", StringMatch.CASEFOLD, False),
        ("Paris", "paris", StringMatch.EXACT, False),
    ],
)
def test_string_normalisation_modes(actual, expected, mode, equal):
    assert values_equal(actual, expected, mode) is equal


def test_normalize_string_bfcl():
    assert normalize_string("A_b-c/d.e,f*g^h i'") == 'abcdefghi"'


def test_deep_values_compare_without_recursion_error():
    deep = []
    for _ in range(5000):
        deep = [deep]
    assert values_equal(deep, deep) is False  # too deep to compare: never equal, never raises


# ---------------------------------------------------------------- sets of calls


def calls(*items):
    return [ToolCall(name, args) for name, args in items]


def expected(*items):
    return [expected_call({"name": n, "arguments": a}, SCHEMA.get(n)) for n, a in items]


def test_parallel_calls_match_in_any_order():
    exp = expected(("get_weather", {"city": "Paris"}), ("get_time", {"tz": "UTC"}))
    got = calls(("get_time", {"tz": "UTC"}), ("get_weather", {"city": "Paris"}))
    result = match_calls(got, exp, SCHEMA)
    assert (
        result.status is Status.CORRECT and result.pairs == [(0, 1), (1, 0)] and result.score == 1.0
    )


def test_bipartite_matching_succeeds_where_greedy_first_fit_fails():
    # call 0 fits both expected calls, call 1 only the first: first-fit pairs (exp0, call0)
    # and then finds nothing for exp1; the maximum matching pairs (exp0, call1), (exp1, call0)
    exp = expected(("get_weather", {"city": ["Paris", "Rome"]}), ("get_weather", {"city": "Paris"}))
    got = calls(("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"}))
    result = match_calls(got, exp, SCHEMA)
    assert result.status is Status.CORRECT and result.matched == 2


def test_duplicate_calls_need_duplicate_expectations():
    exp = expected(("get_time", {"tz": "UTC"}), ("get_time", {"tz": "CET"}))
    got = calls(("get_time", {"tz": "UTC"}), ("get_time", {"tz": "UTC"}))
    result = match_calls(got, exp, SCHEMA)
    assert result.status is Status.WRONG_ARGUMENTS and result.matched == 1 and result.score == 0.5


def test_wrong_count_and_partial_score():
    exp = expected(("get_weather", {"city": "Paris"}), ("get_time", {"tz": "UTC"}))
    result = match_calls(calls(("get_time", {"tz": "UTC"})), exp, SCHEMA)
    assert result.status is Status.WRONG_COUNT and result.matched == 1 and result.score == 0.5
    extra = calls(
        ("get_time", {"tz": "UTC"}), ("get_time", {"tz": "UTC"}), ("get_weather", {"city": "Paris"})
    )
    result = match_calls(extra, exp, SCHEMA)
    assert result.status is Status.WRONG_COUNT and result.matched == 2 and result.score == 2 / 3


def test_wrong_function_is_wrong_not_wrong_arguments():
    exp = expected(("get_weather", {"city": "Paris"}))
    result = match_calls(calls(("get_time", {"tz": "UTC"})), exp, SCHEMA)
    assert result.status is Status.WRONG and "no call to 'get_weather'" in result.detail


def test_ineligible_calls_are_counted_but_never_paired():
    exp = expected(("get_time", {"tz": "UTC"}))
    result = match_calls(calls(("get_time", {"tz": "UTC"})), exp, SCHEMA, eligible=[False])
    assert result.matched == 0 and result.status is Status.WRONG_ARGUMENTS


def test_no_calls_expected_and_none_made():
    result = match_calls([], [])
    assert result.status is Status.CORRECT and result.score == 1.0


def test_matching_without_a_schema():
    exp = [expected_call({"name": "f", "arguments": {"xs": [[1, 2]], "n": [1, 2]}})]
    assert match_calls(calls(("f", {"xs": [1, 2], "n": 2})), exp).status is Status.CORRECT


def test_bfcl_possible_answer_shape_is_accepted():
    exp = expected_call(
        {"get_weather": {"city": ["Paris"], "days": [3, ""]}}, SCHEMA.get("get_weather")
    )
    assert argument_mismatch(ToolCall("get_weather", {"city": "paris"}), exp) is None


@pytest.mark.parametrize(
    "bad", [5, {"name": ""}, {"name": "f", "arguments": [1]}, {"a": {}, "b": {}}]
)
def test_malformed_expected_calls_raise(bad):
    with pytest.raises(ValueError):
        expected_call(bad)

"""Parsers: every format with well-formed, malformed, partial, empty, huge and adversarial input."""

from __future__ import annotations

import json
import keyword
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from veristep.verifiers.tools.parsers import (
    DEFAULT_MAX_DEPTH,
    ToolFormat,
    coerce_xml_value,
    detect_format,
    iter_formats,
    parse_tool_calls,
    render_tool_calls,
    resolve_format,
    strip_reasoning,
)

WEATHER = {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}
TIME = {"name": "get_time", "arguments": {"tz": "UTC"}}
FORMATS = list(iter_formats())


def calls_of(text, fmt="auto", **kw):
    return [c.to_dict() for c in parse_tool_calls(text, fmt, **kw).calls]


def messages_of(text, fmt="auto", **kw):
    return [e.message for e in parse_tool_calls(text, fmt, **kw).errors]


# ---------------------------------------------------------------- well-formed, per format


@pytest.mark.parametrize("fmt", FORMATS, ids=str)
def test_round_trip_two_calls_in_every_format(fmt):
    text = render_tool_calls([WEATHER, TIME], fmt)
    parsed = parse_tool_calls(text, fmt)
    assert [c.to_dict() for c in parsed.calls] == [WEATHER, TIME]
    assert parsed.errors == []
    auto = parse_tool_calls(text)  # auto-detection lands on the same format
    assert auto.format is fmt and [c.to_dict() for c in auto.calls] == [WEATHER, TIME]


def test_hermes_content_before_calls_and_string_arguments():
    text = (
        "Let me check.\n<tool_call>\n"
        '{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\", \\"days\\": 3}"}\n'
        "</tool_call>"
    )
    assert calls_of(text) == [WEATHER]


def test_hermes_accepts_openai_function_wrapper_and_missing_close_at_end():
    text = '<tool_call>{"type": "function", "function": {"name": "get_time", "arguments": {"tz": "UTC"}}}'
    assert calls_of(text, "hermes") == [TIME]


def test_llama3_single_object_list_and_semicolons():
    one = '{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}'
    assert calls_of(one) == [WEATHER]
    many = json.dumps([{"name": "get_weather", "parameters": WEATHER["arguments"]}, TIME])
    assert calls_of(many) == [WEATHER, TIME]
    assert calls_of(one + " ; " + json.dumps(TIME), "llama3") == [WEATHER, TIME]


def test_mistral_v11_name_args_syntax():
    text = '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{"tz": "UTC"}'
    assert calls_of(text) == [WEATHER, TIME]


def test_pythonic_literals_dotted_names_and_llama4_wrapper():
    text = '<|python_start|>[math.factorial(n=5), f(a=-1.5, b=[1, (2, 3)], c={"k": None}, d=true)]<|python_end|>'
    assert calls_of(text) == [
        {"name": "math.factorial", "arguments": {"n": 5}},
        {"name": "f", "arguments": {"a": -1.5, "b": [1, [2, 3]], "c": {"k": None}, "d": True}},
    ]


def test_qwen3_xml_converts_values_by_schema():
    tools = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "s": {"type": "string"},
                        "i": {"type": "integer"},
                        "n": {"type": "number"},
                        "b": {"type": "boolean"},
                        "a": {"type": "array"},
                        "o": {"type": "object"},
                    },
                },
            },
        }
    ]
    text = (
        "<tool_call>\n<function=f>\n<parameter=s>\n42\n</parameter>\n<parameter=i>\n7\n</parameter>\n"
        "<parameter=n>\n2.5\n</parameter>\n<parameter=b>\nTrue\n</parameter>\n"
        '<parameter=a>\n[1, "x"]\n</parameter>\n<parameter=o>\n{"k": 1}\n</parameter>\n</function>\n</tool_call>'
    )
    assert calls_of(text, tools=tools) == [
        {
            "name": "f",
            "arguments": {"s": "42", "i": 7, "n": 2.5, "b": True, "a": [1, "x"], "o": {"k": 1}},
        }
    ]
    # without a schema, JSON literals are decoded and everything else stays a string
    assert calls_of(text)[0]["arguments"]["s"] == 42
    # multi-line string values keep their inner newlines; one wrapping newline is dropped
    code = "<function=run>\n<parameter=code>\ndef f():\n    return 1\n\n</parameter>\n</function>"
    assert calls_of(code) == [{"name": "run", "arguments": {"code": "def f():\n    return 1\n"}}]


def test_coerce_xml_value_keeps_unconvertible_text_for_the_schema_check():
    assert coerce_xml_value("seven", {"type": "integer"}) == "seven"
    assert coerce_xml_value("3", {"type": "number"}) == 3
    assert coerce_xml_value("3.0", {"type": "number"}) == 3.0
    assert coerce_xml_value("null", {"type": ["string", "null"]}) == "null"
    assert coerce_xml_value("null", {"type": ["integer", "null"]}) is None
    assert coerce_xml_value("{bad", {"type": "object"}) == "{bad"


# ---------------------------------------------------------------- empty and no-call text


@pytest.mark.parametrize(
    "text", ["", "   \n", "The weather in Paris is sunny.", "[1, 2, 3]", "{not json"]
)
def test_text_without_calls(text):
    parsed = parse_tool_calls(text)
    assert parsed.calls == [] and (parsed.errors == [] or text.startswith("{"))


@pytest.mark.parametrize("fmt", FORMATS, ids=str)
def test_empty_text_in_every_explicit_format(fmt):
    parsed = parse_tool_calls("", fmt)
    assert parsed.calls == [] and parsed.errors == []


def test_empty_tool_call_block_is_an_error():
    assert messages_of("<tool_call>  </tool_call>") == ["empty <tool_call> block"]


def test_non_string_completion_is_an_error_not_an_exception():
    parsed = parse_tool_calls(None)  # type: ignore[arg-type]
    assert parsed.calls == [] and "not a string" in parsed.errors[0].message


# ---------------------------------------------------------------- malformed and partially valid


def test_hermes_one_bad_call_never_hides_the_good_ones():
    text = (
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}</tool_call>\n'
        '<tool_call>{"name": "broken", "arguments": {"x": }</tool_call>\n'
        '<tool_call>{"name": "get_time", "arguments": {"tz": "UTC"}}</tool_call>'
    )
    parsed = parse_tool_calls(text)
    assert [c.to_dict() for c in parsed.calls] == [WEATHER, TIME]
    assert [e.index for e in parsed.errors] == [1]
    assert "invalid JSON" in parsed.errors[0].message and "broken" in parsed.errors[0].snippet


def test_hermes_unclosed_block_followed_by_another():
    text = '<tool_call>{"name": "a"}\n<tool_call>{"name": "get_time", "arguments": {"tz": "UTC"}}</tool_call>'
    parsed = parse_tool_calls(text)
    assert [c.to_dict() for c in parsed.calls] == [TIME]
    assert parsed.errors[0].message == "<tool_call> without </tool_call>"


@pytest.mark.parametrize(
    "fmt,text,n_good,message",
    [
        (
            "llama3_json",
            '[{"name": "get_time", "parameters": {"tz": "UTC"}}, {"name": 5}]',
            1,
            'no "name"',
        ),
        (
            "llama3_json",
            '{"name": "get_time", "parameters": {"tz": "UTC"}} trailing words',
            1,
            "text after",
        ),
        ("llama3_json", '{"name": "get_time", "parameters": [1]}', 0, "must be an object"),
        (
            "mistral",
            '[TOOL_CALLS] [{"name": "get_time", "arguments": {"tz": "UTC"}}, {"name": "x", "arguments": {,}}]',
            1,
            "invalid JSON",
        ),
        (
            "mistral",
            '[TOOL_CALLS]get_time[ARGS]{"tz": "UTC"}[TOOL_CALLS]bad name[ARGS]{}',
            1,
            "invalid function name",
        ),
        ("mistral", "[TOOL_CALLS] hello", 0, "not followed by JSON"),
        ("pythonic", '[get_time(tz="UTC"), f(1)]', 1, "positional"),
        ("pythonic", '[get_time(tz="UTC"), f(x=y)]', 1, "not a literal"),
        (
            "pythonic",
            '[get_time(tz="UTC"), f(x=__import__("os").system("id"))]',
            1,
            "not a literal",
        ),
        ("pythonic", '[get_time(tz="UTC"), f(x=1,, y=2)]', 1, "invalid Python"),
        ("pythonic", '[get_time(tz="UTC"), f(x=1, x=2)]', 1, "duplicate keyword"),
        ("pythonic", '[get_time(tz="UTC"), 42]', 1, "not a call"),
        (
            "qwen3_xml",
            "<function=get_time><parameter=tz>UTC</parameter></function><function=f><parameter=a>1</function>",
            1,
            "no </parameter>",
        ),
        (
            "qwen3_xml",
            "<function=get_time><parameter=tz>UTC</parameter></function><function=f><parameter=a>1</parameter>",
            1,
            "no </function>",
        ),
        (
            "qwen3_xml",
            "<function=get_time><parameter=tz>UTC</parameter></function><function=f>stray<parameter=a>1</parameter></function>",
            1,
            "unexpected text",
        ),
    ],
)
def test_malformed_calls_become_per_call_errors(fmt, text, n_good, message):
    parsed = parse_tool_calls(text, fmt)
    assert len(parsed.calls) == n_good
    if n_good:
        assert parsed.calls[0].to_dict() == TIME
    assert any(message in e.message for e in parsed.errors), parsed.errors


def test_pythonic_never_evaluates_code(tmp_path):
    marker = tmp_path / "pwned"
    text = f'[f(x=open("{marker}", "w").write("x"))]'
    parsed = parse_tool_calls(text, "pythonic")
    assert parsed.calls == [] and not marker.exists()


def test_error_indices_follow_text_order():
    text = '[TOOL_CALLS] [{"name": "a"}, {bad}, {"name": "b"}, {also bad}]'
    parsed = parse_tool_calls(text)
    assert [c.name for c in parsed.calls] == ["a", "b"]
    assert [e.index for e in parsed.errors] == [1, 3]
    assert parsed.n_candidates == 4


# ---------------------------------------------------------------- adversarial


@pytest.mark.parametrize("fmt", FORMATS, ids=str)
def test_calls_smuggled_inside_think_are_ignored(fmt):
    smuggled = render_tool_calls([{"name": "delete_all", "arguments": {}}], fmt)
    real = render_tool_calls([TIME], fmt)
    text = f"<think>I could call {smuggled} but should not.</think>\n{real}"
    assert calls_of(text, fmt) == [TIME]
    assert calls_of(text) == [TIME]


def test_reasoning_opened_in_the_prompt_and_unclosed_reasoning():
    hermes = render_tool_calls([TIME], "hermes")
    # Qwen3/R1 templates put <think> in the prompt: only the close tag is in the completion
    assert calls_of(f"{render_tool_calls([WEATHER], 'hermes')}</think>\n{hermes}") == [TIME]
    # a reasoning block that never closes hides everything after it
    assert calls_of(f"<think>plan: {hermes}") == []
    assert strip_reasoning("a<think>b</think>c<think>d") == "c<think>d"
    assert strip_reasoning("x</think>y", None) == "x</think>y"


def test_a_call_in_a_later_think_block_counts():
    # vLLM's reasoning parsers split at the first </think>: a runtime runs the calls after it, a
    # second <think> block included; hidden there, an extra call earned the full reward
    good, extra = render_tool_calls([TIME], "hermes"), render_tool_calls([WEATHER], "hermes")
    assert calls_of(f"<think>plan</think>{good}<think>{extra}</think>") == [TIME, WEATHER]
    assert calls_of(f"{good}<think>{extra}</think>") == []  # the text before the first block is reasoning
    assert calls_of(f"<think>plan</think>{good}<think>{extra}") == [TIME, WEATHER]
    assert calls_of(f"{good}<think>{extra}") == []  # an unclosed block: all of it is reasoning


def test_think_tags_cannot_splice_a_tool_call_tag():
    text = '<tool_<think>x</think>call>{"name": "get_time", "arguments": {}}</tool_call>'
    assert calls_of(text) == []


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>{"name": "f", "arguments": {"a": 1, "a": 2}}</tool_call>',
        '{"name": "f", "name": "g", "parameters": {}}',
        '[TOOL_CALLS] [{"name": "f", "arguments": {"x": {"k": 1, "k": 1}}}]',
        "[f(x={'k': 1, 'k': 2})]",
        "<function=f><parameter=a>1</parameter><parameter=a>2</parameter></function>",
    ],
)
def test_duplicate_keys_are_rejected_not_silently_merged(text):
    parsed = parse_tool_calls(text)
    assert parsed.calls == []
    assert "duplicate" in parsed.errors[0].message


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>{"name": "f", "arguments": {"x": NaN}}</tool_call>',
        '<tool_call>{"name": "f", "arguments": {"x": Infinity}}</tool_call>',
        '<tool_call>{"name": "f", "arguments": {"x": ' + "9" * 5000 + "}}</tool_call>",
        # a pythonic hex literal of 4,800 decimal digits: its repr raised on the host (internal_error)
        "[f(x=0x" + "f" * 4000 + ")]",
        "[f(x=-" + "9" * 4400 + ")]",
    ],
)
def test_non_json_numbers_are_errors(text):
    parsed = parse_tool_calls(text, "pythonic" if text.startswith("[") else "auto")
    assert parsed.calls == [] and len(parsed.errors) == 1


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_nesting_within_the_bound_parses_and_beyond_it_is_a_per_call_error():
    ok = DEFAULT_MAX_DEPTH - 1  # arguments object itself is one level
    text = f'<tool_call>{{"name": "f", "arguments": {{"x": {_nested(ok)}}}}}</tool_call>'
    assert len(parse_tool_calls(text).calls) == 1
    deep = f'<tool_call>{{"name": "f", "arguments": {{"x": {_nested(ok + 1)}}}}}</tool_call>'
    parsed = parse_tool_calls(deep + render_tool_calls([TIME], "hermes"))
    assert [c.to_dict() for c in parsed.calls] == [TIME]
    assert "nested deeper" in parsed.errors[0].message
    assert len(parse_tool_calls(deep, max_depth=100).calls) == 1


@pytest.mark.parametrize("fmt", FORMATS, ids=str)
def test_extremely_deep_nesting_never_raises_recursion_error(fmt):
    deep = _nested(200_000)
    time_call = render_tool_calls([TIME], fmt)
    texts = {
        ToolFormat.HERMES: f'<tool_call>{{"name": "f", "arguments": {{"x": {deep}}}}}</tool_call>\n{time_call}',
        ToolFormat.LLAMA3_JSON: f'{{"name": "f", "parameters": {{"x": {deep}}}}}; {json.dumps(TIME)}',
        ToolFormat.MISTRAL: f'[TOOL_CALLS] [{{"name": "f", "arguments": {{"x": {deep}}}}}, {json.dumps(TIME)}]',
        ToolFormat.PYTHONIC: f"[f(x={deep}), get_time(tz='UTC')]",
        ToolFormat.QWEN3_XML: f"<function=f><parameter=x>{deep}</parameter></function>{time_call}",
    }
    tools = [
        {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "array"}}}}
    ]
    parsed = parse_tool_calls(texts[fmt], fmt, tools=tools)
    if fmt is ToolFormat.QWEN3_XML:
        # an XML value that cannot be decoded stays a string; the schema check rejects it
        assert parsed.errors == [] and isinstance(parsed.calls[0].arguments["x"], str)
        assert parsed.calls[1].to_dict() == TIME
        return
    assert len(parsed.errors) == 1 and parsed.errors[0].index == 0
    assert [c.to_dict() for c in parsed.calls] == [TIME]


# ---------------------------------------------------------------- huge inputs (1 MB)


@pytest.mark.parametrize("fmt", FORMATS, ids=str)
def test_one_megabyte_of_valid_calls(fmt):
    call = {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}
    one = len(render_tool_calls([call], fmt))
    n = 1_100_000 // one
    text = render_tool_calls([call] * n, fmt)
    assert len(text) >= 900_000
    parsed = parse_tool_calls(text)
    assert len(parsed.calls) == n and parsed.errors == []


ADVERSARIAL_MB = {
    "many unclosed tool_call tags": "<tool_call>" * 90_000,
    "many unclosed function tags": "<function=f>" * 80_000,
    "unclosed parameters": "<function=f>" + "<parameter=a>" * 70_000 + "</function>",
    "open braces": "{" * 1_000_000,
    "unterminated string": '{"name": "' + "a" * 1_000_000,
    "many markers": "[TOOL_CALLS]" * 80_000,
    "many think opens": "<think>" * 140_000,
    "many think closes then a call": "</think>" * 120_000 + '<tool_call>{"name": "f"}</tool_call>',
    "unterminated python string": '[f(x="' + "a" * 1_000_000 + ")]",
    "huge string argument": '<tool_call>{"name": "f", "arguments": {"x": "'
    + "a" * 1_000_000
    + '"}}</tool_call>',
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", list(ADVERSARIAL_MB))
def test_adversarial_megabyte_inputs_finish(name):
    text = ADVERSARIAL_MB[name]
    start = time.monotonic()
    parsed = parse_tool_calls(text)
    assert time.monotonic() - start < 30  # a hang bound, not a benchmark
    assert len(parsed.calls) <= 1
    for err in parsed.errors[:3]:
        assert len(err.snippet) <= 130  # errors never echo megabytes back


# ---------------------------------------------------------------- detection, names, properties


XML_CALL = "<function=f><parameter=a>1</parameter></function>"


@pytest.mark.parametrize("text", [
    '<tool_call>{"name": "g", "arguments": {"s": "' + XML_CALL + '"}}</tool_call>',  # XML in a string
    '<tool_call>{"name": "g", "arguments": {}}</tool_call>' + XML_CALL,
    '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>[TOOL_CALLS] [{"name": "g", "arguments": {}}]',
])
def test_calls_in_two_formats_are_an_error_in_auto_mode(text):
    # Only the first format found was read: the other's calls went uncounted, and a wrong call
    # beside a right one (or one written inside a string) scored 1.0.
    parsed = parse_tool_calls(text)
    assert parsed.calls == [] and "more than one format" in parsed.errors[0].message


def test_qwen3_xml_wrapped_in_tool_call_tags_is_one_format():
    parsed = parse_tool_calls("<tool_call>\n" + XML_CALL + "\n</tool_call>")
    assert [c.name for c in parsed.calls] == ["f"] and not parsed.errors


def test_detect_format_and_aliases():
    assert detect_format("plain words") is None
    assert detect_format('[{"name": "f"}]') is ToolFormat.LLAMA3_JSON
    assert detect_format("[f(x=1)]") is ToolFormat.PYTHONIC
    assert detect_format("<tool_call><function=f></function></tool_call>") is ToolFormat.QWEN3_XML
    assert resolve_format("qwen2.5") is ToolFormat.HERMES
    assert resolve_format("Qwen3_Coder") is ToolFormat.QWEN3_XML
    with pytest.raises(ValueError, match="unknown tool-call format"):
        resolve_format("yaml")


_names = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True).filter(
    lambda s: not keyword.iskeyword(s)
)
_json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(
        alphabet=st.characters(blacklist_characters="<", blacklist_categories=("Cs",)), max_size=12
    )
)
_json_values = st.recursive(
    _json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
_calls = st.lists(
    st.fixed_dictionaries(
        {"name": _names, "arguments": st.dictionaries(_names, _json_values, max_size=4)}
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=_calls, fmt=st.sampled_from([f for f in FORMATS if f is not ToolFormat.QWEN3_XML]))
def test_property_render_then_parse_is_identity(calls, fmt):
    parsed = parse_tool_calls(render_tool_calls(calls, fmt), fmt, max_depth=64)
    assert parsed.errors == []
    assert [c.to_dict() for c in parsed.calls] == calls


_PIECES = list("<>/{}[]()\"',:;=\\ \nabf_0123") + [
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "[TOOL_CALLS]",
    "<function=f>",
    "<parameter=a>",
    "</parameter>",
    "</function>",
    '{"name": "f"',
    "[ARGS]",
    '"arguments": ',
]


@settings(max_examples=300, deadline=None)
@given(
    text=st.lists(st.sampled_from(_PIECES), max_size=40).map("".join),
    fmt=st.sampled_from(list(ToolFormat)),
)
def test_property_any_text_parses_without_raising(text, fmt):
    parsed = parse_tool_calls(text, fmt)
    for call in parsed.calls:
        assert isinstance(call.name, str) and isinstance(call.arguments, dict)


_XML_TOOLS = [
    {
        "name": "f",
        "parameters": {
            "type": "object",
            "properties": {
                "s": {"type": "string"},
                "i": {"type": "integer"},
                "n": {"type": "number"},
                "b": {"type": "boolean"},
                "a": {"type": "array"},
                "o": {"type": "object"},
            },
        },
    }
]
_xml_args = st.fixed_dictionaries(
    {},
    optional={
        "s": st.text(
            alphabet=st.characters(blacklist_characters="<", blacklist_categories=("Cs",)),
            max_size=20,
        ),
        "i": st.integers(-(10**15), 10**15),
        "n": st.floats(allow_nan=False, allow_infinity=False),
        "b": st.booleans(),
        "a": st.lists(_json_values, max_size=3),
        "o": st.dictionaries(st.text(max_size=5), _json_values, max_size=3),
    },
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(args=st.lists(_xml_args, min_size=1, max_size=3))
def test_property_qwen3_xml_round_trip_with_schema(args):
    calls = [{"name": "f", "arguments": a} for a in args]
    parsed = parse_tool_calls(render_tool_calls(calls, "qwen3_xml"), "qwen3_xml", tools=_XML_TOOLS)
    assert parsed.errors == []
    assert [c.to_dict() for c in parsed.calls] == calls


@pytest.mark.parametrize("fmt", FORMATS, ids=str)
def test_max_calls_stops_parsing_a_flood(fmt):
    text = render_tool_calls([TIME] * 50, fmt)
    parsed = parse_tool_calls(text, fmt, max_calls=10)
    assert parsed.truncated and parsed.n_candidates == 10
    exact = parse_tool_calls(render_tool_calls([TIME] * 10, fmt), fmt, max_calls=10)
    assert not exact.truncated and len(exact.calls) == 10

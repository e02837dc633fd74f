"""Parse tool calls out of a completion in the common chat-template formats.

Every parser returns the calls it could read *and* one error per call it could not, so a
single malformed call never hides the well-formed ones. Model output is untrusted: the
parsers are linear in the input length (no backtracking regexes, no re-scanning), bound
nesting depth, and never raise on any text.
"""

from __future__ import annotations

import ast
import enum
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core import pyast


class ToolFormat(str, enum.Enum):
    """The tool-call syntaxes we read; AUTO picks one from the text."""

    AUTO = "auto"
    HERMES = "hermes"  # Hermes / Qwen2.5: <tool_call>{json}</tool_call>
    LLAMA3_JSON = "llama3_json"  # Llama 3.x: {"name": ..., "parameters": {...}} (one or a list)
    MISTRAL = "mistral"  # [TOOL_CALLS] [{...}, ...]  or  [TOOL_CALLS]name[ARGS]{...}
    PYTHONIC = "pythonic"  # [get_weather(city="Paris"), f(x=1)]
    QWEN3_XML = "qwen3_xml"  # <function=name><parameter=p>value</parameter></function>

    def __str__(self) -> str:
        return self.value


_FORMAT_ALIASES: dict[str, ToolFormat] = {
    "qwen2.5": ToolFormat.HERMES,
    "qwen25": ToolFormat.HERMES,
    "qwen": ToolFormat.HERMES,
    "llama3": ToolFormat.LLAMA3_JSON,
    "llama": ToolFormat.LLAMA3_JSON,
    "json": ToolFormat.LLAMA3_JSON,
    "llama4_pythonic": ToolFormat.PYTHONIC,
    "qwen3_coder": ToolFormat.QWEN3_XML,
    "qwen3coder": ToolFormat.QWEN3_XML,
    "xml": ToolFormat.QWEN3_XML,
}

#: Nesting deeper than this inside one call's arguments is reported as an error for that call.
DEFAULT_MAX_DEPTH = 32
_SNIPPET = 120


def resolve_format(name: str | ToolFormat) -> ToolFormat:
    """Map a format name or alias ("qwen2.5", "llama3", "qwen3_coder" ...) to a ToolFormat."""
    if isinstance(name, ToolFormat):
        return name
    key = str(name).strip().lower()
    if key in _FORMAT_ALIASES:
        return _FORMAT_ALIASES[key]
    try:
        return ToolFormat(key)
    except ValueError:
        choices = sorted({f.value for f in ToolFormat} | set(_FORMAT_ALIASES))
        raise ValueError(
            f"unknown tool-call format {name!r}; choose one of {', '.join(choices)}"
        ) from None


@dataclass
class ToolCall:
    """One parsed call: a function name and its keyword arguments."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Return the call as {"name", "arguments"}, the shape used in JSONL files."""
        return {"name": self.name, "arguments": self.arguments}


@dataclass
class CallError:
    """A call candidate that could not be read; `index` counts all candidates in text order."""

    index: int
    message: str
    snippet: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Return the error as a JSON-serialisable dict."""
        return {"index": self.index, "message": self.message, "snippet": self.snippet}


@dataclass
class ParsedCalls:
    """Everything a parser found: the readable calls, the per-call errors, the format used."""

    format: ToolFormat
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[CallError] = field(default_factory=list)
    truncated: bool = False  # more than max_calls candidates: parsing stopped there

    @property
    def n_candidates(self) -> int:
        """Number of call candidates seen, readable or not."""
        return len(self.calls) + len(self.errors)


class _CallSyntaxError(ValueError):
    """One call candidate is unreadable; carries the message for its CallError."""


class _Full(Exception):
    """The candidate limit is reached: stop parsing (a flood of calls is not read to the end)."""


# --------------------------------------------------------------------------------------
# reasoning blocks
# --------------------------------------------------------------------------------------


def strip_reasoning(text: str, tag: str | None = "think") -> str:
    """The completion's content after its reasoning, split as vLLM's reasoning parsers split it.

    Everything up to the first </tag> is reasoning, whether its <tag> is in the completion or in
    the prompt (Qwen3 and DeepSeek-R1 chat templates); a <tag> that never closes makes all of it
    reasoning. A later <tag> block is content: a runtime that splits at the first close tag runs
    the calls in it, so they count (hiding an extra call there earned full reward).
    """
    if not tag:
        return text
    close_tag = f"</{tag}>"
    first_close = text.find(close_tag)
    if first_close >= 0:
        return text[first_close + len(close_tag):]
    return "" if f"<{tag}>" in text else text


# --------------------------------------------------------------------------------------
# shared helpers: strict JSON, bracket scanning, depth bounds
# --------------------------------------------------------------------------------------


def _snippet(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _SNIPPET else text[:_SNIPPET] + "..."


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) < len(pairs):  # rare: find the first repeated key for the message
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _CallSyntaxError(f"duplicate JSON key {key!r}")
            seen.add(key)
    return obj


def _reject_constant(name: str) -> Any:
    raise _CallSyntaxError(f"{name} is not valid JSON")


def _loads_strict(text: str) -> Any:
    """json.loads that rejects duplicate keys and NaN/Infinity, and never raises RecursionError."""
    try:
        return json.loads(
            text, object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant
        )
    except _CallSyntaxError:
        raise
    except json.JSONDecodeError as err:
        raise _CallSyntaxError(f"invalid JSON: {err.msg} at char {err.pos}") from None
    except RecursionError:
        raise _CallSyntaxError("JSON nested too deeply to parse") from None
    except (ValueError, MemoryError) as err:  # e.g. integers over the int-digits limit
        raise _CallSyntaxError(f"invalid JSON: {err}") from None


def _loads_or_none(text: str) -> Any:
    """`_loads_strict(text)`, or None where it would raise (the caller then says why)."""
    try:
        return _loads_strict(text)
    except _CallSyntaxError:
        return None


def _depth_exceeds(value: Any, max_depth: int) -> bool:
    """True when containers nest deeper than max_depth (iterative, so never recursion-bound)."""
    if not isinstance(value, (dict, list)):
        return False
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth + 1 > max_depth:
            return True
        children = item.values() if isinstance(item, dict) else item
        # only containers go on the stack: most argument values are scalars
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


_CLOSERS = {"{": "}", "[": "]", "(": ")"}
_JSON_SCAN = re.compile(r'["\\{}\[\],]')
_PY_SCAN = re.compile(r"[\"'\\{}\[\]()#,]")


def _scan_group(text: str, start: int, python: bool = False) -> tuple[int, list[tuple[int, int]]]:
    """Find the end of the bracket group opening at text[start] and its top-level elements.

    Returns (end, spans): `end` is one past the matching closer (-1 if the group never
    closes or closers mismatch), `spans` the comma-separated element spans at depth 1.
    String-aware (JSON double quotes, or Python single/double quotes); one pass, linear.
    """
    scan = _PY_SCAN if python else _JSON_SCAN
    stack = [_CLOSERS[text[start]]]
    spans: list[tuple[int, int]] = []
    element_start = start + 1
    quote: str | None = None
    pos = start + 1
    n = len(text)
    while pos < n:
        m = scan.search(text, pos)
        if m is None:
            return -1, spans
        ch = m.group()
        pos = m.end()
        if quote is not None:
            if ch == "\\":
                pos += 1
            elif ch == quote:
                quote = None
            continue
        if ch in "\"'":
            quote = ch
        elif ch == "#":  # a Python comment runs to the end of the line
            newline = text.find("\n", pos)
            if newline < 0:
                return -1, spans
            pos = newline + 1
        elif ch in _CLOSERS:
            stack.append(_CLOSERS[ch])
        elif ch == ",":
            if len(stack) == 1:
                spans.append((element_start, m.start()))
                element_start = pos
        elif ch in "}])":
            if ch != stack.pop():
                return -1, spans
            if not stack:
                spans.append((element_start, m.start()))
                return pos, spans
    return -1, spans


def _skip_ws(text: str, pos: int) -> int:
    n = len(text)
    while pos < n and text[pos].isspace():
        pos += 1
    return pos


class _Collector:
    """Accumulates calls and errors in text order, assigning candidate indices."""

    def __init__(self, fmt: ToolFormat, max_depth: int, limit: int | None = None) -> None:
        self.result = ParsedCalls(format=fmt)
        self.max_depth = max_depth
        self.limit = limit
        self._index = 0

    def _check_room(self) -> None:
        if self.limit is not None and self._index >= self.limit:
            raise _Full

    def add_call(self, name: str, arguments: dict[str, Any], raw: str) -> None:
        self._check_room()
        if _depth_exceeds(arguments, self.max_depth):
            self.add_error(f"arguments nested deeper than {self.max_depth} levels", raw)
            return
        self.result.calls.append(ToolCall(name=name, arguments=arguments))
        self._index += 1

    def add_error(self, message: str, raw: str) -> None:
        self._check_room()
        self.result.errors.append(CallError(self._index, message, _snippet(raw)))
        self._index += 1

    def attempt(self, raw: str, parse: Callable[[], list[tuple[str, dict[str, Any]]]]) -> None:
        """Run one candidate's parser; its calls are added, or one error if it fails."""
        try:
            parsed = parse()
        except _CallSyntaxError as err:
            self.add_error(str(err), raw)
            return
        except (RecursionError, MemoryError):
            self.add_error("call nested too deeply to parse", raw)
            return
        for name, arguments in parsed:
            self.add_call(name, arguments, raw)


# --------------------------------------------------------------------------------------
# JSON-shaped calls (Hermes, Llama 3, Mistral)
# --------------------------------------------------------------------------------------

_ARG_KEYS = ("arguments", "parameters")


def _call_from_object(obj: Any) -> tuple[str, dict[str, Any]]:
    """Read {"name", "arguments"|"parameters"} (or OpenAI's {"function": {...}}) as a call."""
    if not isinstance(obj, dict):
        raise _CallSyntaxError(f"a call must be a JSON object, got {type(obj).__name__}")
    if "name" not in obj and isinstance(obj.get("function"), dict):
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        raise _CallSyntaxError('call has no "name" string')
    present = [key for key in _ARG_KEYS if key in obj]
    if len(present) > 1:
        raise _CallSyntaxError('call has both "arguments" and "parameters"')
    arguments: Any = obj[present[0]] if present else {}
    if isinstance(arguments, str):  # OpenAI wire format: arguments as a JSON string
        arguments = _loads_strict(arguments) if arguments.strip() else {}
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise _CallSyntaxError(f"arguments must be an object, got {type(arguments).__name__}")
    return name.strip(), arguments


def _calls_from_json_value(value: Any) -> list[tuple[str, dict[str, Any]]]:
    if isinstance(value, list):
        return [_call_from_object(item) for item in value]
    return [_call_from_object(value)]


def _collect_json_group(out: _Collector, text: str, start: int, end: int) -> None:
    """Parse the JSON object/array text[start:end]; an array is read element by element."""
    raw = text[start:end]
    if text[start] != "[":
        out.attempt(raw, lambda: _calls_from_json_value(_loads_strict(raw)))
        return
    # one broken element must not hide the others: each element is its own candidate
    _, spans = _scan_group(text, start)
    for s, e in spans:
        element = text[s:e]
        if element.strip():
            out.attempt(
                element, lambda element=element: [_call_from_object(_loads_strict(element))]
            )
        elif len(spans) > 1:
            out.add_error("empty element in the list of calls", raw)


def _collect_json_sequence(out: _Collector, text: str, pos: int, separators: str = ";") -> int:
    """Read JSON values (objects or arrays of calls) one after another from pos.

    Stops at the first character that cannot start a value; returns that position.
    """
    n = len(text)
    while True:
        pos = _skip_ws(text, pos)
        while pos < n and text[pos] in separators:
            pos = _skip_ws(text, pos + 1)
        if pos >= n or text[pos] not in "{[":
            return pos
        end, _ = _scan_group(text, pos)
        if end < 0:
            out.add_error("unterminated JSON (missing closing bracket)", text[pos:])
            return n
        _collect_json_group(out, text, pos, end)
        pos = end


# --------------------------------------------------------------------------------------
# Qwen3-Coder XML
# --------------------------------------------------------------------------------------

_FUNC_OPEN, _FUNC_CLOSE = "<function=", "</function>"
_PARAM_OPEN, _PARAM_CLOSE = "<parameter=", "</parameter>"


class _Finder:
    """str.find with memory: repeated searches for one marker over increasing positions stay linear."""

    def __init__(self, text: str, marker: str) -> None:
        self.text, self.marker = text, marker
        self._found = -2  # -2: not searched yet

    def next(self, pos: int) -> int:
        if self._found == -1:
            return -1
        if self._found == -2 or self._found < pos:
            self._found = self.text.find(self.marker, pos)
        return self._found


def _xml_param_value(raw: str) -> str:
    # Qwen3-Coder's template wraps values in newlines; strip exactly one on each side
    if raw.startswith("\n"):
        raw = raw[1:]
    if raw.endswith("\n"):
        raw = raw[:-1]
    return raw


def _parse_xml_function(block: str) -> tuple[str, dict[str, str]]:
    """Parse `name>` + parameters (the text after "<function=") into a name and raw strings."""
    gt = block.find(">")
    if gt < 0:
        raise _CallSyntaxError("unterminated <function=...> tag")
    name = block[:gt].strip()
    if not name or any(ch in name for ch in "<\n\"'"):
        raise _CallSyntaxError(f"invalid function name {block[:gt][:40]!r}")
    params: dict[str, str] = {}
    pos = gt + 1
    while True:
        start = block.find(_PARAM_OPEN, pos)
        if start < 0:
            if block[pos:].strip():
                raise _CallSyntaxError("unexpected text inside <function=...> block")
            return name, params
        if block[pos:start].strip():
            raise _CallSyntaxError("unexpected text inside <function=...> block")
        name_end = block.find(">", start)
        if name_end < 0:
            raise _CallSyntaxError("unterminated <parameter=...> tag")
        pname = block[start + len(_PARAM_OPEN) : name_end].strip()
        close = block.find(_PARAM_CLOSE, name_end + 1)
        if close < 0:
            raise _CallSyntaxError(f"parameter {pname!r} has no </parameter>")
        if not pname:
            raise _CallSyntaxError("parameter with an empty name")
        if pname in params:
            raise _CallSyntaxError(f"duplicate parameter {pname!r}")
        params[pname] = _xml_param_value(block[name_end + 1 : close])
        pos = close + len(_PARAM_CLOSE)


_JSONISH_NUMBER = re.compile(r"-?(?:0|[1-9]\d{0,300})(?:\.\d{1,300})?(?:[eE][+-]?\d{1,4})?")


def coerce_xml_value(raw: str, prop_schema: Mapping[str, Any] | None) -> Any:
    """Convert an XML parameter string to the JSON type its schema asks for.

    Without a schema the value is decoded if it is a JSON literal (number, true/false/null,
    object, array) and kept as a string otherwise. A value that cannot be converted to the
    declared type stays a string, so schema validation reports the wrong type.
    """
    types: Any = prop_schema.get("type") if isinstance(prop_schema, Mapping) else None
    if isinstance(types, str):
        types = [types]
    text = raw.strip()
    if types is None:
        if (
            text in ("true", "false", "null")
            or _JSONISH_NUMBER.fullmatch(text)
            or (text[:1] in "{[" and text)
        ):
            try:
                return _loads_strict(text)
            except _CallSyntaxError:
                return raw
        return raw
    if "string" in types:
        return raw
    if "null" in types and text == "null":
        return None
    if "boolean" in types and text.lower() in ("true", "false"):
        return text.lower() == "true"
    if "integer" in types and re.fullmatch(r"[+-]?\d{1,300}", text):
        return int(text)
    if "number" in types and _JSONISH_NUMBER.fullmatch(text.lstrip("+")):
        number = float(text)
        return (
            int(number)
            if number.is_integer() and "." not in text and "e" not in text.lower()
            else number
        )
    if ("object" in types or "array" in types) and text[:1] in "{[":
        try:
            return _loads_strict(text)
        except _CallSyntaxError:
            return raw
    return raw


def _xml_call(
    block: str, schemas: Mapping[str, Mapping[str, Any]] | None
) -> list[tuple[str, dict[str, Any]]]:
    name, raw_params = _parse_xml_function(block)
    props = _properties_for(schemas, name) or {}
    return [
        (name, {key: coerce_xml_value(value, props.get(key)) for key, value in raw_params.items()})
    ]


def _properties_for(
    schemas: Mapping[str, Mapping[str, Any]] | None, name: str
) -> Mapping[str, Any] | None:
    if schemas is None or name not in schemas:
        return None
    props = schemas[name].get("properties")
    return props if isinstance(props, Mapping) else {}


def _tag_blocks(text: str, open_tag: str, close_tag: str) -> Iterator[tuple[int, int, int, int]]:
    """Yield (start, body_start, close, next_open) for each `open_tag` block, left to right.

    `close` is the index of the block's `close_tag`, or -1 when the next open tag (index
    `next_open`, -1 if none) comes first or there is no close tag at all; scanning resumes
    after the close tag, else at the next open tag. Linear: each tag is found once.
    """
    opens, closes = _Finder(text, open_tag), _Finder(text, close_tag)
    pos = 0
    while (start := opens.next(pos)) >= 0:
        body_start = start + len(open_tag)
        close, next_open = closes.next(body_start), opens.next(body_start)
        if close >= 0 and not (0 <= next_open < close):
            yield start, body_start, close, next_open
            pos = close + len(close_tag)
        else:
            yield start, body_start, -1, next_open
            pos = next_open if next_open >= 0 else len(text)


def _collect_xml_functions(
    out: _Collector, text: str, schemas: Mapping[str, Mapping[str, Any]] | None
) -> None:
    for start, body, close, next_open in _tag_blocks(text, _FUNC_OPEN, _FUNC_CLOSE):
        if close < 0:
            end = next_open if next_open >= 0 else len(text)
            out.add_error("<function=...> block has no </function>", text[start:end])
            continue
        out.attempt(
            text[start : close + len(_FUNC_CLOSE)], lambda b=text[body:close]: _xml_call(b, schemas)
        )


# --------------------------------------------------------------------------------------
# per-format parsers
# --------------------------------------------------------------------------------------

_TOOL_OPEN, _TOOL_CLOSE = "<tool_call>", "</tool_call>"
_HERMES_JSON_OPEN_RE = re.compile(r"<tool_call>\s*[{\[]")


def _parse_tagged(
    out: _Collector, text: str, schemas: Mapping[str, Mapping[str, Any]] | None
) -> None:
    """<tool_call>...</tool_call> blocks; each body is JSON (Hermes) or <function=...> (Qwen3)."""
    for start, body_start, close, next_open in _tag_blocks(text, _TOOL_OPEN, _TOOL_CLOSE):
        if close >= 0:
            body_end, block_end = close, close + len(_TOOL_CLOSE)
        elif next_open < 0:
            # generation stopped on the close tag (a stop string), or was truncated: accept
            # the block if its body is complete on its own
            body_end = block_end = len(text)
        else:
            out.add_error("<tool_call> without </tool_call>", text[start:next_open])
            continue
        body = text[body_start:body_end].strip()
        if not body:
            out.add_error("empty <tool_call> block", text[start:block_end])
        elif body.startswith(_FUNC_OPEN):
            inner = _Collector(out.result.format, out.max_depth)
            _collect_xml_functions(inner, body, schemas)
            _merge(out, inner, body)
        elif body[0] in "{[":
            # the common case, one whole JSON object: read it at once (the bracket scan below
            # would find the same single object)
            value = _loads_or_none(body) if body[0] == "{" else None
            if value is not None:
                out.attempt(body, lambda value=value: _calls_from_json_value(value))
                continue
            end, _ = _scan_group(body, 0)
            if end < 0 or body[end:].strip():
                out.attempt(body, lambda body=body: _calls_from_json_value(_loads_strict(body)))
            else:
                _collect_json_group(out, body, 0, end)
        else:
            out.add_error("<tool_call> body is neither JSON nor <function=...>", body)


def _merge(out: _Collector, inner: _Collector, raw: str) -> None:
    if inner.result.n_candidates == 0:
        out.add_error("no call inside <tool_call> block", raw)
    for call in inner.result.calls:
        out.add_call(call.name, call.arguments, raw)
    for err in inner.result.errors:
        out.add_error(err.message, err.snippet)


def _parse_llama_json(out: _Collector, text: str) -> None:
    body = text.strip()
    for prefix in ("<|python_tag|>",):
        if body.startswith(prefix):
            body = body[len(prefix) :]
    for suffix in ("<|eom_id|>", "<|eot_id|>"):
        if body.endswith(suffix):
            body = body[: -len(suffix)]
    pos = _collect_json_sequence(out, body, 0)
    if body[pos:].strip():
        out.add_error("text after the JSON tool calls", body[pos:])


_MISTRAL_MARK, _MISTRAL_ARGS, _MISTRAL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"


def _parse_mistral(out: _Collector, text: str) -> None:
    marks = _Finder(text, _MISTRAL_MARK)
    start = marks.next(0)
    while start >= 0:
        seg_start = start + len(_MISTRAL_MARK)
        nxt = marks.next(seg_start)
        segment = text[seg_start : nxt if nxt >= 0 else len(text)]
        _parse_mistral_segment(out, segment)
        start = nxt


def _parse_mistral_segment(out: _Collector, segment: str) -> None:
    pos = _skip_ws(segment, 0)
    if pos < len(segment) and segment[pos] in "{[":  # pre-v11: a JSON array of calls
        rest = _collect_json_sequence(out, segment, pos)
        if segment[rest:].strip():
            out.add_error("text after the JSON tool calls", segment[rest:])
        return
    # v11+: name[ARGS]{json} (optionally name[CALL_ID]id[ARGS]{json}), possibly repeated
    while pos < len(segment):
        args_at = segment.find(_MISTRAL_ARGS, pos)
        if args_at < 0:
            if segment[pos:].strip():
                out.add_error("[TOOL_CALLS] not followed by JSON or name[ARGS]{...}", segment[pos:])
            return
        name = segment[pos:args_at]
        id_at = name.find(_MISTRAL_ID)
        if id_at >= 0:
            name = name[:id_at]
        name = name.strip()
        json_at = _skip_ws(segment, args_at + len(_MISTRAL_ARGS))
        if json_at >= len(segment) or segment[json_at] != "{":
            out.add_error("[ARGS] not followed by a JSON object", segment[pos:])
            return
        end, _ = _scan_group(segment, json_at)
        if end < 0:
            out.add_error("unterminated JSON (missing closing bracket)", segment[pos:])
            return
        raw = segment[pos:end]

        def parse(
            name: str = name, body: str = segment[json_at:end]
        ) -> list[tuple[str, dict[str, Any]]]:
            if not re.fullmatch(r"[A-Za-z_][\w.\-]{0,127}", name):
                raise _CallSyntaxError(f"invalid function name {name[:40]!r}")
            return [(name, _call_from_object({"name": name, "arguments": _loads_strict(body)})[1])]

        out.attempt(raw, parse)
        pos = _skip_ws(segment, end)


_PY_CALL_START = re.compile(r"\[\s*[A-Za-z_][\w.]*\s*\(")
_PY_NAMES = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}


#: A literal integer past about 4,200 digits: Python's own JSON reader and `repr` refuse such a
#: number (a hex literal writes one in a quarter of the characters)
_MAX_INT_BITS = 14_000


def _py_literal(node: ast.AST) -> Any:
    """Convert a literal expression node to a JSON value; anything else is an error (no eval)."""
    if isinstance(node, ast.Constant):
        if isinstance(node.value, (str, int, float, bool)) or node.value is None:
            if isinstance(node.value, float) and node.value != node.value:
                raise _CallSyntaxError("NaN is not a valid argument")
            if isinstance(node.value, int) and node.value.bit_length() > _MAX_INT_BITS:
                raise _CallSyntaxError("integer too long (JSON readers refuse over 4,300 digits)")
            return node.value
        raise _CallSyntaxError(f"unsupported literal {type(node.value).__name__}")
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_py_literal(item) for item in node.elts]
    if isinstance(node, ast.Dict):
        result: dict[str, Any] = {}
        for key_node, value_node in zip(node.keys, node.values, strict=True):
            if key_node is None:
                raise _CallSyntaxError("** unpacking is not a literal")
            key = _py_literal(key_node)
            if not isinstance(key, str):
                raise _CallSyntaxError("dictionary keys must be strings")
            if key in result:
                raise _CallSyntaxError(f"duplicate dictionary key {key!r}")
            result[key] = _py_literal(value_node)
        return result
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _py_literal(node.operand)
        if isinstance(operand, bool) or not isinstance(operand, (int, float)):
            raise _CallSyntaxError("unary sign on a non-number")
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.Name) and node.id in _PY_NAMES:
        return _PY_NAMES[node.id]
    raise _CallSyntaxError(f"argument is not a literal ({type(node).__name__})")


def _dotted_name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted_name(node.value)}.{node.attr}"
    raise _CallSyntaxError("called object is not a plain function name")


def _py_call(node: ast.AST) -> tuple[str, dict[str, Any]]:
    if not isinstance(node, ast.Call):
        raise _CallSyntaxError(f"list element is not a call ({type(node).__name__})")
    name = _dotted_name(node.func)
    if node.args:
        raise _CallSyntaxError(f"{name}: positional arguments are not allowed; use keywords")
    arguments: dict[str, Any] = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise _CallSyntaxError(f"{name}: ** unpacking is not allowed")
        if keyword.arg in arguments:  # ast.parse accepts this; only the compiler rejects it
            raise _CallSyntaxError(f"{name}: duplicate keyword argument {keyword.arg!r}")
        arguments[keyword.arg] = _py_literal(keyword.value)
    return name, arguments


def _py_parse_expr(source: str) -> ast.AST:
    try:
        return pyast.parse(source.strip(), mode="eval").body
    except SyntaxError as err:
        raise _CallSyntaxError(f"invalid Python call syntax: {err.msg}") from None
    except (ValueError, RecursionError, MemoryError) as err:
        raise _CallSyntaxError(f"cannot parse call: {type(err).__name__}") from None


def _parse_pythonic(out: _Collector, text: str) -> None:
    body = text.strip()
    for prefix, suffix in (("<|python_start|>", "<|python_end|>"),):
        if body.startswith(prefix):
            body = body[len(prefix) :]
            body = body[: -len(suffix)] if body.endswith(suffix) else body
            body = body.strip()
    if not body.startswith("["):
        if body:
            out.add_error("pythonic tool calls must be a list: [f(a=1), g(b=2)]", body)
        return
    end, spans = _scan_group(body, 0, python=True)
    if end < 0:
        out.add_error("unterminated list of calls (missing closing bracket)", body)
        return
    if body[end:].strip():
        out.add_error("text after the list of calls", body[end:])
    tree = None
    if out.limit is None or len(spans) <= out.limit:  # a flood is not worth a full ast.parse
        try:
            tree = _py_parse_expr(body[:end])
        except _CallSyntaxError:
            tree = None
    if isinstance(tree, ast.List):
        for element, (s, e) in zip(tree.elts, spans, strict=False):
            out.attempt(body[s:e], lambda element=element: [_py_call(element)])
        return
    # the list as a whole does not parse: parse element by element so good calls survive
    for s, e in spans:
        if body[s:e].strip():
            out.attempt(body[s:e], lambda s=s, e=e: [_py_call(_py_parse_expr(body[s:e]))])


# --------------------------------------------------------------------------------------
# front door
# --------------------------------------------------------------------------------------


def detect_format(text: str) -> ToolFormat | None:
    """Guess the tool-call format of reasoning-free text; None when it holds no call syntax."""
    if _FUNC_OPEN in text:
        return ToolFormat.QWEN3_XML
    if _TOOL_OPEN in text:
        return ToolFormat.HERMES
    if _MISTRAL_MARK in text:
        return ToolFormat.MISTRAL
    body = text.lstrip()
    if body.startswith("<|python_start|>") or _PY_CALL_START.match(body):
        return ToolFormat.PYTHONIC
    if body.startswith(("<|python_tag|>", "{")) or re.match(r"\[\s*\{", body):
        return ToolFormat.LLAMA3_JSON
    return None


def _mixed_formats(text: str) -> str | None:
    """The formats whose call markers one text holds, when there are several; else None.

    Qwen3 XML may wrap `<function=` in `<tool_call>`: only a `<tool_call>` holding JSON is Hermes.
    """
    present = [name for name, found in (
        ("qwen3_xml", _FUNC_OPEN in text),
        ("hermes", _HERMES_JSON_OPEN_RE.search(text) is not None),
        ("mistral", _MISTRAL_MARK in text),
    ) if found]
    return " and ".join(present) if len(present) > 1 else None


def _schema_map(tools: Any) -> dict[str, Mapping[str, Any]] | None:
    """name -> parameters schema from OpenAI-style (or bare) function definitions."""
    if not tools:
        return None
    schemas: dict[str, Mapping[str, Any]] = {}
    for tool in tools:
        if not isinstance(tool, Mapping):
            continue
        fn = tool.get("function", tool) if tool.get("type", "function") == "function" else tool
        if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
            params = fn.get("parameters")
            schemas[fn["name"]] = params if isinstance(params, Mapping) else {}
    return schemas


def parse_tool_calls(
    text: str,
    format: str | ToolFormat = ToolFormat.AUTO,
    *,
    tools: Any = None,
    think_tag: str | None = "think",
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_calls: int | None = None,
) -> ParsedCalls:
    """Parse every tool call in `text`; calls inside <think> blocks are ignored.

    `tools` (OpenAI-style function definitions) lets the Qwen3 XML parser convert parameter
    strings to the declared JSON types. With `max_calls`, parsing stops after that many call
    candidates and the result is marked `truncated`. Never raises on any text; a non-string
    yields an error.
    """
    fmt = resolve_format(format)
    if not isinstance(text, str):
        out = _Collector(fmt, max_depth)
        out.add_error(f"completion is not a string ({type(text).__name__})", "")
        return out.result
    visible = strip_reasoning(text, think_tag)
    if fmt is ToolFormat.AUTO:
        detected = detect_format(visible)
        if detected is None:
            return ParsedCalls(format=ToolFormat.AUTO)
        fmt = detected
        mixed = _mixed_formats(visible)
        if mixed is not None:
            # only the detected format was read, so calls in the other went uncounted: a wrong
            # Hermes call beside a right XML one, or XML written inside a Hermes string, scored 1.0
            out = _Collector(fmt, max_depth)
            out.add_error(f"tool calls in more than one format ({mixed})", "")
            return out.result
    out = _Collector(fmt, max_depth, max_calls)
    schemas = _schema_map(tools)
    try:
        _dispatch(fmt, out, visible, schemas)
    except _Full:
        out.result.truncated = True
    return out.result


def _dispatch(
    fmt: ToolFormat, out: _Collector, visible: str, schemas: Mapping[str, Mapping[str, Any]] | None
) -> None:
    if fmt is ToolFormat.HERMES:
        _parse_tagged(out, visible, schemas)
    elif fmt is ToolFormat.QWEN3_XML:  # <tool_call> wrappers are optional and ignored
        _collect_xml_functions(out, visible, schemas)
    elif fmt is ToolFormat.LLAMA3_JSON:
        _parse_llama_json(out, visible)
    elif fmt is ToolFormat.MISTRAL:
        _parse_mistral(out, visible)
    elif fmt is ToolFormat.PYTHONIC:
        _parse_pythonic(out, visible)


def iter_formats() -> Iterator[ToolFormat]:
    """The concrete formats (everything but AUTO)."""
    return (fmt for fmt in ToolFormat if fmt is not ToolFormat.AUTO)


def _json_text(value: Any) -> str:
    # Escapes keep string contents from ever reading as a tag or a Mistral marker; `<` and
    # these marker texts can only occur inside JSON strings, so the replacements are safe.
    text = json.dumps(value, ensure_ascii=False).replace("<", "\\u003c")
    for marker in (_MISTRAL_MARK, _MISTRAL_ARGS, _MISTRAL_ID):
        text = text.replace(marker, "\\u005b" + marker[1:])
    return text


def render_tool_calls(
    calls: list[ToolCall] | list[dict[str, Any]], format: str | ToolFormat
) -> str:
    """Write calls the way a model emits them in `format` (the inverse of parse_tool_calls).

    Useful to build SFT targets or few-shot prompts. Pythonic output uses Python literals;
    Qwen3 XML writes strings raw and everything else as JSON (parse it back with `tools`).
    """
    fmt = resolve_format(format)
    items = [c.to_dict() if isinstance(c, ToolCall) else dict(c) for c in calls]
    if fmt is ToolFormat.HERMES:
        return "\n".join(f"<tool_call>\n{_json_text(c)}\n</tool_call>" for c in items)
    if fmt is ToolFormat.LLAMA3_JSON:
        objects = [_json_text({"name": c["name"], "parameters": c["arguments"]}) for c in items]
        return "<|python_tag|>" + "; ".join(objects)
    if fmt is ToolFormat.MISTRAL:
        return "[TOOL_CALLS][" + ", ".join(_json_text(c) for c in items) + "]"
    if fmt is ToolFormat.PYTHONIC:
        rendered = []
        for c in items:
            args = ", ".join(f"{key}={value!r}" for key, value in c["arguments"].items())
            rendered.append(f"{c['name']}({args})")
        return "[" + ", ".join(rendered) + "]"
    if fmt is ToolFormat.QWEN3_XML:
        blocks = []
        for c in items:
            params = "".join(
                f"<parameter={key}>\n{value if isinstance(value, str) else json.dumps(value)}\n</parameter>\n"
                for key, value in c["arguments"].items()
            )
            blocks.append(f"<tool_call>\n<function={c['name']}>\n{params}</function>\n</tool_call>")
        return "\n".join(blocks)
    raise ValueError("render_tool_calls needs a concrete format, not auto")

"""Match parsed tool calls against expected calls, following BFCL's AST-checker rules.

Rules (docs/verifiers.md "Tool-call verifier" has the full table and the differences from
BFCL): names must be equal; every expected argument gives one value or a list of allowed
values; optional arguments may be omitted, or sent as "" when they are strings, where the
expected list contains "" (BFCL's marker), or omitted where the expected value equals the
schema default; an expected object whose values are all lists gives allowed values per key,
at any depth (BFCL's possible-answer shape); strings compare after BFCL's normalisation;
numbers compare by value (2 == 2.0), booleans only with booleans; arrays in order, objects by
key; parallel calls are paired order-insensitively by a maximum bipartite matching.
"""

from __future__ import annotations

import enum
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.result import Status
from .parsers import ToolCall
from .schema import FunctionSpec, ToolSchema

#: In a list of allowed values, "" means "this parameter may be left out" (as in BFCL).
OMIT = ""


class StringMatch(str, enum.Enum):
    """How strings are compared."""

    BFCL = "bfcl"  # drop spaces and , . / - _ * ^, lower-case, ' -> " (BFCL's standardize_string)
    CASEFOLD = "casefold"  # collapse whitespace runs, case-fold
    EXACT = "exact"

    def __str__(self) -> str:
        return self.value


_BFCL_PUNCT = re.compile(r"[ ,./\-_*^]")


def normalize_string(value: str, mode: StringMatch = StringMatch.BFCL) -> str:
    """Normalise a string for comparison under `mode`."""
    if mode is StringMatch.BFCL:
        return _BFCL_PUNCT.sub("", value).lower().replace("'", '"')
    if mode is StringMatch.CASEFOLD:
        return " ".join(value.split()).casefold()
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def values_equal(actual: Any, expected: Any, mode: StringMatch = StringMatch.BFCL) -> bool:
    """True when a model value equals an expected value under the normalisation rules."""
    try:
        return _equal(actual, expected, mode)
    except RecursionError:
        return False


def _equal(actual: Any, expected: Any, mode: StringMatch) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(actual) is type(expected) and actual == expected
    if _is_number(expected):
        # int and float compare by value: JSON has one number type and 2 == 2.0
        return _is_number(actual) and math.isfinite(actual) and actual == expected
    if isinstance(expected, str):
        return isinstance(actual, str) and normalize_string(actual, mode) == normalize_string(
            expected, mode
        )
    if expected is None:
        return actual is None
    if isinstance(expected, ObjectPattern):
        return isinstance(actual, Mapping) and expected.matches(actual, mode)
    if isinstance(expected, (list, tuple)):
        return (
            isinstance(actual, (list, tuple))
            and len(actual) == len(expected)
            and all(_equal(a, e, mode) for a, e in zip(actual, expected, strict=True))
        )
    if isinstance(expected, Mapping):
        return (
            isinstance(actual, Mapping)
            and actual.keys() == expected.keys()
            and all(_equal(actual[k], expected[k], mode) for k in expected)
        )
    return bool(actual == expected)


@dataclass
class ArgumentSpec:
    """What an expected argument accepts: a list of allowed values, and whether it may be omitted."""

    allowed: list[Any]
    may_omit: bool = False
    #: per string mode, the normalised allowed strings (a string equals only strings)
    _strings: dict[StringMatch, frozenset[str]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def accepts(self, value: Any, mode: StringMatch) -> bool:
        """True when `value` is allowed; an explicit "" stands for "left out" where that is allowed."""
        if isinstance(value, str):
            if self.may_omit and value == OMIT:
                return True
            strings = self._strings.get(mode)
            if strings is None:
                strings = frozenset(normalize_string(a, mode) for a in self.allowed if isinstance(a, str))
                self._strings[mode] = strings
            return normalize_string(value, mode) in strings
        return any(values_equal(value, allowed, mode) for allowed in self.allowed)


@dataclass
class ObjectPattern:
    """An expected object given as allowed values per key (BFCL's nested possible answers)."""

    fields: dict[str, ArgumentSpec]

    def matches(self, actual: Mapping[str, Any], mode: StringMatch) -> bool:
        """Every key of `actual` is expected and allowed; every expected key present or omittable."""
        if any(key not in self.fields for key in actual):
            return False
        return all(
            spec.accepts(actual[key], mode) if key in actual else spec.may_omit
            for key, spec in self.fields.items()
        )


@dataclass
class ExpectedCall:
    """One expected call: the function name and a spec per argument."""

    name: str
    arguments: dict[str, ArgumentSpec] = field(default_factory=dict)


def _schema_types(prop_schema: Any) -> set[str]:
    if not isinstance(prop_schema, Mapping):
        return set()
    kind = prop_schema.get("type")
    return {kind} if isinstance(kind, str) else set(kind) if isinstance(kind, list) else set()


def argument_spec(value: Any, prop_schema: Any = None) -> ArgumentSpec:
    """Read one expected argument: a single value, or a list of allowed values.

    A list is a list of allowed values (BFCL style), and "" in it means the parameter may be
    omitted. Exception: for a parameter whose schema type is "array", a list whose elements
    are not all lists (or "") is the expected array itself. An empty list is a literal [].
    Each allowed value is read by `allowed_value`, so objects nest.
    """
    if not isinstance(value, list):
        return ArgumentSpec([allowed_value(value, prop_schema)])
    if not value:
        return ArgumentSpec([[]])
    if "array" in _schema_types(prop_schema) and not all(
        isinstance(item, list) or item == OMIT for item in value
    ):
        return ArgumentSpec([allowed_value(value, prop_schema)])
    allowed = [
        allowed_value(item, prop_schema)
        for item in value
        if not (isinstance(item, str) and item == OMIT)
    ]
    return ArgumentSpec(allowed, may_omit=len(allowed) < len(value))


def allowed_value(value: Any, schema: Any = None, depth: int = 0) -> Any:
    """One allowed value: an object whose values are all lists becomes an ObjectPattern.

    BFCL writes nested answers as {"key": [allowed, ...]} (and lists of such objects); any
    other object or list is a literal value, matched as it is.
    """
    if depth > 32:
        return value
    if isinstance(value, list):
        items = schema.get("items") if isinstance(schema, Mapping) else None
        return [allowed_value(item, items, depth + 1) for item in value]
    if isinstance(value, dict) and value and all(isinstance(v, list) for v in value.values()):
        props = schema.get("properties") if isinstance(schema, Mapping) else None
        props = props if isinstance(props, Mapping) else {}
        return ObjectPattern({key: argument_spec(sub, props.get(key)) for key, sub in value.items()})
    return value


def expected_call(obj: Any, spec: FunctionSpec | None = None) -> ExpectedCall:
    """Read an expected call: {"name", "arguments"} or BFCL's {name: {param: [allowed...]}}."""
    if isinstance(obj, ToolCall):
        obj = obj.to_dict()
    if not isinstance(obj, Mapping):
        raise ValueError(f"an expected call must be an object, got {type(obj).__name__}")
    if "name" in obj:
        name, arguments = obj["name"], obj.get("arguments", obj.get("parameters", {}))
    elif len(obj) == 1:  # BFCL possible-answer shape
        ((name, arguments),) = obj.items()
    else:
        raise ValueError(f'an expected call needs "name" and "arguments": {str(obj)[:120]}')
    if not isinstance(name, str) or not name:
        raise ValueError(f"expected call has no function name: {str(obj)[:120]}")
    if not isinstance(arguments, Mapping):
        raise ValueError(f"expected arguments of {name!r} must be an object")
    props = spec.properties if spec is not None else {}
    return ExpectedCall(
        name, {key: argument_spec(value, props.get(key)) for key, value in arguments.items()}
    )


_NO_DEFAULT = object()


def argument_mismatch(
    call: ToolCall,
    expected: ExpectedCall,
    spec: FunctionSpec | None = None,
    mode: StringMatch = StringMatch.BFCL,
    defaults: bool = False,
) -> str | None:
    """Why `call` does not match `expected` (None when it matches).

    By default, as in BFCL, only "" marks a parameter that may be left out, and a parameter the
    expected call does not name is unexpected even when it restates its schema default. With
    `defaults`, a parameter whose value is its schema default may be left out where that value
    is expected, or sent where the parameter is not expected (the call does the same).
    """
    if call.name != expected.name:
        return f"called {call.name!r}, expected {expected.name!r}"
    props = spec.properties if spec is not None else {}
    required = spec.required if spec is not None else frozenset()
    for param, arg in expected.arguments.items():
        default = _default(props.get(param)) if defaults else _NO_DEFAULT
        if param not in call.arguments:
            omittable = arg.may_omit or (
                param not in required
                and default is not _NO_DEFAULT
                and any(values_equal(default, allowed, mode) for allowed in arg.allowed)
            )
            if not omittable:
                return f"{call.name}: missing argument {param!r}"
            continue
        value = call.arguments[param]
        if not arg.accepts(value, mode):
            return f"{call.name}: {param}={_short(value)} not in allowed {_short(arg.allowed)}"
    for param, value in call.arguments.items():
        if param in expected.arguments:
            continue
        default = _default(props.get(param)) if defaults else _NO_DEFAULT
        if default is _NO_DEFAULT or not values_equal(value, default, mode):
            return f"{call.name}: unexpected argument {param!r}"
    return None


def _default(prop_schema: Any) -> Any:
    if isinstance(prop_schema, Mapping) and "default" in prop_schema:
        return prop_schema["default"]
    return _NO_DEFAULT


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


@dataclass
class MatchResult:
    """How a completion's calls pair up with the expected calls."""

    status: Status
    matched: int
    n_calls: int
    n_expected: int
    pairs: list[tuple[int, int]] = field(default_factory=list)  # (call index, expected index)
    detail: str = ""

    @property
    def score(self) -> float:
        """Partial credit: matched pairs over max(#calls, #expected); 1.0 when both are empty."""
        denominator = max(self.n_calls, self.n_expected)
        return 1.0 if denominator == 0 else self.matched / denominator


def _max_bipartite(adjacency: list[list[int]], n_right: int) -> list[int]:
    """Maximum matching by augmenting paths found breadth-first; returns right -> left or -1."""
    match_right = [-1] * n_right
    match_left = [-1] * len(adjacency)
    for root in range(len(adjacency)):
        parent_of: dict[int, int] = {}  # right vertex -> the left vertex that reached it
        queue, head, found = [root], 0, -1
        while head < len(queue) and found < 0:
            left = queue[head]
            head += 1
            for right in adjacency[left]:
                if right in parent_of:
                    continue
                parent_of[right] = left
                if match_right[right] < 0:
                    found = right
                    break
                queue.append(match_right[right])
        right = found
        while right >= 0:  # flip the alternating path from the free right vertex to the root
            left = parent_of[right]
            previous = match_left[left]
            match_right[right], match_left[left] = left, right
            right = previous
    return match_right


def match_calls(
    calls: Sequence[ToolCall],
    expected: Sequence[ExpectedCall],
    schema: ToolSchema | None = None,
    mode: StringMatch = StringMatch.BFCL,
    eligible: Sequence[bool] | None = None,
    defaults: bool = False,
) -> MatchResult:
    """Pair calls with expected calls order-insensitively and judge the set as a whole.

    `eligible[i] = False` keeps call i out of the pairing (e.g. it failed the schema) while
    still counting it; `defaults` as in `argument_mismatch`. Status: WRONG_COUNT when the numbers differ, CORRECT when every call
    pairs, WRONG_ARGUMENTS when the names agree but values do not, WRONG otherwise.
    """
    n_calls, n_expected = len(calls), len(expected)
    adjacency: list[list[int]] = []
    reasons: list[str] = []
    for exp in expected:
        spec = schema.get(exp.name) if schema is not None else None
        row: list[int] = []
        reason = f"no call to {exp.name!r}"
        for i, call in enumerate(calls):
            if call.name != exp.name or (eligible is not None and not eligible[i]):
                continue
            mismatch = argument_mismatch(call, exp, spec, mode, defaults)
            if mismatch is None:
                row.append(i)
            elif reason.startswith("no call"):
                reason = mismatch
        adjacency.append(row)
        reasons.append(reason)
    match_right = _max_bipartite(adjacency, n_calls)
    pairs = sorted((i, j) for i, j in enumerate(match_right) if j >= 0)
    matched = len(pairs)
    if n_calls != n_expected:
        status = Status.WRONG_COUNT
        detail = f"{n_calls} call(s), expected {n_expected}"
    elif matched == n_expected:
        status, detail = Status.CORRECT, ""
    else:
        paired = {j for _, j in pairs}
        first_unmatched = next(j for j in range(n_expected) if j not in paired)
        same_names = Counter(c.name for c in calls) == Counter(e.name for e in expected)
        status = Status.WRONG_ARGUMENTS if same_names else Status.WRONG
        detail = reasons[first_unmatched]
    return MatchResult(status, matched, n_calls, n_expected, pairs, detail)

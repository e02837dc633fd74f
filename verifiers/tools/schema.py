"""Check parsed tool calls against OpenAI-style function definitions with `jsonschema`."""

from __future__ import annotations

import contextlib
import contextvars
import copy
import enum
import functools
import itertools
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import regex
from jsonschema import Draft7Validator, Draft202012Validator

from .parsers import ToolCall
from .schema_shortcuts import Predicate, compile_valid, draft7_schema_ok

# BFCL's function documents use Python, Java and JavaScript type names; JSON Schema spells them
# differently ("any"/"Any" means no type constraint).
_TYPE_ALIASES = {
    "dict": "object",
    "float": "number",
    "double": "number",
    "tuple": "array",
    "list": "array",
    "int": "integer",
    "long": "integer",
    "bool": "boolean",
    "str": "string",
    # Java
    "String": "string",
    "char": "string",
    "byte": "integer",
    "short": "integer",
    "Array": "array",
    "ArrayList": "array",
    "Set": "array",
    "Queue": "array",
    "Stack": "array",
    "HashMap": "object",
    "Hashtable": "object",
    # JavaScript
    "Boolean": "boolean",
    "Bigint": "integer",
}
_NO_TYPE = frozenset({"any", "Any"})
_DRAFT_2020_ONLY = (
    "prefixItems", "$defs", "dependentRequired", "dependentSchemas", "unevaluatedProperties",
    "unevaluatedItems", "$dynamicRef", "$dynamicAnchor", "minContains", "maxContains", "$anchor",
)
_SUBSCHEMA_KEYS = ("items", "additionalProperties", "not", "contains", "if", "then", "else")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")

#: At most this many issues are reported per call (a huge bad call must not flood the output).
MAX_ISSUES_PER_CALL = 20


def _json_key(value: Any) -> Any:
    """A hashable key that two JSON values share exactly when JSON Schema calls them equal."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        # as text: integer hashes are not randomised, and a model's array of colliding ones
        # would make the set below quadratic; 1 and 1.0 are equal in JSON Schema
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return ("number", repr(value))
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, Mapping):
        return ("object", frozenset((k, _json_key(v)) for k, v in value.items()))
    if isinstance(value, Sequence):
        return ("array", tuple(_json_key(v) for v in value))
    return ("other", repr(value))


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Any:
    """jsonschema's `uniqueItems` in linear time (its own compares every pair of objects)."""
    if unique and validator.is_type(instance, "array"):
        seen: set[Any] = set()
        for index, item in enumerate(instance):
            key = _json_key(item)
            if key in seen:
                # jsonschema's message starts with the whole array, cut off before its point
                yield jsonschema.ValidationError(f"array has non-unique elements (item {index} repeats one)")
                return
            seen.add(key)


#: Seconds the `pattern` checks of one call, or of a completion's calls (`pattern_budget`), may
#: take together. A dataset's pattern with nested quantifiers (`^([a-z0-9_.+-]+)+@x\.com$`) is
#: exponential in the model's string under `re`: 26 characters took 3 s, and a call that never
#: finishes is unjudged, not wrong.
PATTERN_BUDGET_S = 0.5
_pattern_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("pattern_deadline", default=None)


def _search(pattern: str, text: str) -> bool | None:
    """Whether `pattern` matches in `text` on the `regex` engine; None when it ran past the budget."""
    deadline = _pattern_deadline.get()
    remaining = PATTERN_BUDGET_S if deadline is None else deadline - time.monotonic()
    try:
        return regex.search(pattern, text, timeout=max(remaining, 0.001)) is not None
    except TimeoutError:
        return None


def _ran_past(pattern: str) -> jsonschema.ValidationError:
    # the model's string (a value or a property name) made the match run away: its verdict
    return jsonschema.ValidationError(
        f"matching {pattern!r:.80} ran past {PATTERN_BUDGET_S:g} s: counted as not matching")


def _pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Any:
    """jsonschema's `pattern` on the `regex` engine, under the call's time budget."""
    if not validator.is_type(instance, "string"):
        return
    found = _search(pattern, instance)
    if found is None:
        yield _ran_past(pattern)
    elif not found:
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Any:
    """jsonschema's `patternProperties`, matching the model's property names as `_pattern` does."""
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for name, value in instance.items():
            found = _search(pattern, name)
            if found is None:
                yield _ran_past(pattern)
                return
            if found:
                yield from validator.descend(value, subschema, path=name, schema_path=pattern)


def _additional_properties(validator: Any, extra_schema: Any, instance: Any, schema: Any) -> Any:
    """jsonschema's `additionalProperties`, with the names tried on `patternProperties` as above."""
    if not validator.is_type(instance, "object"):
        return
    declared, patterns = schema.get("properties", {}), list(schema.get("patternProperties", {}))
    extras = []
    for name in instance:
        if name in declared:
            continue
        for pattern in patterns:
            found = _search(pattern, name)
            if found is None:
                yield _ran_past(pattern)
                return
            if found:
                break
        else:
            extras.append(name)
    if validator.is_type(extra_schema, "object"):
        for name in extras:
            yield from validator.descend(instance[name], extra_schema, path=name)
    elif not extra_schema and extras:
        names = ", ".join(repr(name) for name in sorted(extras))
        if patterns:
            yield jsonschema.ValidationError(
                f"{names} {'does' if len(extras) == 1 else 'do'} not match any of the regexes: "
                + ", ".join(repr(p) for p in sorted(patterns)))
        else:
            yield jsonschema.ValidationError(
                f"Additional properties are not allowed ({names} "
                f"{'was' if len(extras) == 1 else 'were'} unexpected)")


#: Draft 2020-12 validation, with `uniqueItems` linear in the model's array and every regex on the
#: model's strings timed (`pattern`, `patternProperties`, `additionalProperties`; not
#: `unevaluatedProperties` beside `patternProperties`, which jsonschema matches with `re`).
_Validator = jsonschema.validators.extend(
    Draft202012Validator,
    {"uniqueItems": _unique_items, "pattern": _pattern, "patternProperties": _pattern_properties,
     "additionalProperties": _additional_properties})


class Violation(str, enum.Enum):
    """What is wrong with one call, relative to the function definitions."""

    UNKNOWN_FUNCTION = "unknown_function"
    MISSING_REQUIRED = "missing_required"
    UNEXPECTED_PARAMETER = "unexpected_parameter"
    WRONG_TYPE = "wrong_type"
    ENUM = "enum"
    CONSTRAINT = "constraint"  # minimum, pattern, minItems ... any other schema keyword

    def __str__(self) -> str:
        return self.value


@dataclass
class SchemaIssue:
    """One violation: its kind, where in the arguments (a JSON pointer-ish path), and a message."""

    kind: Violation
    path: str
    message: str

    def to_dict(self) -> dict[str, str]:
        """Return the issue as a JSON-serialisable dict."""
        return {"kind": self.kind.value, "path": self.path, "message": self.message}


@dataclass
class FunctionSpec:
    """One function definition, normalised to JSON Schema and compiled."""

    name: str
    parameters: dict[str, Any]
    validator: Draft202012Validator = field(repr=False)
    #: True only for arguments jsonschema finds valid (None: the schema needs jsonschema)
    valid: Predicate | None = field(default=None, repr=False)
    #: per top-level parameter, the same for its value (filled only when `valid` is set)
    parameter_valid: dict[str, Predicate] = field(default_factory=dict, repr=False)

    @property
    def properties(self) -> dict[str, Any]:
        """The top-level parameter schemas by name."""
        props = self.parameters.get("properties")
        return props if isinstance(props, dict) else {}

    @property
    def closed_to_unlisted(self) -> bool:
        """Whether a top-level name outside `properties` is unexpected by that fact alone (closed,
        and no `patternProperties` that such a name might match)."""
        return self.parameters.get("additionalProperties") is False and not self.parameters.get(
            "patternProperties")

    @property
    def required(self) -> frozenset[str]:
        """Names of the required top-level parameters."""
        required = self.parameters.get("required")
        return frozenset(required) if isinstance(required, list) else frozenset()


def normalize_parameters_schema(schema: Any, *, closed: bool = True) -> dict[str, Any]:
    """Turn a function's `parameters` into valid JSON Schema.

    BFCL type names (dict, float, tuple, any ...) become JSON Schema types; a missing schema
    means "no parameters". With `closed`, the top-level object rejects parameters it does not
    list (BFCL's "unexpected parameter" rule) unless it sets additionalProperties itself.
    """
    if schema is None:
        schema = {"type": "object", "properties": {}}
    if not isinstance(schema, Mapping):
        raise ValueError(f"function parameters must be a JSON Schema object, got {schema!r:.80}")
    normalized = _normalize_types(copy.deepcopy(dict(schema)))
    normalized.setdefault("type", "object")
    if (
        closed
        and "additionalProperties" not in normalized
        and "patternProperties" not in normalized
    ):
        normalized.setdefault("properties", {})
        normalized["additionalProperties"] = False
    return normalized


def _normalize_types(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    if isinstance(kind, str):
        if kind in _NO_TYPE:
            del schema["type"]
        else:
            schema["type"] = _TYPE_ALIASES.get(kind, kind)
    elif isinstance(kind, list):
        schema["type"] = [_TYPE_ALIASES.get(k, k) for k in kind if k not in _NO_TYPE] or None
        if schema["type"] is None:
            del schema["type"]
    _move_item_enum(schema)
    for key in _SUBSCHEMA_KEYS:
        if isinstance(schema.get(key), dict):
            _normalize_types(schema[key])
    for key in _SUBSCHEMA_LISTS:
        if isinstance(schema.get(key), list):
            for sub in schema[key]:
                _normalize_types(sub)
    for key in _SUBSCHEMA_MAPS:
        if isinstance(schema.get(key), dict):
            for sub in schema[key].values():
                _normalize_types(sub)
    return schema


def _move_item_enum(schema: dict[str, Any]) -> None:
    """An array's `enum` that lists no array is its items' enum.

    Function docs (BFCL's live ones among them) write `{"type": "array", "enum": ["co2", ...]}`
    for "a list of these values"; read as JSON Schema no array could fit it, so every call and
    every expected value would break the schema. An enum that lists arrays keeps its meaning.
    """
    enum_values, items = schema.get("enum"), schema.get("items", {})
    if (
        schema.get("type") == "array"
        and isinstance(enum_values, list)
        and enum_values
        and not any(isinstance(v, list) for v in enum_values)
        and isinstance(items, dict)
        and "enum" not in items
    ):
        schema["items"] = {**items, "enum": schema.pop("enum")}


def _function_definition(tool: Any) -> Mapping[str, Any]:
    if not isinstance(tool, Mapping):
        raise ValueError(f"a tool must be an object, got {type(tool).__name__}")
    if tool.get("type", "function") != "function":
        raise ValueError(f"only function tools are supported, got type {tool.get('type')!r}")
    fn = tool.get("function", tool)
    if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise ValueError(f"tool has no function name: {json.dumps(tool)[:120]}")
    return fn


class ToolSchema:
    """The set of functions a completion may call, compiled once for many calls."""

    def __init__(self, functions: Sequence[FunctionSpec]) -> None:
        self._source: tuple[str, bool] | None = None  # set by from_tools; lets pickling rebuild
        self.functions: dict[str, FunctionSpec] = {}
        for spec in functions:
            if spec.name in self.functions:
                raise ValueError(f"function {spec.name!r} is defined twice in the tools list")
            self.functions[spec.name] = spec

    @classmethod
    def from_tools(cls, tools: Sequence[Any], *, closed: bool = True) -> ToolSchema:
        """Build from OpenAI-style `{"type": "function", "function": {...}}` (or bare) definitions."""
        if isinstance(tools, (str, bytes)) or not isinstance(tools, Sequence):
            raise ValueError(
                f"tools must be a list of function definitions, got {type(tools).__name__}"
            )
        try:
            key = json.dumps(tools, sort_keys=True)
        except (TypeError, ValueError) as err:
            raise ValueError(f"tools are not JSON-serialisable: {err}") from None
        return _compiled(key, closed)

    def __reduce__(self) -> tuple[Any, ...]:
        # compiled validators do not pickle; worker processes rebuild (and cache) from the source
        if self._source is None:
            raise TypeError("only a ToolSchema built with from_tools can be pickled")
        return (_compiled, self._source)

    def get(self, name: str) -> FunctionSpec | None:
        """The function called `name`, or None."""
        return self.functions.get(name)

    def validate(self, call: ToolCall) -> list[SchemaIssue]:
        """Every way `call` breaks its function's definition (empty list: the call is valid)."""
        spec = self.functions.get(call.name)
        if spec is None:
            return [
                SchemaIssue(
                    Violation.UNKNOWN_FUNCTION,
                    "",
                    f"function {call.name!r} is not in the tools list",
                )
            ]
        return validate_arguments(spec, call.arguments)


# BFCL alone has about 2,500 distinct tool sets over fewer distinct functions; checking a
# schema against the metaschema costs far more than matching a call, so both levels are cached.
@functools.lru_cache(maxsize=4096)
def _compiled(key: str, closed: bool) -> ToolSchema:
    tools = json.loads(key)
    specs = []
    for tool in tools:
        fn = _function_definition(tool)
        specs.append(_compiled_function(json.dumps(fn, sort_keys=True), closed))
    schema = ToolSchema(specs)
    schema._source = (key, closed)
    return schema


@functools.lru_cache(maxsize=16384)
def _compiled_function(key: str, closed: bool) -> FunctionSpec:
    fn = json.loads(key)
    parameters = normalize_parameters_schema(fn.get("parameters"), closed=closed)
    # Checking a schema against the 2020-12 metaschema costs ~4 ms ($dynamicRef); the Draft 7
    # metaschema checks the same for schemas that use no 2020-12-only keyword, 6x faster.
    checker = Draft202012Validator if any(f'"{k}"' in key for k in _DRAFT_2020_ONLY) else Draft7Validator
    if checker is not Draft7Validator or not draft7_schema_ok(parameters):
        try:
            checker.check_schema(parameters)
        except jsonschema.SchemaError as err:
            raise ValueError(
                f"function {fn['name']!r} has an invalid parameters schema: {err.message}"
            ) from None
    valid = compile_valid(parameters)
    per_parameter: dict[str, Predicate] = {}
    if valid is not None:
        for name, sub in parameters.get("properties", {}).items():
            check = compile_valid(sub)
            if check is not None:
                per_parameter[name] = check
    return FunctionSpec(fn["name"], parameters, _Validator(parameters), valid, per_parameter)


def _path(parts: Sequence[Any]) -> str:
    return "/" + "/".join(str(part) for part in parts) if parts else ""


def validate_arguments(spec: FunctionSpec, arguments: Mapping[str, Any]) -> list[SchemaIssue]:
    """Validate one call's arguments against its function's parameters schema.

    An explicit null for a declared parameter that is not required stands for "not given"
    (Python's `f(mod=None)`, OpenAI strict mode's nullable optional fields), so it is not
    held to the parameter's type; nor is a value equal to the parameter's declared `default`
    (the definition itself names it: BFCL's integer `year` with default "dontcare"). Matching
    still compares both with the expected values.
    """
    if spec.valid is not None and _known_valid(spec.valid, arguments):
        return []
    if _pattern_deadline.get() is not None:  # inside `pattern_budget`: the completion's clock
        return _validate(spec, arguments)
    with pattern_budget():
        return _validate(spec, arguments)


@contextlib.contextmanager
def pattern_budget() -> Iterator[None]:
    """One PATTERN_BUDGET_S for every `pattern` check inside, e.g. all of a completion's calls."""
    # per call, 20 calls of a runaway match each took the whole budget and the item timed out
    token = _pattern_deadline.set(time.monotonic() + PATTERN_BUDGET_S)
    try:
        yield
    finally:
        _pattern_deadline.reset(token)


def _validate(spec: FunctionSpec, arguments: Mapping[str, Any]) -> list[SchemaIssue]:
    """`validate_arguments` past its fast path."""
    required, declared = spec.required, spec.properties
    given = {k: v for k, v in arguments.items()
             if k in required or k not in declared or not (v is None or _is_default(v, declared[k]))}
    if len(given) < len(arguments):
        arguments = given
        if spec.valid is not None and _known_valid(spec.valid, arguments):
            return []
    issues: list[SchemaIssue] = []
    # reported by us, one issue per name, rather than jsonschema's single combined message
    per_name = spec.closed_to_unlisted
    if per_name:
        for name in arguments:
            if name not in spec.properties:
                issues.append(
                    SchemaIssue(
                        Violation.UNEXPECTED_PARAMETER, f"/{name}", f"unexpected parameter {name!r}"
                    )
                )
    try:
        # islice: a 100k-element array of wrong types must not build 100k error objects
        first = itertools.islice(spec.validator.iter_errors(arguments), 5 * MAX_ISSUES_PER_CALL)
        errors = sorted(first, key=lambda e: list(map(str, e.absolute_path)))
    except RecursionError:
        return issues + [
            SchemaIssue(Violation.CONSTRAINT, "", "arguments nested too deeply to validate")
        ]
    for error in errors:
        if len(issues) >= MAX_ISSUES_PER_CALL:
            break
        where = _path(list(error.absolute_path))
        keyword = error.validator
        if keyword == "additionalProperties" and not error.absolute_path and per_name:
            continue  # already reported per parameter above
        if keyword == "required":
            kind = Violation.MISSING_REQUIRED
        elif keyword == "additionalProperties":
            kind = Violation.UNEXPECTED_PARAMETER
        elif keyword == "type":
            kind = Violation.WRONG_TYPE
        elif keyword in ("enum", "const"):
            kind = Violation.ENUM
        else:
            kind = Violation.CONSTRAINT
        issues.append(SchemaIssue(kind, where, _short(error.message)))
    return issues[:MAX_ISSUES_PER_CALL]


def _is_default(value: Any, prop_schema: Any) -> bool:
    """True when `value` is the parameter's declared default, types included (True is not 1)."""
    if not isinstance(prop_schema, Mapping) or "default" not in prop_schema:
        return False
    try:
        return _same(value, prop_schema["default"])
    except RecursionError:  # a default nested past the stack is nobody's argument
        return False


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(map(_same, a, b))
    return bool(a == b)


def float_integers(spec: FunctionSpec, arguments: Mapping[str, Any]) -> list[SchemaIssue]:
    """Floats with an integral value (2.0) where the schema says integer, at any depth.

    JSON Schema counts them as integers (and `validate_arguments` follows it); BFCL and Python
    call them floats. The tools verifier reports them with `integer_floats=False`.
    """
    issues: list[SchemaIssue] = []
    declared, required = spec.properties, spec.required
    for name, value in arguments.items():
        if name in declared and (name in required or not _is_default(value, declared[name])):
            _float_integers(declared[name], value, [name], issues)
    return issues


def _float_integers(schema: Any, value: Any, where: list[Any], issues: list[SchemaIssue]) -> None:
    if not isinstance(schema, Mapping) or len(issues) >= MAX_ISSUES_PER_CALL or len(where) > 64:
        return
    if isinstance(value, float):
        kind = schema.get("type")
        kinds = {kind} if isinstance(kind, str) else set(kind) if isinstance(kind, list) else set()
        if "integer" in kinds and "number" not in kinds and value.is_integer():
            issues.append(SchemaIssue(Violation.WRONG_TYPE, _path(where),
                                      f"{value!r} is a float, not an integer"))
    elif isinstance(value, Mapping):
        props = schema.get("properties")
        if isinstance(props, Mapping):
            for key, sub in value.items():
                if key in props:
                    _float_integers(props[key], sub, [*where, key], issues)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, sub in enumerate(value):
            _float_integers(schema["items"], sub, [*where, index], issues)


def validate_parameter(spec: FunctionSpec, param: str, value: Any) -> list[SchemaIssue]:
    """The issues of one top-level parameter's value (its own path only)."""
    check = spec.parameter_valid.get(param)
    if check is not None and _known_valid(check, value):
        return []
    return [i for i in validate_arguments(spec, {param: value}) if i.path.startswith(f"/{param}")]


def _known_valid(check: Predicate, value: Any) -> bool:
    try:
        return check(value)
    except RecursionError:  # jsonschema says what is too deep
        return False


def _short(message: str, limit: int = 200) -> str:
    return message if len(message) <= limit else message[:limit] + "..."

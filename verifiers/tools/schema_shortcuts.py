"""Fast yes-answers for the JSON Schema subset function definitions use; jsonschema for the rest.

Validating a call with `jsonschema` costs about 0.1-0.3 ms (its validators are generic), and
checking a schema against the Draft 7 metaschema about 0.5-3 ms; most calls are valid and most
schemas use only `type`, `properties`, `required`, `additionalProperties`, `items` and `enum`.
For those, the predicates here answer "valid" in a few microseconds. They never answer
"invalid": False means "not known to be valid", and the caller then runs jsonschema, so every
message and every verdict is exactly what jsonschema gives (tests/verifiers/tools compare the
two on generated schemas and values).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

from jsonschema import Draft7Validator, Draft202012Validator

Predicate = Callable[[Any], bool]

#: Every keyword Draft 2020-12 validation acts on; any other keyword is an annotation.
_ASSERTING = frozenset(Draft202012Validator.VALIDATORS)
#: The asserting keywords modelled below ("format" asserts nothing without a format checker,
#: and the verifier's validators have none).
_MODELLED = frozenset({"type", "properties", "required", "additionalProperties", "items", "enum", "format"})


def _is_integer(value: Any) -> bool:
    # Draft 6 and later: 2.0 is an integer; bool is never a number
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


_TYPES: dict[str, Predicate] = {
    "array": lambda v: isinstance(v, list),
    "boolean": lambda v: isinstance(v, bool),
    "integer": _is_integer,
    "null": lambda v: v is None,
    "number": lambda v: not isinstance(v, bool) and isinstance(v, numbers.Number),
    "object": lambda v: isinstance(v, dict),
    "string": lambda v: isinstance(v, str),
}


def _always(_: Any) -> bool:
    return True


def _never(_: Any) -> bool:
    return False


def compile_valid(schema: Any) -> Predicate | None:
    """A predicate that is True only when Draft 2020-12 validation of a value finds no error.

    None when the schema uses an asserting keyword not modelled here (or a malformed value
    for one): then only jsonschema can answer.
    """
    if schema is True:
        return _always
    if schema is False:
        return _never
    if not isinstance(schema, dict):
        return None
    if any(key in _ASSERTING and key not in _MODELLED for key in schema):
        return None
    checks: list[Predicate] = []
    if "type" in schema:
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not kinds or not all(isinstance(k, str) and k in _TYPES for k in kinds):
            return None
        tests = [_TYPES[k] for k in kinds]
        checks.append(tests[0] if len(tests) == 1 else lambda v: any(t(v) for t in tests))
    if "enum" in schema:
        enum = schema["enum"]
        if not isinstance(enum, list):
            return None
        # jsonschema compares a string with == only; other values need its own equality rules
        checks.append(lambda v: isinstance(v, str) and v in enum)
    object_check = _object_check(schema)
    if object_check is None:
        return None
    if object_check is not _always:
        checks.append(lambda v: not isinstance(v, dict) or object_check(v))
    if "items" in schema:
        item = compile_valid(schema["items"])
        if item is None:
            return None
        checks.append(lambda v: not isinstance(v, list) or all(item(x) for x in v))
    if not checks:
        return _always
    if len(checks) == 1:
        return checks[0]
    return lambda v: all(check(v) for check in checks)


def _object_check(schema: dict[str, Any]) -> Predicate | None:
    """properties + required + additionalProperties on a dict value (None: not modelled)."""
    props = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if not isinstance(props, dict) or not isinstance(required, list):
        return None
    compiled = {name: compile_valid(sub) for name, sub in props.items()}
    if any(check is None for check in compiled.values()):
        return None
    extra_check = compile_valid(extra)
    if extra_check is None:
        return None
    if not compiled and not required and extra_check is _always:
        return _always
    known = compiled  # a name checked by `properties` is never "additional"

    def check(value: dict[str, Any]) -> bool:
        for name in required:
            if name not in value:
                return False
        for name, item in value.items():
            test = known.get(name, extra_check)
            if not test(item):  # type: ignore[operator]
                return False
        return True

    return check


# ----------------------------------------------------------------------- metaschema

_META_PROPERTIES = frozenset(Draft7Validator.META_SCHEMA["properties"])
_SIMPLE_TYPES = frozenset(_TYPES)
_STRING_KEYWORDS = ("description", "title", "format", "$comment")


def draft7_schema_ok(schema: Any) -> bool:
    """True only when `schema` passes `Draft7Validator.check_schema` (False: not known).

    Models the metaschema's rules for the keywords `compile_valid` models plus the
    annotations (`description`, `title`, `default`, `examples`, `format`, `$comment`);
    keywords the metaschema does not name are free, as they are for it.
    """
    try:
        return _meta_ok(schema)
    except RecursionError:
        return False


def _meta_ok(schema: Any) -> bool:
    if isinstance(schema, bool):
        return True
    if not isinstance(schema, dict):
        return False
    for key, value in schema.items():
        if key not in _META_PROPERTIES or key == "default":
            continue
        if key in _STRING_KEYWORDS:
            ok = isinstance(value, str)
        elif key in ("enum", "examples"):
            ok = isinstance(value, list)
        elif key == "type":
            ok = _type_ok(value)
        elif key == "required":
            ok = (isinstance(value, list) and all(isinstance(v, str) for v in value)
                  and len(set(value)) == len(value))
        elif key == "properties":
            ok = isinstance(value, dict) and all(_meta_ok(v) for v in value.values())
        elif key in ("additionalProperties", "items"):
            ok = _meta_ok(value)  # items as a list of schemas: left to jsonschema
        else:
            ok = False
        if not ok:
            return False
    return True


def _type_ok(value: Any) -> bool:
    if isinstance(value, str):
        return value in _SIMPLE_TYPES
    return (isinstance(value, list) and bool(value)
            and all(isinstance(v, str) and v in _SIMPLE_TYPES for v in value)
            and len(set(value)) == len(value))

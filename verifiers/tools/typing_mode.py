"""Language-typed argument strings (BFCL's Java and JavaScript categories) read as typed values.

BFCL's Java and JavaScript questions pass every argument as its source text: ``"true"`` for a
Java ``boolean``, ``"5L"`` for a ``long``, ``"1.5f"`` for a ``float``, ``"5n"`` for a JavaScript
``BigInt``, and collections as constructor code (``"new ArrayList<>(Arrays.asList(1, 2))"``).
BFCL's checker accepts those; a JSON Schema check would call each a wrong type. With a
reference's ``"language": "java"`` or ``"javascript"``, a string argument of a boolean, integer
or number parameter that is a literal of that type in the language is read as that value, for
the schema check and for matching alike (expected values included), and a string for an array
or object parameter is code the language evaluates, and a name (`EventRequest.SUSPEND_ALL`) for
a boolean or number parameter is a variable or constant: both pass the type check and are
matched as text. Anything else stays as it is, and the schema judges it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: Languages whose argument strings are typed literals.
TYPED_LANGUAGES = ("java", "javascript")
_INTEGER = re.compile(r"[+-]?\d{1,30}[lLn]?")
#: A variable or constant, plain or qualified (`EVENT_THREAD`, `ResultSet.TYPE_FORWARD_ONLY`).
_NAME = re.compile(r"[A-Za-z_$][\w$]{0,100}(?:\.[A-Za-z_$][\w$]{0,100}){0,20}")
_KEYWORDS = frozenset({"true", "false", "null", "undefined"})
_SCALARS = frozenset({"boolean", "integer", "number"})
_NUMBER = re.compile(r"[+-]?(?:\d{1,30}(?:\.\d{0,30})?|\.\d{1,30})(?:[eE][+-]?\d{1,4})?[fFdD]?")


def check_language(language: Any) -> str | None:
    """The reference's typing language (None: plain JSON values); ValueError when unknown."""
    if language in (None, "", "python", "json"):
        return None
    if language not in TYPED_LANGUAGES:
        raise ValueError(f'"language" must be one of python, {", ".join(TYPED_LANGUAGES)}; '
                         f"got {language!r}")
    return str(language)


def _types(prop_schema: Any) -> set[str]:
    kind = prop_schema.get("type") if isinstance(prop_schema, Mapping) else None
    return {kind} if isinstance(kind, str) else set(kind) if isinstance(kind, list) else set()


def typed_value(value: Any, prop_schema: Any) -> Any:
    """`value` read as a literal of its parameter's type, when it is a string that is one."""
    if not isinstance(value, str):
        return value
    kinds = _types(prop_schema)
    text = value.strip()
    if "boolean" in kinds and text in ("true", "false"):
        return text == "true"
    if "integer" in kinds and _INTEGER.fullmatch(text):
        return int(text.rstrip("lLn"))
    if "number" in kinds and _NUMBER.fullmatch(text):
        number = float(text.rstrip("fFdD"))
        return int(number) if number.is_integer() and "." not in text and "e" not in text.lower() else number
    return value


def placeholder(value: Any, prop_schema: Any) -> Any:
    """For the schema check only: collection code (a string for an array or object) passes,
    and so does a name (a variable or constant such as `EventRequest.SUSPEND_ALL`) for a
    boolean or number: its type is the compiler's to check, and it is matched as text."""
    kinds = _types(prop_schema)
    if isinstance(value, str) and "string" not in kinds:
        if "array" in kinds:
            return []
        if "object" in kinds:
            return {}
        if kinds & _SCALARS and _NAME.fullmatch(value) and value not in _KEYWORDS:
            return _stand_in(prop_schema, kinds)
    return value


def _stand_in(prop_schema: Mapping[str, Any], kinds: set[str]) -> Any:
    """A value of the parameter's type for a name to be checked as (its enum's first, if any)."""
    enum_values = prop_schema.get("enum")
    if isinstance(enum_values, list) and enum_values:
        return enum_values[0]
    if "boolean" in kinds:
        return False
    minimum = prop_schema.get("minimum")
    return minimum if isinstance(minimum, int) and not isinstance(minimum, bool) else 0


def typed_arguments(arguments: Mapping[str, Any], properties: Mapping[str, Any]) -> dict[str, Any]:
    """Every argument read with `typed_value` against its parameter's schema."""
    return {name: typed_value(value, properties.get(name)) for name, value in arguments.items()}


def checked_arguments(arguments: Mapping[str, Any], properties: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments as the schema check sees them (`placeholder` for collection code)."""
    return {name: placeholder(value, properties.get(name)) for name, value in arguments.items()}

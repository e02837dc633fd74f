"""The schema fast path against jsonschema itself, on generated schemas and values: a "valid"
from the fast path is always jsonschema's verdict too, and it answers for most valid values."""

from __future__ import annotations

import random
from typing import Any

import jsonschema
import pytest
from jsonschema import Draft7Validator, Draft202012Validator
from veristep.verifiers.tools.schema_shortcuts import compile_valid, draft7_schema_ok

_TYPES = ["string", "integer", "number", "boolean", "array", "object", "null"]
_SCALARS: list[Any] = ["", "a", "km", "Km", "1", 0, 1, -3, 2.0, 2.5, True, False, None, float("inf")]


def _schema(rng: random.Random, depth: int = 0) -> Any:
    """A schema mostly inside the modelled subset, sometimes outside it or malformed."""
    roll = rng.random()
    if roll < 0.04:
        return rng.choice([True, False])
    schema: dict[str, Any] = {}
    if rng.random() < 0.8:
        kinds = rng.sample(_TYPES, rng.choice([1, 1, 1, 2]))
        schema["type"] = kinds[0] if len(kinds) == 1 and rng.random() < 0.7 else kinds
    if rng.random() < 0.2:
        schema["enum"] = rng.sample(_SCALARS, rng.randint(0, 4))
    if rng.random() < 0.3:
        schema["description"] = rng.choice(["text", 3])  # 3: breaks the metaschema
    if rng.random() < 0.05:
        schema[rng.choice(["minimum", "pattern", "const", "maxLength", "minItems", "anyOf"])] = rng.choice(
            [1, "^a", "a", "#", 2, [{"type": "string"}]])
    if rng.random() < 0.08:  # malformed, as a tools list may be
        key, bad = rng.choice([("type", "dict"), ("type", ["string", "string"]), ("type", []),
                               ("type", 7), ("enum", "a"), ("required", "a"), ("required", [1]),
                               ("properties", []), ("items", 3), ("additionalProperties", "no"),
                               ("title", None), ("examples", {})])
        schema[key] = bad
    if depth < 3 and (schema.get("type") == "object" or rng.random() < 0.2):
        names = rng.sample(["a", "b", "c", "d"], rng.randint(0, 3))
        if "properties" in schema or "required" in schema:
            return schema  # keep the malformed value
        schema["properties"] = {n: _schema(rng, depth + 1) for n in names}
        if names and rng.random() < 0.6:
            schema["required"] = rng.sample(names, rng.randint(1, len(names)))
            if rng.random() < 0.05:
                schema["required"] = schema["required"] * 2  # duplicates break the metaschema
        if rng.random() < 0.5:
            schema["additionalProperties"] = rng.choice([False, True, {"type": "integer"}])
    if depth < 3 and (schema.get("type") == "array" or rng.random() < 0.1):
        schema["items"] = _schema(rng, depth + 1)
    return schema


def _value(rng: random.Random, schema: Any, depth: int = 0) -> Any:
    """A value that often fits `schema` and often breaks it in one place."""
    if rng.random() < 0.15 or not isinstance(schema, dict):
        return rng.choice(_SCALARS + [[1, "a"], {"a": 1}, {"zz": None}, []])
    if "enum" in schema and isinstance(schema["enum"], list) and schema["enum"] and rng.random() < 0.7:
        return rng.choice(schema["enum"])
    kinds = schema.get("type", rng.choice(_TYPES))
    kind = rng.choice(kinds) if isinstance(kinds, list) and kinds else kinds
    if kind == "object" and depth < 4:
        props = schema.get("properties", {}) if isinstance(schema.get("properties"), dict) else {}
        out = {n: _value(rng, s, depth + 1) for n, s in props.items() if rng.random() < 0.8}
        if rng.random() < 0.1:
            out["extra"] = rng.choice(_SCALARS)
        return out
    if kind == "array" and depth < 4:
        return [_value(rng, schema.get("items", {}), depth + 1) for _ in range(rng.randint(0, 3))]
    return {"string": "km", "integer": rng.choice([3, 4.0]), "number": 1.5, "boolean": True,
            "null": None}.get(kind, rng.choice(_SCALARS))


def test_a_fast_yes_is_always_jsonschemas_yes():
    rng = random.Random(7)
    answered = valid = 0
    for _ in range(1500):
        schema = _schema(rng)
        try:
            Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError:
            continue  # the verifier refuses such a schema before it checks a call
        check = compile_valid(schema)
        validator = Draft202012Validator(schema)
        for _ in range(8):
            value = _value(rng, schema)
            truth = validator.is_valid(value)
            valid += truth
            if check is not None and check(value):
                assert truth, (schema, value)
                answered += 1
    # the fast path must do its job: most valid values get their answer without jsonschema
    assert valid > 2000 and answered > 0.6 * valid


def test_a_fast_metaschema_pass_is_always_jsonschemas_pass():
    rng = random.Random(11)
    passed = 0
    for _ in range(3000):
        schema = _schema(rng)
        if not draft7_schema_ok(schema):
            continue
        Draft7Validator.check_schema(schema)  # raises if the fast path was wrong
        passed += 1
    assert passed > 1000


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({"type": "integer"}, 2.0),  # Draft 6 and later: an integer-valued float is an integer
        ({"type": "integer"}, True),  # bool is never a number
        ({"type": "number"}, False),
        ({"enum": [1, 2]}, 1.0),  # non-string enums: left to jsonschema's own equality
        ({"enum": ["a"]}, "a"),
        ({"properties": {"a": {"type": "string"}}, "additionalProperties": False}, {"a": "x", "b": 1}),
        ({"required": ["a"]}, "not an object"),
        ({"items": {"type": "string"}}, ["a", 1]),
        ({"type": "object", "format": "email"}, {}),
        (False, None),
    ],
)
def test_edge_cases_agree_with_jsonschema(schema, value):
    check = compile_valid(schema)
    truth = Draft202012Validator(schema).is_valid(value)
    assert check is None or not check(value) or truth

"""Plain data across the sandbox boundary: a tagged JSON form of Python's built-in values.

A function test's return value is encoded inside the sandbox and decoded on the host, where it
is compared with the expected value. Decoding builds only built-in types (None, bool, int,
float, complex, str, bytes, list, tuple, dict, set, frozenset), so the comparison runs no code
of the program's: an object whose ``__eq__`` always answers True cannot cross.

This file is also sent into the sandbox ahead of the supervisor (it must use the standard
library only and run on any Python >= 3.8).
"""

import json

PLAIN_MAX_DEPTH = 64
_TAGS = ("$tuple", "$dict", "$set", "$frozenset", "$bytes", "$complex", "$float", "$int")


class NotPlainData(TypeError):
    """A value that has no plain-data form (a class instance, a function, a cycle...)."""


def _to_plain(value, depth):
    if depth > PLAIN_MAX_DEPTH:
        raise NotPlainData(f"nested deeper than {PLAIN_MAX_DEPTH} levels")
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return value
    if kind is int:
        # JSON numbers lose nothing, but very long decimals hit int's str limit: use hex.
        return value if -(1 << 62) < value < (1 << 62) else {"$int": format(value, "x")}
    if kind is float:
        return value if value == value and value not in (float("inf"), float("-inf")) else {
            "$float": repr(value)}
    if kind is list:
        return [_to_plain(item, depth + 1) for item in value]
    if kind is tuple:
        return {"$tuple": [_to_plain(item, depth + 1) for item in value]}
    if kind is dict:
        return {"$dict": [[_to_plain(k, depth + 1), _to_plain(v, depth + 1)]
                          for k, v in value.items()]}
    if kind is set or kind is frozenset:
        tag = "$set" if kind is set else "$frozenset"
        return {tag: [_to_plain(item, depth + 1) for item in value]}
    if kind is bytes:
        return {"$bytes": value.hex()}
    if kind is complex:
        return {"$complex": [_to_plain(value.real, depth + 1), _to_plain(value.imag, depth + 1)]}
    return _to_plain(_builtin_form(value), depth)


def _builtin_form(value):
    """The built-in value a subclass instance or a numpy scalar/array stands for."""
    module = type(value).__module__ or ""
    if module.split(".")[0] == "numpy" and hasattr(value, "tolist"):
        return value.tolist()
    for base in (bool, int, float, complex, str, bytes, tuple, list, frozenset, set):
        if isinstance(value, base):
            return base(value)
    if isinstance(value, dict):
        return dict(value)
    raise NotPlainData(f"a value of type {type(value).__name__} is not plain data")


def encode_plain(value):
    """Return the tagged-JSON text of a built-in value; raises NotPlainData for anything else."""
    try:
        return json.dumps(_to_plain(value, 0), ensure_ascii=True, allow_nan=False,
                          separators=(",", ":"))
    except RecursionError:
        raise NotPlainData("nested too deeply") from None


def _from_plain(data, depth):
    if depth > PLAIN_MAX_DEPTH + 2:
        raise ValueError("nested too deeply")
    if isinstance(data, list):
        return [_from_plain(item, depth + 1) for item in data]
    if not isinstance(data, dict):
        return data  # None, bool, int, float, str from json itself
    if len(data) != 1 or next(iter(data)) not in _TAGS:
        raise ValueError("untagged object in plain data")
    tag, body = next(iter(data.items()))
    if tag == "$int":
        return int(body, 16)
    if tag == "$float":
        if body not in ("nan", "inf", "-inf"):
            raise ValueError("bad float tag")
        return float(body)
    if tag == "$bytes":
        return bytes.fromhex(body)
    if not isinstance(body, list):
        raise ValueError(f"bad {tag} body")
    items = [_from_plain(item, depth + 1) for item in body]
    if tag == "$tuple":
        return tuple(items)
    if tag == "$set":
        return set(_spread(items))
    if tag == "$frozenset":
        return frozenset(_spread(items))
    if tag == "$complex":
        if len(items) != 2:
            raise ValueError("bad complex")
        return complex(items[0], items[1])
    pairs = {}  # $dict
    for pair in items:
        if not isinstance(pair, list) or len(pair) != 2:
            raise ValueError("bad dict item")
    _spread([pair[0] for pair in items])
    for pair in items:
        pairs[pair[0]] = pair[1]
    return pairs


# An honest set or dict has a handful of equal hashes at most ({-1, -2}, {0, 2**61 - 1}); many
# keys of one hash make building it quadratic (integer hashes are not randomised).
PLAIN_MAX_SAME_HASH = 64
_HASH_MODULUS = (1 << 61) - 1  # ints below it hash to themselves: the tally never collides


def _spread(items):
    """`items`, after checking that no hash value is shared by too many of them."""
    tally = {}
    for item in items:
        key = hash(item) % _HASH_MODULUS
        count = tally.get(key, 0) + 1
        if count > PLAIN_MAX_SAME_HASH:
            raise ValueError(f"more than {PLAIN_MAX_SAME_HASH} keys with one hash value")
        tally[key] = count
    return items


def decode_plain(text):
    """Rebuild the built-in value from its tagged-JSON text; ValueError/TypeError when malformed."""
    try:
        return _from_plain(json.loads(text), 0)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except ArithmeticError as err:  # a forged complex with an integer part no float can hold
        raise ValueError(f"out of range ({err})") from None

"""The native body reader that keeps each row's text (veristep/serve/jsontext.py) against json.loads."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from veristep.common.jsonl_io import encode_with

from veristep.serve.jsontext import loads_with_row_text

_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8)
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=12)
_rows = st.lists(st.dictionaries(st.text(max_size=5), _values, max_size=4) | _values, max_size=5)


@settings(max_examples=300, deadline=None)
@given(rows=_rows, extra=st.dictionaries(st.text(max_size=5), _values, max_size=2),
       indent=st.sampled_from([None, 0, 2]), ascii_only=st.booleans())
def test_same_values_as_json_loads_and_each_rows_own_text(rows, extra, indent, ascii_only):
    text = json.dumps({**extra, "rows": rows}, indent=indent, ensure_ascii=ascii_only)
    body, texts = loads_with_row_text(text)
    assert body == json.loads(text)
    assert len(texts) == len(rows)
    for row, own in zip(rows, texts, strict=True):
        if isinstance(row, dict) and own is None:  # a string that holds "NaN": kept out, harmlessly
            assert "NaN" in json.dumps(row) or "Infinity" in json.dumps(row)
        elif isinstance(row, dict):
            assert json.loads(own) == row
            spliced = json.loads(encode_with(row, "veristep", {"reward": 1.0}, own))
            assert spliced == {**row, "veristep": {"reward": 1.0}}
        else:
            assert own is None  # not an object: nothing to splice into


@pytest.mark.parametrize("text", [
    "", "  ", "[1]", "{}", '{"rows": "x"}', '{"rows": [1,}', '{"rows": [{"a": 1}]} x', '{"rows": [{"a":1}],}',
    '{"rows"  [1]}', '{"rows": [{"a": 1}], "rows": 3}', "{'rows': []}", '{"rows": [1] "x": 2}',
])
def test_anything_else_is_left_to_json_loads(text):
    """Malformed, not an object, or `rows` not an array: None, and the caller's json.loads says why."""
    assert loads_with_row_text(text) is None


def test_non_strict_rows_keep_no_text_and_the_last_duplicate_key_wins():
    body, texts = loads_with_row_text('{"rows": 3, "rows": [{"a": NaN}, {"b": Infinity}, {"c": "NaN"}, {}]}')
    assert len(body["rows"]) == 4 and texts == [None, None, None, "{}"]  # a "NaN" string too: harmless

"""A native request's rows with the JSON text each was read from, so replies splice, not re-encode.

A native reply echoes every input row with a `veristep` result object added. Decoding a row and
encoding it again is most of the event loop's JSON work for a request (a tools row carries its
tool schemas: 8 of them are 12 KB, 0.12 ms to decode and 0.18 ms to encode again). `veristep
verify` already writes a line as its input text with the result spliced in before the closing
brace (`encode_with`, given a `Record.text`); this reader gives the server each row's text of a
JSON body `{"rows": [...]}` for the same: the body is decoded once, value by value with the
standard decoder, noting where each row's text starts and ends.
"""

from __future__ import annotations

import json
import re
from typing import Any

from veristep.common.jsonl_io import writable_text

_DECODER = json.JSONDecoder()
_WS = re.compile(r"[ \t\n\r]*")  # the whitespace JSON allows between tokens (as json.decoder's)


def loads_with_row_text(text: str, field: str = "rows") -> tuple[dict[str, Any], list[str | None]] | None:
    """A JSON object and, when its `field` is an array, each element's own text (None: not an object).

    None when the text is anything else (not an object, malformed, `field` not an array):
    the caller decodes it with `json.loads` for its one-line reason or its type error, so
    what a bad body gets is decided in one place. An element's text is kept only where it
    can be written back as it is (`writable_text`, as for a JSONL line): a JSON object.
    """
    try:
        return _scan(text, field)
    except (ValueError, IndexError, RecursionError):  # JSONDecodeError is a ValueError
        return None


def _scan(text: str, field: str) -> tuple[dict[str, Any], list[str | None]] | None:
    i = _WS.match(text, 0).end()
    if text[i] != "{":
        return None
    body: dict[str, Any] = {}
    spans: list[str | None] | None = None
    i = _WS.match(text, i + 1).end()
    if text[i] == "}":
        i += 1
    else:
        while True:
            if text[i] != '"':
                return None
            key, i = _DECODER.raw_decode(text, i)
            i = _WS.match(text, i).end()
            if text[i] != ":":
                return None
            i = _WS.match(text, i + 1).end()
            if key == field and text[i] == "[":
                value, spans, i = _array_with_text(text, i)
            else:
                value, i = _DECODER.raw_decode(text, i)
                if key == field:
                    spans = None  # a later duplicate key wins, as in json.loads
            body[key] = value
            i = _WS.match(text, i).end()
            if text[i] == "}":
                i += 1
                break
            if text[i] != ",":
                return None
            i = _WS.match(text, i + 1).end()
    if _WS.match(text, i).end() != len(text) or spans is None:
        return None
    return body, spans


def _array_with_text(text: str, i: int) -> tuple[list[Any], list[str | None], int]:
    """The array starting at `text[i] == "["`, each element's text, and the index after it."""
    values: list[Any] = []
    spans: list[str | None] = []
    i = _WS.match(text, i + 1).end()
    if text[i] == "]":
        return values, spans, i + 1
    while True:
        start = i
        value, i = _DECODER.raw_decode(text, i)
        values.append(value)
        spans.append(writable_text(text[start:i]) if isinstance(value, dict) else None)
        i = _WS.match(text, i).end()
        if text[i] == "]":
            return values, spans, i + 1
        if text[i] != ",":
            raise ValueError("expected ',' or ']'")
        i = _WS.match(text, i + 1).end()


def plain_reason(err: ValueError) -> str:
    """`json.loads`'s plain ValueError (an over-long integer) as one line for a client."""
    # its advice (sys.set_int_max_str_digits) is for the server's code, not for the client
    return str(err).partition(";")[0]

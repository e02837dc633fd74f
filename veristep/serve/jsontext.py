"""A native request's rows with the JSON text each was read from, so replies splice, not re-encode.

A native reply echoes every input row with a `veristep` result object added. Decoding a row and
encoding it again is most of the event loop's JSON work for a request (a tools row carries its
tool schemas: 8 of them are 12 KB, 0.12 ms to decode and 0.18 ms to encode again). `veristep
verify` already writes a line as its input text with the result spliced in before the closing
brace (`encode_with`, given a `Record.text`); this reader gives the server each row's text of a
JSON body `{"rows": [...]}` for the same: the body is decoded once, value by value with the
standard decoder, noting where each row's text starts and ends.

Both readers here also count before they build: a body may hold more rows than the server's
queue, and building a million row objects (or a million line objects for NDJSON) before the
413 held the event loop for seconds and took a gigabyte. They stop at the first element past
the limit (`TooMany`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from veristep.common.jsonl_io import writable_text

_DECODER = json.JSONDecoder()
_WS = re.compile(r"[ \t\n\r]*")  # the whitespace JSON allows between tokens (as json.decoder's)
#: A character `str.strip()` keeps: `\S` of a str pattern is exactly `not str.isspace()`, the
#: rule `veristep verify` skips a blank line by (jsonl_io._blank; tests/serve/test_jsontext.py).
_NOT_SPACE = re.compile(r"\S")


class TooMany(Exception):
    """An array (or NDJSON body) with more elements than the caller's limit; counting stopped there."""

    def __init__(self, key: str | None, limit: int) -> None:
        super().__init__(f"{key or 'the body'}: more than {limit} elements")
        self.key = key
        self.limit = limit


def loads_with_row_text(text: str, field: str = "rows", max_elements: int | None = None,
                        ) -> tuple[dict[str, Any], list[str | None]] | None:
    """A JSON object and, when its `field` is an array, each element's own text (None: not an object).

    None when the text is anything else (not an object, malformed, `field` not an array):
    the caller decodes it with `json.loads` for its one-line reason or its type error, so
    what a bad body gets is decided in one place. An element's text is kept only where it
    can be written back as it is (`writable_text`, as for a JSONL line): a JSON object.
    `TooMany` as soon as the body itself, or the value of one of its keys, is an array of
    more than `max_elements` elements.
    """
    try:
        return _scan(text, field, max_elements)
    except (ValueError, IndexError, RecursionError):  # JSONDecodeError is a ValueError
        return None


def ndjson_lines(text: str, max_lines: int | None = None) -> list[tuple[int, str]]:
    """(line number, line) of each line of an NDJSON body that `veristep verify` would read.

    Lines are split on "\\n" only and numbered from 1, blank ones counted but left out, where
    blank means `str.strip()` leaves nothing, as for the CLI (a body that is not UTF-8 comes
    decoded with "surrogateescape": a bad byte is never blank, and encodes back as it was).
    Blank runs are skipped at the regular-expression engine's speed, never line by line;
    `TooMany` past `max_lines` lines.
    """
    out: list[tuple[int, str]] = []
    pos, line_no, counted_to = 0, 1, 0
    while True:
        found = _NOT_SPACE.search(text, pos)
        if found is None:
            return out
        start = text.rfind("\n", 0, found.start()) + 1
        end = text.find("\n", found.start())
        end = len(text) if end < 0 else end
        line_no += text.count("\n", counted_to, start)
        counted_to = start
        if max_lines is not None and len(out) >= max_lines:
            raise TooMany(None, max_lines)
        out.append((line_no, text[start:end]))
        pos = end + 1


def _scan(text: str, field: str, cap: int | None) -> tuple[dict[str, Any], list[str | None]] | None:
    i = _WS.match(text, 0).end()
    if text[i] == "[":
        _array_with_text(text, i, None, cap)  # only to stop a huge array early; not an object
        return None
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
            if text[i] == "[":
                value, texts, i = _array_with_text(text, i, key, cap, keep_text=key == field)
                if key == field:
                    spans = texts
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


def _array_with_text(text: str, i: int, key: str | None, cap: int | None, keep_text: bool = True,
                     ) -> tuple[list[Any], list[str | None], int]:
    """The array starting at `text[i] == "["`, each element's text, and the index after it.

    `TooMany(key, cap)` on the element past `cap`, before decoding it.
    """
    values: list[Any] = []
    spans: list[str | None] = []
    i = _WS.match(text, i + 1).end()
    if text[i] == "]":
        return values, spans, i + 1
    while True:
        if cap is not None and len(values) >= cap:
            raise TooMany(key, cap)
        start = i
        value, i = _DECODER.raw_decode(text, i)
        values.append(value)
        spans.append(writable_text(text[start:i]) if keep_text and isinstance(value, dict) else None)
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

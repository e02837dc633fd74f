"""Streaming JSONL input and output for the command-line runners, with one-line errors."""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

STDIO = "-"


class InputError(ValueError):
    """Unreadable input: its message is one line naming the file, the line and the reason."""

    def __init__(self, path: str | Path, line_no: int | None, reason: str) -> None:
        self.path = "<stdin>" if str(path) == STDIO else str(path)
        self.line_no = line_no
        self.reason = reason
        where = f"{self.path}:{line_no}" if line_no is not None else self.path
        super().__init__(f"{where}: {reason}")


class OutputError(OSError):
    """The output could not be written (disk full, closed pipe): a one-line message."""


@dataclass
class Record:
    """One JSON object read from a JSONL file, with the 1-based line it came from."""

    line_no: int
    data: dict[str, Any]


def iter_jsonl(path: str | Path, limit: int | None = None) -> Iterator[Record]:
    """Yield the JSON objects of a JSONL file one by one; raise InputError on the first bad line."""
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    try:
        # Bytes, decoded line by line, so a bad byte is reported on its own line, not a
        # buffer earlier.
        handle = sys.stdin.buffer if str(path) == STDIO else open(path, "rb")
    except OSError as err:
        raise InputError(path, None, f"cannot open: {err.strerror or err}") from None
    count = 0
    try:
        for line_no, raw in enumerate(handle, start=1):
            if limit is not None and count >= limit:
                return
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise InputError(path, line_no, f"not UTF-8 text ({err.reason})") from None
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as err:
                raise InputError(
                    path, line_no, f"bad JSON ({err.msg} at column {err.colno})"
                ) from None
            if not isinstance(data, dict):
                raise InputError(
                    path, line_no, f"expected a JSON object, got {type(data).__name__}"
                )
            count += 1
            yield Record(line_no, data)
    finally:
        if handle is not sys.stdin.buffer:
            handle.close()


def require(record: Record, key: str, path: str | Path) -> Any:
    """Return `record.data[key]` or raise InputError naming the missing key and the line."""
    try:
        return record.data[key]
    except KeyError:
        keys = ", ".join(sorted(record.data)) or "none"
        raise InputError(path, record.line_no, f"missing key {key!r} (keys: {keys})") from None


def _json_safe(value: Any) -> Any:
    # JSON has no NaN/Infinity; write null so every output line parses with strict readers.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def dumps_line(data: dict[str, Any]) -> str:
    """Serialise one output record to a single JSON line (non-JSON values become strings)."""
    return json.dumps(_json_safe(data), ensure_ascii=False, allow_nan=False, default=str)


class JsonlWriter:
    """Append JSON lines to a file (or stdout for "-"), flushing after every batch."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != STDIO:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._handle: IO[str] = (
            sys.stdout if self.path == STDIO else open(self.path, "w", encoding="utf-8")
        )
        self.written = 0

    def write_many(self, rows: list[dict[str, Any]]) -> None:
        """Write rows, one JSON object per line, and flush so a later crash loses none of them."""
        try:
            if rows:
                self._handle.write("".join(dumps_line(row) + "\n" for row in rows))
                self.written += len(rows)
            self._handle.flush()
        except BrokenPipeError:
            self._silence_stdout()
            raise OutputError(f"{self._name}: reader closed the pipe") from None
        except OSError as err:
            raise OutputError(f"cannot write {self._name}: {err.strerror or err}") from None

    @property
    def _name(self) -> str:
        return "<stdout>" if self.path == STDIO else self.path

    def _silence_stdout(self) -> None:
        # `veristep verify ... | head`: point stdout at /dev/null so the interpreter's final
        # flush does not print a second BrokenPipeError traceback.
        if self._handle is sys.stdout:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)

    def close(self) -> None:
        """Flush and close the file (stdout is flushed, not closed); never raises."""
        try:
            self._handle.flush()
            if self._handle is not sys.stdout:
                self._handle.close()
        except BrokenPipeError:
            self._silence_stdout()
        except OSError:  # already reported by write_many, or nothing left to lose
            pass

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

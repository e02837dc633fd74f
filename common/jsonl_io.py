"""JSONL input and output for every `veristep` command: one error contract.

Shared by every part and edge, so it lives below them all (it imports no part).

- A line that cannot be read (not UTF-8, bad JSON, not an object) is a `Record` with `error`
  set, so the command gives that line an error record or one `FILE:LINE: what` message and goes
  on with the next line; nothing read before or after it is lost.
- Paths are checked before any work starts (`check_input`, `check_output`): a mistake there is
  a `UsageError` (exit code 2), never a failure after an hour of verification.
- Every row is written (`JsonlWriter`): text that UTF-8 cannot carry (a lone surrogate read from
  a JSON escape) is written back as that escape, and each batch is flushed.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

STDIO = "-"

#: Exit codes shared by every command: done, some data could not be processed, bad usage.
EXIT_OK, EXIT_DATA, EXIT_USAGE = 0, 1, 2


class UsageError(ValueError):
    """A mistake in the command line found before any work starts (exit code 2)."""


class InputError(ValueError):
    """Unreadable input: its message is one line naming the file, the line and the reason."""

    def __init__(self, path: str | Path, line_no: int | None, reason: str) -> None:
        self.path = display_name(path)
        self.line_no = line_no
        self.reason = reason
        where = f"{self.path}:{line_no}" if line_no is not None else self.path
        super().__init__(f"{where}: {reason}")


class OutputError(OSError):
    """The output could not be written (disk full, closed pipe): a one-line message."""


def run_command(prog: str, run: Callable[[], int | None]) -> int:
    """Run a command's work; its UsageError is exit 2 and its InputError / OutputError exit 1,
    each one line `PROG: error: ...` on stderr instead of a traceback."""
    try:
        return int(run() or 0)
    except UsageError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except (InputError, OutputError) as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return EXIT_DATA


@dataclass
class Record:
    """One line of a JSONL file: the object it holds, or why it holds none."""

    line_no: int
    data: dict[str, Any] = field(default_factory=dict)
    #: Why the line is not a JSON object (then `data` is empty); None for a good line.
    error: str | None = None
    #: The line's text when it can be written back as it is: strict JSON (no NaN/Infinity)
    #: that `data` was read from; None otherwise.
    text: str | None = None


def display_name(path: str | Path) -> str:
    """How messages name a path ("<stdin>" for "-")."""
    return "<stdin>" if str(path) == STDIO else str(path)


def check_input(path: str | Path) -> None:
    """Raise UsageError unless `path` is "-" (stdin) or a readable file."""
    if str(path) == STDIO:
        return
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{path}: no such file")
    if p.is_dir():
        raise UsageError(f"{path}: is a folder, not a JSONL file")
    if not os.access(p, os.R_OK):
        raise UsageError(f"{path}: not readable (permission denied)")


def check_output(
    path: str | Path | None, flag: str = "--output", inputs: Iterable[str | Path] = ()
) -> None:
    """Raise UsageError unless `path` can be written: not a folder, not an input, writable."""
    if path is None or str(path) == STDIO:
        return
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{flag} {path}: is a folder; give a file name")
    for source in inputs:
        if str(source) != STDIO and Path(source).exists() and p.exists() and p.samefile(source):
            raise UsageError(f"{flag} {path}: is an input file; it would be overwritten while read")
    parent = p.parent
    while not parent.exists() and parent != parent.parent:  # created on write
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"{flag} {path}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise UsageError(f"{flag} {path}: not writable (permission denied)")


def iter_jsonl(path: str | Path, limit: int | None = None) -> Iterator[Record]:
    """Yield every non-blank line of a JSONL file (at most `limit`), bad lines as errors.

    Only a file that cannot be opened raises (InputError); check_input catches that earlier.
    """
    for line_no, raw in iter_lines(path, limit):
        yield parse_record(line_no, raw)


def iter_lines(path: str | Path, limit: int | None = None) -> Iterator[tuple[int, bytes]]:
    """(line number, raw bytes) of every line `iter_jsonl` reads, not yet parsed."""
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
            if _blank(raw):
                continue
            count += 1
            yield line_no, raw
    finally:
        if handle is not sys.stdin.buffer:
            handle.close()


def _blank(raw: bytes) -> bool:
    if raw.isascii():
        # str.strip() also strips the ASCII separators \x1c-\x1f; bytes.strip() does not
        return not raw.decode("ascii").strip()
    try:
        return not raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        return False  # reported as a bad line


def parse_record(line_no: int, raw: bytes) -> Record:
    """One non-blank input line as a Record: its JSON object, or why it is not one."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        return Record(line_no, error=f"not UTF-8 text ({err.reason})")
    line = line.rstrip("\r\n")
    try:
        data = json.loads(line)
    except json.JSONDecodeError as err:
        return Record(line_no, error=f"bad JSON ({err.msg} at column {err.colno})")
    except RecursionError:
        return Record(line_no, error="bad JSON (nested too deeply)")
    except ValueError as err:  # an integer of more than 4,300 digits; its advice is for coders
        return Record(line_no, error=f"bad JSON ({str(err).partition(';')[0][:120]})")
    if not isinstance(data, dict):
        return Record(line_no, error=f"expected a JSON object, got {type(data).__name__}")
    return Record(line_no, data, text=writable_text(line))


def writable_text(text: str) -> str | None:
    """The JSON text an object was read from, if it can be written back as it is; else None."""
    # json.loads reads NaN and Infinity, which strict JSON readers refuse: such an object is
    # written back re-encoded (as null); the test is on the text, so a string holding "NaN"
    # takes that slower path too, harmlessly
    return text if "NaN" not in text and "Infinity" not in text else None


def missing_key(record: Record, key: str) -> str:
    """The message for a line without `key`: which key, and which keys the line has."""
    keys = ", ".join(sorted(map(str, record.data))) or "none"
    return f"missing key {key!r} (keys: {keys})"


class LineMessages:
    """One-line messages about input lines (`PROG: warning: FILE:LINE: what`) on stderr.

    The first `shown` are printed as they happen, the rest only counted, so a broken file
    cannot flood the terminal; `finish()` says how many were not shown.
    """

    def __init__(
        self, prog: str, shown: int = 10, stream: IO[str] | None = None, quiet: bool = False
    ) -> None:
        self.prog = prog
        self.shown = shown
        self.stream = stream
        self.quiet = quiet  # count only (e.g. on every rank but one)
        self.count = 0

    def add(self, path: str | Path, line_no: int | None, what: str) -> None:
        """Report one bad line (printed while fewer than `shown` have been)."""
        self.count += 1
        if self.count <= self.shown:
            where = display_name(path) + (f":{line_no}" if line_no is not None else "")
            self.say(f"warning: {where}: {what}")

    def say(self, message: str) -> None:
        """Print one line prefixed with the program name."""
        if self.quiet:
            return
        print(f"{self.prog}: {message}", file=self.stream or sys.stderr)

    def finish(self) -> None:
        """Say how many messages were counted but not printed."""
        hidden = self.count - self.shown
        if hidden > 0:
            self.say(f"warning: {hidden} more bad line{'s' if hidden > 1 else ''} not shown")


def _json_safe(value: Any) -> Any:
    # JSON has no NaN/Infinity; write null so every output line parses with strict readers.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


#: What a field nested too deeply to write holds in the output instead.
UNWRITABLE = "(not written: nested too deeply)"


def dumps_line(data: dict[str, Any], ascii: bool = False) -> str:
    """Serialise one output record to a single JSON line (non-JSON values become strings)."""
    options: dict[str, Any] = {"ensure_ascii": ascii, "allow_nan": False, "default": str}
    try:  # the common case, plain JSON data: no copy
        return json.dumps(data, **options)
    except (ValueError, TypeError, RecursionError):  # NaN or Infinity, a key JSON cannot hold
        pass
    try:
        return json.dumps(_json_safe(data), **options)
    except RecursionError:
        # NaN inside nesting near the interpreter's limit: that field is lost, not the run
        if not isinstance(data, dict):
            return json.dumps(UNWRITABLE)
        fields = []
        for key, value in data.items():
            try:
                text = json.dumps(_json_safe(value), **options)
            except RecursionError:
                text = json.dumps(UNWRITABLE)
            fields.append(f"{json.dumps(str(key), ensure_ascii=ascii)}: {text}")
        return "{" + ", ".join(fields) + "}"


def encode_line(data: dict[str, Any]) -> bytes:
    """One output record as UTF-8 bytes ending in a newline; never fails on odd text.

    A lone surrogate (legal in a JSON `\\ud800` escape, illegal in UTF-8) is written back as
    the escape it was read from, so that row survives byte for byte and the others are kept.
    """
    text = dumps_line(data)
    try:
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:
        return (dumps_line(data, ascii=True) + "\n").encode("ascii")


def encode_with(data: dict[str, Any], key: str, value: Any, text: str | None = None) -> bytes:
    """`encode_line` of `data` with `key` set to `value`, last (an earlier `key` is dropped).

    With `text`, the JSON text `data` was read from, the line is that text as it is (its
    spacing and escapes) with the new key spliced in before the closing brace: the same
    object, without decoding and re-encoding the whole input.
    """
    if text is not None and key not in data:
        body = text.strip(" \t\r\n")  # the whitespace JSON allows around a value
        if body.endswith("}"):
            field_text = f"{json.dumps(key)}: {dumps_line(value)}}}\n"
            try:
                return f"{body[:-1]}{', ' if data else ''}{field_text}".encode()
            except UnicodeEncodeError:
                pass  # a lone surrogate in `value`: encode_line writes it as an escape
    rest = data if key not in data else {k: v for k, v in data.items() if k != key}
    return encode_line({**rest, key: value})


class JsonlWriter:
    """Write JSON lines to a file (or stdout for "-"), flushing after every batch.

    The file is opened (and so created) at construction, before any work is done.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path == STDIO:
            sys.stdout.flush()
            self._handle: IO[bytes] = getattr(sys.stdout, "buffer", None) or _TextSink(sys.stdout)
        else:
            try:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
                self._handle = open(self.path, "wb")
            except OSError as err:
                raise OutputError(f"cannot write {self.path}: {err.strerror or err}") from None
        self.written = 0

    def write_many(self, rows: list[dict[str, Any]]) -> None:
        """Write rows, one JSON object per line, and flush so a later crash loses none of them."""
        self.write_lines([encode_line(row) for row in rows])

    def write_lines(self, lines: list[bytes]) -> None:
        """Write encoded lines (each ending in a newline) and flush."""
        try:
            if lines:
                self._handle.write(b"".join(lines))
                self.written += len(lines)
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
        if self.path == STDIO:
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
                os.close(devnull)
            except (OSError, ValueError):  # no real file descriptor (captured in tests)
                pass

    def close(self) -> None:
        """Flush and close the file (stdout is flushed, not closed); never raises."""
        try:
            self._handle.flush()
            if self.path != STDIO:
                self._handle.close()
        except BrokenPipeError:
            self._silence_stdout()
        except OSError:  # already reported by write_many, or nothing left to lose
            pass

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _TextSink:
    """A bytes-accepting front for a text stream without `.buffer` (an in-memory stdout)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, data: bytes) -> int:
        return self.stream.write(data.decode("utf-8"))

    def flush(self) -> None:
        self.stream.flush()

    def close(self) -> None:
        """Never close the wrapped stream."""


def is_terminal(stream: Any) -> bool:
    """Whether `stream` is an interactive terminal (progress bars are drawn only there)."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(callable(isatty) and isatty())
    except ValueError:  # a closed stream
        return False


def progress_bar(
    total: int | None, *, enabled: bool = True, unit: str = "item", desc: str | None = None
) -> Any:
    """A tqdm bar on stderr when enabled and stderr is a terminal; None otherwise.

    Logs and pipes get no bar (and the commands' one-line summaries instead).
    """
    if not enabled or not is_terminal(sys.stderr):
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit=unit, desc=desc, file=sys.stderr, dynamic_ncols=True)


def require_module(module: str, extra: str, what: str) -> None:
    """Raise UsageError naming the install command when an optional extra is missing.

    Called before any work, so a run never fails at the end for want of a plotting library.
    """
    import importlib

    try:
        importlib.import_module(module)
    except ImportError:
        raise UsageError(f"{what} needs {module}: pip install 'veristep[{extra}]'") from None

"""Code-execution verifier: run a completion's program against tests inside a sandbox.

Extract (last fenced block of the language; prose is `no_code`) -> run (a fresh container per
completion, one fresh process per test, see verifiers/code/sandbox.py) -> compare (stdout line by
line, whitespace-tolerant, optional float tolerance; function tests by value, outside the
program's process). Expected outputs never enter the sandbox. References: see
verifiers/code/reference.py for the accepted formats.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from typing import Any

from ..core import pyast
from ..core.result import Status, VerifyResult
from ..core.workers import default_pool_size
from .plain_data import decode_plain
from .reference import (
    BadReference,
    CallTest,
    Check,
    CodeReference,
    IOTest,
    StatementTest,
    parse_reference,
)
from .reference import reference_from_record as _reference_from_record
from .sandbox import Isolation, Limits, Sandbox, SandboxError, SandboxSession, StepResult

#: Exit status of a Python step whose source does not compile (mirrors the supervisor's).
COMPILE_ERROR_EXIT = 102

_MEMORY_MARKERS = re.compile(
    r"^MemoryError\b|std::bad_alloc|Cannot allocate memory|out of memory", re.MULTILINE
)
_FILE_TOO_LARGE = re.compile(r"File too large|\[Errno 27\]")
# Host-side patterns on untrusted text are unambiguous (no two ways to split a run), so they
# are linear: `\d+\.?\d*` alone was quadratic on a long run of digits that is no number.
# ASCII digits only: `float` also reads other scripts' digits ("３" as 3).
_INTEGER = re.compile(r"[+-]?[0-9]+\Z")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
#: Tokens longer than this are compared as text only, never as numbers.
NUMBER_MAX_CHARS = 1000
_FENCE_OPEN = re.compile(r"^[ \t]{0,3}+(`{3,}+|~{3,}+)[ \t]*+([^\s`]*+)[^`]*+$")
_BLANKS = re.compile(r"[ \t]+")
_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*+[,.;:!?]?")
_WORD_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'’-"
_CODE_CHARS = re.compile(r"[=(){}\[\];#<>]")
#: Longer unfenced text is not parsed as Python to tell code from prose.
PARSE_MAX_CHARS = 50_000
#: A program's source (UTF-8) over this many bytes is a compile_error, never sent to the sandbox:
#: its folders are 64 MiB tmpfs, and one that did not fit there was a sandbox_error.
CODE_MAX_BYTES = 16 << 20


@dataclass(frozen=True)
class Language:
    """One row of the language table: how to compile and run a program.

    `"{python}"` in a command stands for the sandbox's interpreter. `fork_python` runs the
    source in a forked child of the in-sandbox interpreter instead of starting a new one.
    """

    name: str
    source_name: str
    fence_tags: tuple[str, ...]
    run: tuple[str, ...]
    compile: tuple[str, ...] | None = None
    artifacts: tuple[str, ...] = ()
    fork_python: bool = False


LANGUAGES: dict[str, Language] = {
    "python": Language(
        name="python",
        source_name="main.py",
        fence_tags=("python", "py", "python3"),
        run=("{python}", "-I", "main.py"),
        fork_python=True,
    ),
    "cpp": Language(
        name="cpp",
        source_name="main.cpp",
        fence_tags=("cpp", "c++", "cxx", "cc"),
        compile=("g++", "-std=c++17", "-O2", "-pipe", "-o", "main", "main.cpp"),
        artifacts=("main",),
        run=("./main",),
    ),
}


@dataclass
class TestOutcome:
    """How one test went."""

    index: int
    status: Status
    time_s: float
    exit_code: int | None = None
    stderr: str = ""
    detail: str = ""
    fakeable: bool = False
    peak_memory_mb: float | None = None

    def to_record(self) -> dict[str, Any]:
        """Return the JSON form stored in `VerifyResult.extra["tests"]`."""
        record = {
            "index": self.index,
            "status": self.status.value,
            "time_s": round(self.time_s, 4),
            "exit_code": self.exit_code,
            "stderr": self.stderr,
            "detail": self.detail,
        }
        if self.fakeable:
            record["fakeable"] = True
        if self.peak_memory_mb is not None:
            record["peak_memory_mb"] = round(self.peak_memory_mb, 1)
        return record


@dataclass
class _Run:
    outcomes: list[TestOutcome] = field(default_factory=list)
    compile_failure: str | None = None
    timings: dict[str, float] = field(default_factory=dict)


class CodeVerifier:
    """Reward a completion by running its program against tests in an isolated sandbox."""

    kind = "code"

    def __init__(
        self,
        workers: int | None = None,
        timeout: float = 2.0,
        memory_mb: int = 512,
        all_or_nothing: bool = False,
        allow_unsandboxed: bool = False,
        *,
        isolation: Isolation | str | None = None,
        cpu_timeout: float | None = None,
        compile_timeout: float = 30.0,
        compile_memory_mb: int = 2048,
        max_processes: int = 64,
        max_file_mb: int = 16,
        output_limit_bytes: int = 8 << 20,
        float_tolerance: float | None = None,
        stop_on_first_failure: bool = True,
        stderr_chars: int = 1000,
        python: str | os.PathLike[str] | None = None,
        pid_namespace_per_test: bool = False,
    ) -> None:
        if workers is not None and workers < 1:
            raise ValueError(f"workers must be >= 1 or None, got {workers!r}")
        if float_tolerance is not None and float_tolerance < 0:
            raise ValueError(f"float_tolerance must be >= 0 or None, got {float_tolerance!r}")
        if stderr_chars < 0:
            raise ValueError(f"stderr_chars must be >= 0, got {stderr_chars!r}")
        self.workers = workers or default_pool_size()
        self.all_or_nothing = all_or_nothing
        self.float_tolerance = float_tolerance
        # After a failure the reward cannot reach 1: by default the rest is not run.
        self.stop_on_first_failure = stop_on_first_failure
        self.stderr_chars = stderr_chars
        self.test_limits = Limits(
            wall_s=timeout,
            cpu_s=cpu_timeout,
            memory_mb=memory_mb,
            processes=max_processes,
            file_mb=max_file_mb,
            output_bytes=output_limit_bytes,
        )
        self.compile_limits = Limits(
            wall_s=compile_timeout,
            memory_mb=max(compile_memory_mb, memory_mb),
            processes=max(max_processes, 64),
            file_mb=max(max_file_mb, 256),
            output_bytes=output_limit_bytes,
        )
        self.sandbox = Sandbox(isolation, allow_unsandboxed=allow_unsandboxed, python=python,
                               test_pid_namespace=pid_namespace_per_test)
        # One sandbox per batch thread; the threads live as long as the verifier so that
        # their sandboxes do too.
        self._executor: ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()

    def close(self) -> None:
        """Stop the batch threads and every sandbox; the verifier stays usable."""
        with self._executor_lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        self.sandbox.close()

    def __enter__(self) -> CodeVerifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def isolation(self) -> Isolation:
        """The isolation level every run of this verifier gets."""
        return self.sandbox.isolation

    # ---- protocol --------------------------------------------------------------------------
    def reference_from_record(self, record: dict[str, Any]) -> Any:
        """The code reference of a JSONL line in any supported format (KeyError if none)."""
        return _reference_from_record(record)

    def verify(self, completion: str, reference: Any) -> VerifyResult:
        """Run the completion's program against the reference's tests; never raises on
        output, and an unusable reference gives `bad_reference` (unjudged)."""
        parsed = self._parse(reference)
        if isinstance(parsed, VerifyResult):
            return parsed
        return self._verify_parsed(completion, parsed)

    def verify_batch(
        self, completions: Sequence[str], references: Sequence[Any]
    ) -> list[VerifyResult]:
        """Verify many completions, `workers` at a time, in input order; a row with an
        unusable reference gets `bad_reference` and every other row is verified."""
        parsed, futures = self._start(completions, references)
        return [ref if f is None else f.result() for f, ref in zip(futures, parsed, strict=True)]

    def verify_batch_as_ready(
        self, completions: Sequence[str], references: Sequence[Any]
    ) -> Iterator[list[tuple[int, VerifyResult]]]:
        """`verify_batch`'s verdicts as they are decided: lists of (input position, result).

        Every position comes once, as soon as its completion's steps are done, so no item waits
        for a slower one of the same batch. Closing the iterator early cancels what has not started.
        """
        parsed, futures = self._start(completions, references)
        unusable = [(pos, ref) for pos, ref in enumerate(parsed) if isinstance(ref, VerifyResult)]
        if unusable:
            yield unusable
        position = {f: pos for pos, f in enumerate(futures) if f is not None}
        running = set(position)
        try:
            while running:
                done, running = wait_futures(running, return_when=FIRST_COMPLETED)
                yield [(position[f], f.result()) for f in done]
        finally:
            for f in running:
                f.cancel()

    def _start(
        self, completions: Sequence[str], references: Sequence[Any]
    ) -> tuple[list[CodeReference | VerifyResult], list[Future[VerifyResult] | None]]:
        """Parse every reference and queue each usable row on the sandbox threads."""
        if len(completions) != len(references):
            raise ValueError(
                f"got {len(completions)} completions but {len(references)} references"
            )
        parsed = [self._parse(ref) for ref in references]
        if not completions:
            return parsed, []
        with self._executor_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="veristep-code")
            executor = self._executor
        futures = [
            None if isinstance(ref, VerifyResult) else executor.submit(self._verify_parsed, c, ref)
            for c, ref in zip(completions, parsed, strict=True)
        ]
        return parsed, futures

    def _parse(self, reference: Any) -> CodeReference | VerifyResult:
        try:
            return parse_reference(reference, tuple(LANGUAGES))
        except BadReference as err:
            return VerifyResult(0.0, False, Status.BAD_REFERENCE, str(err)[:500],
                                extra={"isolation": self.sandbox.description})
        except Exception as err:  # a parser bug must not sink the rest of a batch
            return VerifyResult(0.0, False, Status.INTERNAL_ERROR, repr(err)[:500],
                                extra={"isolation": self.sandbox.description})

    # ---- one completion ----------------------------------------------------------------------
    def _verify_parsed(self, completion: str, reference: CodeReference) -> VerifyResult:
        started = time.perf_counter()
        language = LANGUAGES[reference.language]
        code = extract_code(completion, language)
        extra: dict[str, Any] = {
            "passed": 0,
            "total": reference.total,
            "isolation": self.sandbox.description,
            "language": language.name,
            "tests": [],
        }
        if reference.fakeable:
            extra["fakeable"] = True
        if code is None:
            return VerifyResult(0.0, False, Status.NO_CODE, "no code found", None,
                                {"total_s": time.perf_counter() - started}, extra)
        too_large = _code_too_large(code)
        if too_large is not None:
            return VerifyResult(0.0, False, Status.COMPILE_ERROR, too_large, None,
                                {"total_s": time.perf_counter() - started}, extra, judged=True)
        try:
            run = self._run_tests(code, reference, language)
        except SandboxError as err:
            return VerifyResult(0.0, False, Status.SANDBOX_ERROR, str(err)[:500], code,
                                {"total_s": time.perf_counter() - started}, extra)
        except Exception as err:  # a bug here must not sink the rest of a batch
            return VerifyResult(0.0, False, Status.INTERNAL_ERROR, repr(err)[:500], code,
                                {"total_s": time.perf_counter() - started}, extra)
        run.timings["total_s"] = time.perf_counter() - started
        if run.compile_failure is not None:
            return VerifyResult(0.0, False, Status.COMPILE_ERROR, run.compile_failure, code,
                                run.timings, extra, judged=True)
        passed = sum(o.status is Status.CORRECT for o in run.outcomes)
        total = reference.total
        extra["passed"] = passed
        extra["tests"] = [o.to_record() for o in run.outcomes]
        first_failure = next((o for o in run.outcomes if o.status is not Status.CORRECT), None)
        status = Status.CORRECT if first_failure is None else first_failure.status
        correct = passed == total and total > 0
        if self.all_or_nothing:
            reward = 1.0 if correct else 0.0
        else:
            reward = passed / total if total else 0.0
        detail = f"{passed}/{total} tests passed"
        if first_failure is not None:
            detail += f"; test {first_failure.index}: {first_failure.status.value}"
            if first_failure.detail:
                detail += f" ({first_failure.detail})"
        # Every test ran to a verdict, a time-out included: the program was too slow, not the checker.
        return VerifyResult(reward, correct, status, detail, code, run.timings, extra, judged=True)

    def _run_tests(self, code: str, reference: CodeReference, language: Language) -> _Run:
        run = _Run()
        t0 = time.perf_counter()
        with self.sandbox.session() as session:
            run.timings["sandbox_start_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            files: dict[str, str] = {language.source_name: code}
            if language.compile is not None:
                result = session.compile(
                    files, _expand(language.compile, self.sandbox.python),
                    list(language.artifacts), self.compile_limits,
                )
                run.timings["compile_s"] = time.perf_counter() - t0
                if not result.ok:
                    why = "compiler timed out" if result.timed_out else "compilation failed"
                    tail = _tail(result.stderr or result.stdout, self.stderr_chars)
                    run.compile_failure = f"{why}: {tail}".strip()
                    return run
                files = {}
            t1 = time.perf_counter()
            for index, test in enumerate(reference.tests):
                result = self._execute(session, language, files, code, reference, test)
                report = _read_report(result.report, _call_count(test))
                if result.exit_code == COMPILE_ERROR_EXIT and report.compile_error is not None:
                    run.compile_failure = _tail(report.compile_error, self.stderr_chars).strip()
                    break
                outcome = self._judge(index, result, test, report.calls)
                run.outcomes.append(outcome)
                if self.stop_on_first_failure and outcome.status is not Status.CORRECT:
                    break
            run.timings["run_s"] = time.perf_counter() - t1
        return run

    def _execute(
        self,
        session: SandboxSession,
        language: Language,
        files: dict[str, str],
        code: str,
        reference: CodeReference,
        test: IOTest | CallTest | StatementTest,
    ) -> StepResult:
        if isinstance(test, IOTest):
            if language.fork_python:
                return session.run(files, self.test_limits, python_main=language.source_name,
                                   stdin=test.stdin)
            return session.run(files, self.test_limits, stdin=test.stdin,
                               argv=_expand(language.run, self.sandbox.python))
        calls = ([dict(c.call) for c in test.checks] if isinstance(test, CallTest)
                 else [{"exec": test.source}])
        return session.call({"solution.py": code}, self.test_limits, solution="solution.py",
                            calls=calls, prelude=reference.prelude, setup=reference.setup,
                            fn_name=reference.fn_name)

    # ---- judging -------------------------------------------------------------------------------
    def _judge(self, index: int, result: StepResult, test: IOTest | CallTest | StatementTest,
               reports: dict[int, dict[str, Any]]) -> TestOutcome:
        status, detail = classify_step(result)
        outcome = TestOutcome(index, status, result.wall_s, result.exit_code,
                              _tail(result.stderr, self.stderr_chars), detail,
                              fakeable=getattr(test, "fakeable", False),
                              peak_memory_mb=None if result.peak_memory_bytes is None
                              else result.peak_memory_bytes / (1 << 20))
        if isinstance(test, IOTest):
            if status is Status.CORRECT and not outputs_match(
                result.stdout, test.stdout, self.float_tolerance
            ):
                outcome.status, outcome.detail = Status.WRONG, "output differs"
            return outcome
        checks = test.checks if isinstance(test, CallTest) else (None,)
        for k, check in enumerate(checks):
            report = reports.get(k)
            if report is None:
                if outcome.status is Status.CORRECT:  # exited cleanly, yet never got there
                    outcome.status = Status.RUNTIME_ERROR
                    outcome.detail = (f"exited before {check.text} returned" if check
                                      else "exited before the assertion ran")
                return outcome
            verdict = _verdict(check, report)
            if verdict is not None:
                outcome.status, outcome.detail = Status.WRONG, verdict
                return outcome
        # Every value came back and matched: how the process ended afterwards does not matter.
        outcome.status, outcome.detail = Status.CORRECT, ""
        return outcome


def _verdict(check: Check | None, report: dict[str, Any]) -> str | None:
    """Why a reported call fails its check, or None when it passes."""
    if check is None:  # a statement test (fakeable): it ran to its end, or an assert failed
        return "assertion failed" if report.get("assertion_failed") else None
    if "not_plain" in report:
        why = report["not_plain"]
        return f"{check.text}: {why[:200] if isinstance(why, str) else 'not plain data'}"
    try:
        value = decode_plain(report["value"])
    except (KeyError, TypeError, ValueError) as err:
        return f"{check.text}: unreadable value ({str(err)[:200]})"
    if check.passes(value):
        return None
    return f"{check.text}: got {bounded_repr(value)}"


def bounded_repr(value: Any, limit: int = 200) -> str:
    """`repr` of a decoded value cut to about `limit` characters, never raising and never
    building more than that: a returned value is the program's, and may be 10**5000 or
    nested a thousand levels deep."""
    parts: list[str] = []
    budget = [limit]

    def emit(text: str) -> bool:
        parts.append(text[: max(budget[0], 0)])
        budget[0] -= len(text)
        return budget[0] > 0

    def walk(item: Any, depth: int) -> bool:
        if depth > 20:
            return emit("...")
        kind = type(item)
        if kind is int:
            if item.bit_length() > 600:  # beyond int's str limit: its size, not its digits
                return emit(f"<int of {item.bit_length()} bits>")
            return emit(repr(item))
        if kind in (list, tuple, set, frozenset, dict):
            opener, closer = {list: ("[", "]"), tuple: ("(", ")"), dict: ("{", "}"),
                              set: ("{", "}")}.get(kind, ("frozenset({", "})"))
            if not item and kind in (set, frozenset):
                return emit(f"{kind.__name__}()")
            if not emit(opener):
                return False
            items = item.items() if kind is dict else item
            for n, element in enumerate(items):
                if n and not emit(", "):
                    return False
                if kind is dict:
                    if not (walk(element[0], depth + 1) and emit(": ")
                            and walk(element[1], depth + 1)):
                        return False
                elif not walk(element, depth + 1):
                    return False
            if kind is tuple and len(item) == 1 and not emit(","):
                return False
            return emit(closer)
        if kind in (str, bytes):
            return emit(repr(item[: budget[0] + 1]))
        try:
            return emit(repr(item))
        except Exception:  # noqa: BLE001 - a repr that fails shows as its type
            return emit(f"<{kind.__name__}>")

    complete = walk(value, 0)
    text = "".join(parts)
    return text if complete and budget[0] >= 0 else text + "..."


#: Report lines read beyond one per call: the program shares the channel and may write its own
#: lines first; past this many the rest is not parsed, so a call still unreported is one the
#: program never returned from (its runtime_error).
REPORT_EXTRA_LINES = 16


@dataclass
class _Report:
    """What a step's report channel said: each call's report by index, and a compile error."""

    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    compile_error: str | None = None


def _call_count(test: IOTest | CallTest | StatementTest) -> int:
    """How many indexed reports a test's step writes (none for a stdin/stdout test)."""
    if isinstance(test, CallTest):
        return len(test.checks)
    return 1 if isinstance(test, StatementTest) else 0


def _read_report(text: str, count: int) -> _Report:
    """Parse the report of a step with `count` calls, once, in time linear in what is read.

    The first report of each index below `count` counts (other indexes are dropped, so no
    program-chosen integer is hashed), and the first compile error. Reading stops when every
    call has its report, and after `count` + REPORT_EXTRA_LINES lines in any case: the program
    can write there too, and a megabyte of empty lines was a million parse attempts under the
    interpreter lock. Lines that do not decode are skipped.
    """
    report = _Report()
    start = 0
    for _ in range(count + REPORT_EXTRA_LINES):
        if start >= len(text):
            break
        end = text.find("\n", start)
        if end < 0:
            end = len(text)
        line, start = text[start:end], end + 1
        try:
            item = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(item, dict):
            continue
        message = item.get("compile_error")
        if isinstance(message, str):
            if report.compile_error is None:
                report.compile_error = message
            continue
        index = item.get("index")
        if type(index) is int and 0 <= index < count:
            report.calls.setdefault(index, item)
            if len(report.calls) == count:
                break
    return report


def _code_too_large(code: str) -> str | None:
    """Why `code` is not sent to the sandbox (its UTF-8 form over CODE_MAX_BYTES), or None."""
    if len(code) * 4 <= CODE_MAX_BYTES:
        return None  # no UTF-8 encoding of it can be over the limit
    size = len(code.encode("utf-8", "surrogatepass"))
    if size <= CODE_MAX_BYTES:
        return None
    return f"program too large: {size} bytes of source, the limit is {CODE_MAX_BYTES}"


# ---- pure helpers (tested on their own) ----------------------------------------------------------
def extract_code(completion: str, language: Language | str) -> str | None:
    """Return the last fenced block tagged with the language, else the last untagged block,
    else the whole text when it has no fence and is not prose; None when nothing is usable."""
    if isinstance(language, str):
        language = LANGUAGES[language]
    if not isinstance(completion, str):
        return None
    blocks = _fenced_blocks(completion)
    tagged = [body for tag, body in blocks if tag in language.fence_tags]
    untagged = [body for tag, body in blocks if not tag]
    if tagged:
        code = tagged[-1]
    elif untagged:
        code = untagged[-1]
    elif not blocks and not looks_like_prose(completion, language.name):
        code = completion
    else:
        return None
    return code if code.strip() else None


def looks_like_prose(text: str, language: str) -> bool:
    """Unfenced text that is not code: it does not parse (Python), and most of its lines are
    runs of words without code punctuation."""
    # Parsing holds the GIL for its whole run (about 6 s per MB): a longer text is judged by
    # its lines alone.
    if language == "python" and len(text) <= PARSE_MAX_CHARS:
        try:
            pyast.parse(text)
            return False
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            pass
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return False
    wordy = sum(_has_word_run(line) and not _CODE_CHARS.search(line) for line in lines)
    return wordy * 2 >= len(lines)


def _has_word_run(line: str) -> bool:
    """Whether `line` holds four words in a row separated by blanks, as the regex
    ``[A-Za-z][A-Za-z'’-]*(?:[ \t]+[A-Za-z][A-Za-z'’-]*[,.;:!?]?){3,}`` finds them, in one
    linear pass over the blank-separated tokens (the regex is quadratic on a long word)."""
    run: int | None = None  # tokens since a usable first word, all words in between
    for token in _BLANKS.split(line):
        if run is not None:
            run += 1
            if run >= 3 and token[:1].isascii() and token[:1].isalpha():
                return True
        if _WORD.fullmatch(token):
            if run is None and _ends_in_word(token):
                run = 0
        else:
            run = 0 if _ends_in_word(token) else None
    return False


def _ends_in_word(token: str) -> bool:
    """Whether a first word ``[A-Za-z][A-Za-z'’-]*`` can end where `token` ends."""
    tail = token[len(token.rstrip(_WORD_CHARS)) :]
    return any(c.isascii() and c.isalpha() for c in tail)


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(lower-cased tag, body) of every fenced block; an unclosed last fence runs to the end."""
    blocks: list[tuple[str, str]] = []
    fence: str | None = None
    tag = ""
    body: list[str] = []
    for line in text.splitlines():
        if fence is None:
            match = _FENCE_OPEN.match(line)
            if match:
                fence, tag, body = match.group(1), match.group(2).lower(), []
        elif line.strip().startswith(fence) and line.strip().strip(fence[0]) == "":
            blocks.append((tag, "\n".join(body) + "\n"))
            fence = None
        else:
            body.append(line)
    if fence is not None:
        blocks.append((tag, "\n".join(body) + "\n"))
    return blocks


def outputs_match(actual: str, expected: str, float_tolerance: float | None = None) -> bool:
    """Same number of lines, each with the same whitespace-separated tokens (numbers within
    `float_tolerance`, relative or absolute, when given); surrounding blank space is ignored."""
    actual_lines = actual.strip().splitlines()
    expected_lines = expected.strip().splitlines()
    if len(actual_lines) != len(expected_lines):
        return False
    for got_line, want_line in zip(actual_lines, expected_lines, strict=True):
        got, want = got_line.split(), want_line.split()
        if len(got) != len(want):
            return False
        for a, b in zip(got, want, strict=True):
            if a == b:
                continue
            if float_tolerance is None or not (_is_number(a) and _is_number(b)):
                return False
            if _INTEGER.match(a) and _INTEGER.match(b):
                # a tolerance is for real numbers: 1000000000 is not 1000000007 (relative 7e-9)
                if int(a) != int(b):
                    return False
                continue
            x, y = float(a), float(b)
            # Beyond a float's range both are inf: only the same text matches (above).
            if not (math.isfinite(x) and math.isfinite(y)) or not math.isclose(
                    x, y, rel_tol=float_tolerance, abs_tol=float_tolerance):
                return False
    return True


def _is_number(token: str) -> bool:
    return len(token) <= NUMBER_MAX_CHARS and _NUMBER.match(token) is not None


def classify_step(result: StepResult) -> tuple[Status, str]:
    """Status of a finished run before its output is compared (CORRECT = exited cleanly)."""
    if result.limit == "processes":
        return Status.PROCESS_LIMIT, "process limit exceeded (all processes of the completion)"
    if result.limit == "memory":
        used = (result.peak_memory_bytes or 0) >> 20
        return Status.MEMORY_LIMIT, f"memory limit exceeded ({used} MiB across the completion)"
    if result.limit == "mappings":
        return Status.MEMORY_LIMIT, ("memory limit exceeded (more than "
                                     f"{result.mapping_limit} memory mappings across the completion)")
    if result.output_limited:
        return Status.OUTPUT_LIMIT, "output limit exceeded"
    if result.timed_out:
        return Status.TIMEOUT, "wall-clock limit exceeded"
    if result.signal == signal.SIGXCPU:
        return Status.TIMEOUT, "CPU-time limit exceeded"
    if result.signal == signal.SIGXFSZ or _FILE_TOO_LARGE.search(result.stderr):
        return Status.OUTPUT_LIMIT, "file-size limit exceeded"
    if _MEMORY_MARKERS.search(result.stderr):
        return Status.MEMORY_LIMIT, "memory limit exceeded"
    if result.signal is not None:
        try:
            name = signal.Signals(result.signal).name
        except ValueError:
            name = str(result.signal)
        return Status.RUNTIME_ERROR, f"killed by signal {name}"
    if result.exit_code != 0:
        return Status.RUNTIME_ERROR, f"exit status {result.exit_code}"
    return Status.CORRECT, ""


def _expand(command: tuple[str, ...], python: str) -> list[str]:
    return [python if part == "{python}" else part for part in command]


def _tail(text: str, chars: int) -> str:
    return text[-chars:] if chars else ""


"""Code-execution verifier: run a completion's program against tests inside a sandbox.

Extract (last fenced block of the language) -> run (one sandbox per completion, one fresh
process per test, see verifiers/code/sandbox.py) -> compare (line by line, whitespace-tolerant,
optional float tolerance; or assertion tests). Expected outputs never enter the sandbox.
"""

from __future__ import annotations

import math
import os
import re
import secrets
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..core.result import Status, VerifyResult
from .sandbox import (
    Isolation,
    Limits,
    Sandbox,
    SandboxCache,
    SandboxError,
    SandboxSession,
    StepResult,
)

#: Exit status of the assertion driver when an assertion fails (distinguishes it from a crash).
ASSERT_FAILED_EXIT = 101

_MEMORY_MARKERS = re.compile(
    r"^MemoryError\b|std::bad_alloc|Cannot allocate memory|out of memory", re.MULTILINE
)
_FILE_TOO_LARGE = re.compile(r"File too large|\[Errno 27\]")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\Z")
_FENCE_OPEN = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})[ \t]*([^\s`]*)[^`]*$")


@dataclass(frozen=True)
class IOTest:
    """One stdin/stdout test case."""

    stdin: str
    stdout: str


@dataclass(frozen=True)
class CodeReference:
    """What a completion's program is checked against: I/O tests or assertions."""

    language: str
    tests: tuple[IOTest, ...] = ()
    asserts: tuple[str, ...] = ()
    setup: str = ""

    @property
    def total(self) -> int:
        """Number of tests (I/O cases or assertions)."""
        return len(self.tests) or len(self.asserts)


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
    assert_driver: Callable[[str, str, str], str] | None = None


def _python_assert_driver(setup: str, test: str, sentinel: str) -> str:
    """Source that runs solution.py, then `setup`, then one assertion, then prints `sentinel`."""
    return (
        "import sys as _vs_sys\n"
        "_vs_ns = {'__name__': 'solution', '__builtins__': __builtins__}\n"
        "with open('solution.py', encoding='utf-8') as _vs_f:\n"
        "    exec(compile(_vs_f.read(), 'solution.py', 'exec'), _vs_ns)\n"
        f"exec(compile({setup!r}, 'setup', 'exec'), _vs_ns)\n"
        "try:\n"
        f"    exec(compile({test!r}, 'test', 'exec'), _vs_ns)\n"
        "except AssertionError:\n"
        "    import os as _vs_os, traceback as _vs_tb\n"
        "    _vs_tb.print_exc()\n"
        "    _vs_sys.stderr.flush()\n"
        f"    _vs_os._exit({ASSERT_FAILED_EXIT})\n"
        # The sentinel proves the assertion ran: a program that exits early never prints it.
        f"_vs_sys.stdout.write('\\n{sentinel}\\n')\n"
    )


LANGUAGES: dict[str, Language] = {
    "python": Language(
        name="python",
        source_name="main.py",
        fence_tags=("python", "py", "python3"),
        run=("{python}", "-I", "main.py"),
        fork_python=True,
        assert_driver=_python_assert_driver,
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

    def to_record(self) -> dict[str, Any]:
        """Return the JSON form stored in `VerifyResult.extra["tests"]`."""
        return {
            "index": self.index,
            "status": self.status.value,
            "time_s": round(self.time_s, 4),
            "exit_code": self.exit_code,
            "stderr": self.stderr,
            "detail": self.detail,
        }


@dataclass
class _Run:
    outcomes: list[TestOutcome] = field(default_factory=list)
    compile_failure: StepResult | None = None
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
        stop_on_first_failure: bool | None = None,
        stderr_chars: int = 1000,
        python: str | None = None,
        sandbox_reuse: int = 256,
    ) -> None:
        if workers is not None and workers < 1:
            raise ValueError(f"workers must be >= 1 or None, got {workers!r}")
        if float_tolerance is not None and float_tolerance < 0:
            raise ValueError(f"float_tolerance must be >= 0 or None, got {float_tolerance!r}")
        if stderr_chars < 0:
            raise ValueError(f"stderr_chars must be >= 0, got {stderr_chars!r}")
        self.workers = workers or os.cpu_count() or 1
        self.all_or_nothing = all_or_nothing
        self.float_tolerance = float_tolerance
        # Once one test fails an all-or-nothing reward is 0, so the rest need not run.
        self.stop_on_first_failure = (
            all_or_nothing if stop_on_first_failure is None else stop_on_first_failure
        )
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
        self.sandbox = Sandbox(isolation, allow_unsandboxed=allow_unsandboxed, python=python)
        # Sandboxes are started once per thread and reset between completions; the batch
        # threads live as long as the verifier so that their sandboxes do too.
        self._sandboxes = SandboxCache(self.sandbox, max_uses=sandbox_reuse)
        self._executor: ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()

    def close(self) -> None:
        """Stop the batch threads and every sandbox they keep; the verifier stays usable."""
        with self._executor_lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        self._sandboxes.close()

    def __enter__(self) -> CodeVerifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def isolation(self) -> Isolation:
        """The isolation level every run of this verifier gets."""
        return self.sandbox.isolation

    # ---- protocol --------------------------------------------------------------------------
    def reference_from_record(self, record: dict[str, Any]) -> dict[str, Any]:
        """Build the reference from a JSONL line with "tests" or "asserts" (KeyError if neither)."""
        reference: dict[str, Any] = {"language": record.get("language", "python")}
        if "tests" in record:
            reference["tests"] = record["tests"]
        elif "asserts" in record:
            reference["asserts"] = record["asserts"]
            reference["setup"] = record.get("setup", "")
        else:
            raise KeyError("tests")
        return reference

    def verify(self, completion: str, reference: Any) -> VerifyResult:
        """Run the completion's program against the reference's tests; never raises on output."""
        return self._verify_parsed(completion, parse_reference(reference))

    def verify_batch(
        self, completions: Sequence[str], references: Sequence[Any]
    ) -> list[VerifyResult]:
        """Verify many completions, `workers` at a time (one sandbox each), in input order."""
        if len(completions) != len(references):
            raise ValueError(
                f"got {len(completions)} completions but {len(references)} references"
            )
        parsed = [parse_reference(ref) for ref in references]
        if not completions:
            return []
        with self._executor_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="veristep-code")
            executor = self._executor
        return list(executor.map(self._verify_parsed, completions, parsed))

    # ---- one completion ----------------------------------------------------------------------
    def _verify_parsed(self, completion: str, reference: CodeReference) -> VerifyResult:
        started = time.perf_counter()
        language = LANGUAGES[reference.language]
        code = extract_code(completion, language)
        extra: dict[str, Any] = {
            "passed": 0,
            "total": reference.total,
            "isolation": self.isolation.value,
            "language": language.name,
            "tests": [],
        }
        if code is None:
            return VerifyResult(0.0, False, Status.NO_CODE, "no code block found", None,
                                {"total_s": time.perf_counter() - started}, extra)
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
            failure = run.compile_failure
            why = "compiler timed out" if failure.timed_out else "compilation failed"
            detail = f"{why}: {_tail(failure.stderr or failure.stdout, self.stderr_chars)}"
            return VerifyResult(0.0, False, Status.COMPILE_ERROR, detail.strip(), code,
                                run.timings, extra)
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
        python = self.sandbox.python
        t0 = time.perf_counter()
        with self._sandboxes.session() as session:
            run.timings["sandbox_start_s"] = time.perf_counter() - t0  # ~0 when reused
            t0 = time.perf_counter()
            if language.compile is not None:
                result = session.compile(
                    {language.source_name: code},
                    _expand(language.compile, python),
                    list(language.artifacts),
                    self.compile_limits,
                )
                run.timings["compile_s"] = time.perf_counter() - t0
                if not result.ok:
                    run.compile_failure = result
                    return run
                files: dict[str, str] = {}
            else:
                files = {language.source_name: code}
            t1 = time.perf_counter()
            if reference.asserts:
                self._run_asserts(session, code, reference, language, run)
            else:
                for index, test in enumerate(reference.tests):
                    result = self._execute(session, language, files, language.source_name,
                                           test.stdin)
                    outcome = self._judge_io(index, result, test.stdout)
                    run.outcomes.append(outcome)
                    if self.stop_on_first_failure and outcome.status is not Status.CORRECT:
                        break
            run.timings["run_s"] = time.perf_counter() - t1
        return run

    def _run_asserts(
        self,
        session: SandboxSession,
        code: str,
        reference: CodeReference,
        language: Language,
        run: _Run,
    ) -> None:
        assert language.assert_driver is not None  # checked by parse_reference
        sentinel = f"veristep-asserts-done-{secrets.token_hex(8)}"
        for index, test in enumerate(reference.asserts):
            driver = language.assert_driver(reference.setup, test, sentinel)
            files = {"solution.py": code, language.source_name: driver}
            result = self._execute(session, language, files, language.source_name, "")
            outcome = self._judge_assert(index, result, sentinel)
            run.outcomes.append(outcome)
            if self.stop_on_first_failure and outcome.status is not Status.CORRECT:
                break

    def _execute(
        self,
        session: SandboxSession,
        language: Language,
        files: dict[str, str],
        main: str,
        stdin: str,
    ) -> StepResult:
        if language.fork_python:
            return session.run(files, self.test_limits, python_main=main, stdin=stdin)
        argv = _expand(language.run, self.sandbox.python)
        return session.run(files, self.test_limits, argv=argv, stdin=stdin)

    # ---- judging -------------------------------------------------------------------------------
    def _judge_io(self, index: int, result: StepResult, expected: str) -> TestOutcome:
        outcome = self._outcome(index, result)
        if outcome.status is Status.CORRECT and not outputs_match(
            result.stdout, expected, self.float_tolerance
        ):
            outcome.status = Status.WRONG_ANSWER
            outcome.detail = "output differs"
        return outcome

    def _judge_assert(self, index: int, result: StepResult, sentinel: str) -> TestOutcome:
        if result.exit_code == ASSERT_FAILED_EXIT and not result.timed_out:
            return TestOutcome(index, Status.WRONG_ANSWER, result.wall_s, result.exit_code,
                               _tail(result.stderr, self.stderr_chars), "assertion failed")
        outcome = self._outcome(index, result)
        lines = result.stdout.rstrip().splitlines()
        if outcome.status is Status.CORRECT and (not lines or lines[-1].strip() != sentinel):
            outcome.status = Status.RUNTIME_ERROR
            outcome.detail = "exited before the assertion ran"
        return outcome

    def _outcome(self, index: int, result: StepResult) -> TestOutcome:
        status, detail = classify_step(result)
        return TestOutcome(index, status, result.wall_s, result.exit_code,
                           _tail(result.stderr, self.stderr_chars), detail)


# ---- pure helpers (tested on their own) ----------------------------------------------------------
def parse_reference(reference: Any) -> CodeReference:
    """Validate a reference dict and return it typed; raises ValueError on a malformed one."""
    if isinstance(reference, CodeReference):
        return reference
    if not isinstance(reference, dict):
        raise ValueError(f"code reference must be a dict, got {type(reference).__name__}")
    language = reference.get("language", "python")
    if language not in LANGUAGES:
        raise ValueError(f"unknown language {language!r}; choose one of {', '.join(LANGUAGES)}")
    if "tests" in reference:
        tests = reference["tests"]
        if not isinstance(tests, list) or not tests:
            raise ValueError("reference 'tests' must be a non-empty list")
        parsed = []
        for i, test in enumerate(tests):
            if not isinstance(test, dict) or not isinstance(test.get("stdout"), str):
                raise ValueError(f"test {i} must be a dict with a string 'stdout'")
            stdin = test.get("stdin", "")
            if not isinstance(stdin, str):
                raise ValueError(f"test {i}: 'stdin' must be a string")
            parsed.append(IOTest(stdin, test["stdout"]))
        return CodeReference(language, tests=tuple(parsed))
    if "asserts" in reference:
        asserts = reference["asserts"]
        if not isinstance(asserts, list) or not asserts or not all(
            isinstance(a, str) for a in asserts
        ):
            raise ValueError("reference 'asserts' must be a non-empty list of strings")
        if LANGUAGES[language].assert_driver is None:
            raise ValueError(f"assertion tests are not supported for {language!r}; use 'tests'")
        setup = reference.get("setup", "") or ""
        if not isinstance(setup, str):
            raise ValueError("reference 'setup' must be a string")
        return CodeReference(language, asserts=tuple(asserts), setup=setup)
    raise ValueError("code reference needs 'tests' or 'asserts'")


def extract_code(completion: str, language: Language | str) -> str | None:
    """Return the last fenced block tagged with the language, else the last untagged block,
    else the whole text when it has no fence at all; None when nothing usable is left."""
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
    elif not blocks:
        code = completion
    else:
        return None
    return code if code.strip() else None


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
            if float_tolerance is None or not (_NUMBER.match(a) and _NUMBER.match(b)):
                return False
            if not math.isclose(float(a), float(b), rel_tol=float_tolerance,
                                abs_tol=float_tolerance):
                return False
    return True


def classify_step(result: StepResult) -> tuple[Status, str]:
    """Status of a finished run before its output is compared (CORRECT = exited cleanly)."""
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

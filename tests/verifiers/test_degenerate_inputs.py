"""Every verifier on degenerate text: a status within its time limit + 1 s, the host never frozen.

Issue 29: host-side work on untrusted text (completions, program output, reports) must be linear
or run under the item's deadline in a worker. A degenerate RL sample (a 1 MB run of one letter,
digits, brackets, unclosed tags, nested JSON) is fed to each verifier from its own thread while
a ticker thread checks that the others keep running (no pattern holds the GIL for a second).

The bound is the verifier's time limit + 1 s (in-process verifiers have no limit: 1 s for each of
the test's threads that share the GIL), times
the load average per CPU (at most 6) on a machine busier than its CPU count, so that a loaded CI
runner does not fail it; the quadratic and exponential cases it guards against took from 2 s to
minutes.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from veristep.verifiers import Status, VerifyResult

MB = 1 << 20
INPUTS = {
    "letters": "a" * MB,
    "digits": "1" * MB,
    "digits then a letter": "1" * MB + "x",
    "open brackets": "(" * MB,
    "open braces": "{" * MB,
    "nested lists": "[" * (MB // 2) + "]" * (MB // 2),
    "unclosed answer tags": "<answer>" * (MB // 8),
    "unclosed tool calls": "<tool_call>" * (MB // 11),
    "unclosed think": "<think>" + "a " * (MB // 2),
    "nested JSON": '{"name": "f", "arguments": ' + '{"a": ' * (MB // 6),
    "spaces and digits": "1 " * (MB // 2),
    "an unclosed fence tag": "```" + "a" * MB + "`",
    "words without a fence": "word " * (MB // 5),
    "an open angle bracket, then spaces": "<" + " " * MB,  # format tags: quadratic (27 s at 40 KB)
}


#: Threads of this test that run verifier work in the test's own process (tools, format, steps).
IN_PROCESS_THREADS = 3


def _slack() -> float:
    """1 on an idle machine; the load per CPU (up to 6) on a busy one."""
    return max(1.0, min(6.0, os.getloadavg()[0] / (os.cpu_count() or 1)))


def _code_verifier(**config: Any) -> Any:
    from veristep.verifiers.code import CodeVerifier
    from veristep.verifiers.code.sandbox import SandboxUnavailable

    try:
        return CodeVerifier(isolation="bwrap", **config)
    except SandboxUnavailable as err:
        if os.environ.get("VERISTEP_REQUIRE_BWRAP"):
            pytest.fail(f"VERISTEP_REQUIRE_BWRAP is set but bubblewrap cannot run: {err}")
        pytest.skip(f"bubblewrap sandbox unavailable here: {err}")


def _start_math_worker(verifier: Any) -> None:
    """Return once the math worker answers (its start-up is not an item's time).

    "42" against "42" is settled without sympy, so it never starts the worker; on a loaded machine
    the worker's start (its sympy import) can outlast an item's limit ("no free worker before the
    time limit"), so the question is asked again until it has started.
    """
    deadline = time.monotonic() + 120 * _slack()
    while not verifier.verify(r"$\boxed{x + x}$", "2x").correct:
        assert time.monotonic() < deadline, "the math worker did not start"


def _kinds() -> dict[str, tuple[Any, Any, float]]:
    from veristep.verifiers.format import FormatVerifier
    from veristep.verifiers.math import MathVerifier
    from veristep.verifiers.tools.verifier import ToolCallVerifier

    tool = {"name": "f", "arguments": {"a": 1}}
    return {
        "math": (MathVerifier(workers=1, timeout=2.0), "42", 2.0),
        "tools": (ToolCallVerifier(workers=1), tool, 0.0),  # verify() runs in this process
        "format": (FormatVerifier(), None, 0.0),
        "code": (_code_verifier(timeout=1.0, workers=1, float_tolerance=1e-6),
                 {"tests": [{"stdin": "", "stdout": "1"}]}, 1.0),
    }


def test_every_verifier_returns_a_status_in_time_on_degenerate_text():
    from veristep.prm.steps import split_steps

    kinds = _kinds()
    slack = _slack()
    failures: list[str] = []
    ticks: list[float] = []
    stop = threading.Event()

    def ticker() -> None:
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.01)

    def run(kind: str, verifier: Any, reference: Any, limit: float) -> None:
        # An in-process verifier (no limit of its own) shares the GIL with this test's other
        # in-process threads (tools, format, step splitting): 1 s each. The quadratic cases this
        # guards against take minutes on these 1 MB inputs; the linear ones 0.4 s alone.
        bound = (limit + 1.0 if limit else IN_PROCESS_THREADS) * slack
        for name, text in INPUTS.items():
            started = time.monotonic()
            try:
                result = verifier.verify(text, reference)
            except Exception as err:  # noqa: BLE001 - collected and reported below
                failures.append(f"{kind} / {name}: raised {err!r}"[:300])
                continue
            elapsed = time.monotonic() - started
            if not isinstance(result, VerifyResult) or not isinstance(result.status, Status):
                failures.append(f"{kind} / {name}: returned {result!r}"[:300])
            elif result.status in (Status.INTERNAL_ERROR, Status.SANDBOX_ERROR):
                failures.append(f"{kind} / {name}: {result.status.value} {result.detail[:200]}")
            if elapsed > bound:
                failures.append(f"{kind} / {name}: {elapsed:.2f}s > {bound:.1f}s")

    def steps() -> None:
        for name, text in INPUTS.items():
            started = time.monotonic()
            split_steps(text)
            split_steps(text, separator="\n")
            if time.monotonic() - started > slack:
                failures.append(f"prm steps / {name}: {time.monotonic() - started:.2f}s")

    # Warm each verifier first (worker and sandbox start-up is not the item's time).
    for verifier, reference, _ in kinds.values():
        verifier.verify("42", reference)
    _start_math_worker(kinds["math"][0])
    threads = [threading.Thread(target=run, args=(kind, *spec)) for kind, spec in kinds.items()]
    threads.append(threading.Thread(target=steps))
    clock = threading.Thread(target=ticker)
    clock.start()
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=600)
    finally:
        stop.set()
        clock.join()
        for verifier, _, _ in kinds.values():
            getattr(verifier, "close", lambda: None)()
    assert not [t for t in threads if t.is_alive()], "a verifier never returned"
    assert not failures, "\n".join(failures)
    gap = max(b - a for a, b in zip(ticks, ticks[1:], strict=False))
    # A pattern that holds the GIL on these 1 MB inputs holds it for minutes; 2 s leaves room for
    # the scheduler on a busy runner, whose load may have risen since the start (the 1-minute
    # average lags), so the larger of the two readings counts.
    assert gap < 2.0 * max(slack, _slack()), f"other threads stood still for {gap:.2f}s"


# ---- the red team's cases, one by one (each took seconds to minutes before) ------------------
def _within(seconds: float, fn: Callable[[], Any]) -> Any:
    """Run `fn` in a daemon thread; fail if it does not return within `seconds`."""
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(seconds * _slack())
    assert box, f"still running after {time.monotonic() - started:.1f}s"
    return box[0]


def test_number_matching_under_float_tolerance_is_linear():
    from veristep.verifiers.code import outputs_match

    token = "1" * 14_000
    assert _within(1.0, lambda: outputs_match(token + "x", token + "y", 1e-6)) is False
    assert _within(1.0, lambda: outputs_match(token, token + ".0", 1e-6)) is False  # too long
    assert outputs_match("1.0 2e3 .5", "1 2000 0.5", 1e-9) and not outputs_match("1.", "1x", 0.1)


def test_prose_detection_and_fence_reading_are_linear():
    from veristep.verifiers.code import extract_code, looks_like_prose

    assert _within(1.0, lambda: looks_like_prose("a" * 14_000 + "1", "cpp")) is False
    assert _within(1.0, lambda: extract_code("```" + "a" * 50_000 + "`", "python")) is not None
    assert _within(1.0, lambda: extract_code("~" * 50_000 + "`", "cpp")) is not None
    assert looks_like_prose("This is some prose, not code at all.\nReally it is.", "cpp")
    assert not looks_like_prose("x = 1\nprint(x)", "python")


@pytest.mark.parametrize("text", [
    "<answer>" * 4_000,  # 32k characters of unclosed tags: 1.2 s, in the caller, before
    "\\boxed{5 " + "a" * 150 + "1}",  # "5 apples" rule: exponential in the letters (2.8 s)
    "```" + "a" * 16_000 + "`",  # a long last word: quadratic (4 s)
    "```" + " " * 16_000 + "`",  # trailing chat tokens over white space: quadratic (1.6 s)
    "So $$\\angle" + " " * 30_000 + "1$$",  # a span read as a name: quadratic (16 s)
    "\\boxed{5\\text{a" + " " * 620 + "}" + " " * 1_300 + "x}",  # a unit in \text: cubic (6.6 s)
])
def test_math_extraction_in_the_callers_process_is_linear(text):
    from veristep.verifiers.math import MathVerifier

    with MathVerifier(workers=1, timeout=2.0) as verifier:
        _start_math_worker(verifier)
        result = _within(1.0, lambda: verifier.verify(text, "42"))
    assert result.status in (Status.NO_ANSWER, Status.WRONG, Status.PARSE_ERROR), result


@pytest.mark.parametrize("reference", [
    "5\\text{a" + " " * 620 + "}" + " " * 1_300 + "x",  # read in the caller: cubic (5 s)
    "We compute the value of this thing here: $$\\angle" + " " * 24_000 + "1$$",  # (10 s)
])
def test_math_references_are_read_in_linear_time(reference):
    from veristep.verifiers.math.sympy_free import prepare_reference

    assert _within(1.0, lambda: prepare_reference(reference)) is not None


def test_a_completion_against_an_unusable_reference_is_not_read_at_all():
    # It was extracted in the caller whatever its length (even with inline_chars=0, the
    # server's setting), and came back as `timeout` rather than `bad_reference`.
    from veristep.verifiers.math import MathVerifier

    text = "So $$\\angle" + " " * 200_000 + "1$$"
    with MathVerifier(workers=1, timeout=1.0, inline_chars=0) as verifier:
        result = _within(1.0, lambda: verifier.verify(text, ""))
        assert result.status is Status.BAD_REFERENCE and result.extracted is None, result
        result = verifier.verify("so \\boxed{5}", "")
        assert result.status is Status.BAD_REFERENCE and result.extracted is None, result

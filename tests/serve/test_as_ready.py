"""Verdicts as they are decided: no item waits for a slower one that shares its lane's batch."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from veristep.verifiers import Status, VerifyResult, get_verifier
from veristep.verifiers.core.aio import AsyncBridge, run_batch_as_ready

# sympy works on this factorial until the worker is killed at the time limit
HANG = "$\\boxed{(10^{5}+10^{10})!}$"
MATH_ROWS = [
    ("The answer is \\boxed{42}.", "42"),
    ("\\boxed{\\sqrt{2}/2}", "\\frac{\\sqrt{2}}{2}"),  # a worker's sympy verdict
    ("\\boxed{\\sqrt{2}/2}", "\\frac{\\sqrt{2}}{2}"),  # the same pair: judged once, given twice
    ("\\boxed{7}", "8"),
    ("\\boxed{x^2 - 1}", "(x-1)(x+1)"),
    ("\\boxed{5}", None),  # unusable reference
    ("no answer here", "3"),
]


def _key(r: VerifyResult) -> tuple:
    return (r.status, r.reward, r.judged, r.extracted)


def _collected(stream) -> tuple[list[int], dict[int, VerifyResult]]:
    order, got = [], {}
    for group in stream:
        for pos, result in group:
            assert pos not in got, f"position {pos} given twice"
            order.append(pos)
            got[pos] = result
    return order, got


@pytest.fixture(scope="module")
def math_verifier():
    v = get_verifier("math", workers=2, timeout=1.0)
    yield v
    v.close()


def test_math_as_ready_gives_every_position_once_with_verify_batchs_verdicts(math_verifier):
    completions, references = [c for c, _ in MATH_ROWS], [r for _, r in MATH_ROWS]
    _, got = _collected(math_verifier.verify_batch_as_ready(completions, references))
    assert sorted(got) == list(range(len(MATH_ROWS)))
    sync = math_verifier.verify_batch(completions, references)
    assert [_key(got[i]) for i in range(len(MATH_ROWS))] == [_key(r) for r in sync]
    with pytest.raises(ValueError):
        list(math_verifier.verify_batch_as_ready(["\\boxed{1}"], []))


def test_math_as_ready_gives_the_others_before_an_item_that_hangs(math_verifier):
    rows = [(HANG, "5"), *MATH_ROWS]
    order, got = _collected(math_verifier.verify_batch_as_ready([c for c, _ in rows], [r for _, r in rows]))
    assert got[0].status is Status.TIMEOUT
    assert order[-1] == 0  # every other verdict came before the hung item's time limit


def test_code_as_ready_gives_the_others_before_a_program_that_loops():
    from veristep.verifiers.code.sandbox import SandboxUnavailable

    try:
        verifier = get_verifier("code", timeout=1.0, workers=2)
    except SandboxUnavailable as err:
        if os.environ.get("VERISTEP_REQUIRE_BWRAP"):
            raise
        pytest.skip(f"no sandbox here: {err}")
    reference = {"tests": [{"stdin": "", "stdout": "1"}]}
    rows = [("```python\nwhile True:\n    pass\n```", reference),
            ("```python\nprint(1)\n```", reference),
            ("```python\nprint(2)\n```", reference),
            ("```python\nprint(1)\n```", {"tests": "not a list"})]
    try:
        order, got = _collected(verifier.verify_batch_as_ready([c for c, _ in rows], [r for _, r in rows]))
        sync = verifier.verify_batch([c for c, _ in rows], [r for _, r in rows])
    finally:
        verifier.close()
    assert order[-1] == 0 and got[0].status is Status.TIMEOUT
    assert [_key(got[i]) for i in range(len(rows))] == [_key(r) for r in sync]
    assert got[3].status is Status.BAD_REFERENCE


def test_a_request_batched_with_a_hanging_item_is_answered_without_waiting_for_it(math_verifier):
    bridge = AsyncBridge(math_verifier, lanes=1)

    async def main() -> tuple[bool, VerifyResult, VerifyResult]:
        # one submit, so the lane takes both items in one batch
        hung, quick = bridge.submit([HANG, "\\boxed{\\sqrt{2}/2}"], ["5", "\\frac{\\sqrt{2}}{2}"],
                                    asyncio.get_running_loop())
        quick_result = await quick
        still_waiting = not hung.done()
        return still_waiting, quick_result, await hung

    still_waiting, quick_result, hung_result = asyncio.run(main())
    assert quick_result.status is Status.CORRECT
    assert still_waiting and hung_result.status is Status.TIMEOUT
    # the lane counts its batch after it has handed back the last verdict: wait for the count
    deadline = time.monotonic() + 5.0
    while bridge.batches == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert bridge.batches == 1


class _StopsShort:
    """A verifier whose streamed verdicts stop with an error after the first item."""

    def verify_batch(self, completions, references):
        return [VerifyResult(1.0, True, Status.CORRECT, f"batch {c}") for c in completions]

    def verify_batch_as_ready(self, completions, references):
        yield [(0, VerifyResult(1.0, True, Status.CORRECT, "streamed")), (0, "again"), (99, "out of range")]
        raise RuntimeError("broke mid-batch")


def test_positions_a_stream_did_not_give_are_run_again_and_none_twice():
    groups = list(run_batch_as_ready(_StopsShort(), ["a", "b", "c"], [None] * 3))
    given = [pos for group in groups for pos, _ in group]
    assert sorted(given) == [0, 1, 2]
    outcomes = dict(pair for group in groups for pair in group)
    assert outcomes[0].detail == "streamed" and outcomes[2].detail == "batch c"

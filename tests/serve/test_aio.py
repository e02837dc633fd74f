"""The async API: `averify` / `averify_batch` on every kind, on the verifiers' own pools."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time

import pytest
from veristep.verifiers import (
    Status,
    VerifyResult,
    averify,
    averify_batch,
    combine,
    get_verifier,
    register_verifier,
)
from veristep.verifiers.core.aio import bridge_for, configure_async


def _lanes() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "veristep-async-lane"]


@pytest.fixture(scope="module")
def math_verifier():
    v = get_verifier("math", workers=2, timeout=5.0)
    yield v
    v.close()


MATH_ROWS = [
    ("The answer is \\boxed{42}.", "42"),
    ("So x = \\boxed{\\frac{1}{2}}", "0.5"),
    ("\\boxed{7}", "8"),
    ("no answer here", "3"),
    ("\\boxed{\\sqrt{2}/2}", "\\frac{\\sqrt{2}}{2}"),  # needs sympy: goes to the worker pool
    ("\\boxed{5}", None),  # unusable reference
]


def _key(r: VerifyResult) -> tuple:
    return (r.status, r.reward, r.judged, r.extracted)


def test_math_async_matches_sync(math_verifier):
    completions = [c for c, _ in MATH_ROWS]
    references = [r for _, r in MATH_ROWS]
    sync = math_verifier.verify_batch(completions, references)
    got = asyncio.run(math_verifier.averify_batch(completions, references))
    assert [_key(r) for r in got] == [_key(r) for r in sync]
    assert got[-1].status is Status.BAD_REFERENCE and not got[-1].judged
    one = asyncio.run(math_verifier.averify("\\boxed{42}", "42"))
    assert one.status is Status.CORRECT and one.reward == 1.0


def test_concurrent_callers_share_the_pool_and_batch(math_verifier):
    """200 concurrent callers: right answers, one pool, few lanes, items batched together."""
    math_verifier.verify_batch(["\\boxed{1}"], ["1"])  # pool up
    pids = sorted(math_verifier.worker_pids())
    bridge = bridge_for(math_verifier)
    batches_before = bridge.batches

    async def main() -> tuple[list[VerifyResult], float]:
        gaps: list[float] = []
        stop = asyncio.Event()

        async def heartbeat() -> None:
            last = time.perf_counter()
            while not stop.is_set():
                await asyncio.sleep(0.01)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        beat = asyncio.create_task(heartbeat())
        calls = [averify(math_verifier, f"\\boxed{{{i}}}", str(i if i % 3 else i + 1)) for i in range(200)]
        results = await asyncio.gather(*calls)
        stop.set()
        await beat
        return results, max(gaps)

    results, worst_gap = asyncio.run(main())
    for i, r in enumerate(results):
        assert r.status is (Status.CORRECT if i % 3 else Status.WRONG), (i, r)
    assert sorted(math_verifier.worker_pids()) == pids  # no second pool, no restart
    assert len(_lanes()) <= bridge.lanes
    assert bridge.batches - batches_before < 200  # callers' items travelled together
    # the loop kept running while the lanes verified (generous: a loaded 2-core machine)
    assert worst_gap < 2.0


def test_every_kind_has_async_methods(test_data_dir):
    rows = {
        kind: [json.loads(line) for line in (test_data_dir / f"{kind}_sample.jsonl").open()][:4]
        for kind in ("code", "tools", "format")
    }
    for kind, config in (("code", {"workers": 2, "timeout": 10.0}), ("tools", {"workers": 1}),
                         ("format", {"workers": 1})):
        v = get_verifier(kind, **config)
        try:
            completions = [r["completion"] for r in rows[kind]]
            refs = [v.reference_from_record(r) for r in rows[kind]]
            sync = v.verify_batch(completions, refs)
            got = asyncio.run(v.averify_batch(completions, refs))
            assert [(r.status, r.reward) for r in got] == [(r.status, r.reward) for r in sync], kind
            for row, r in zip(rows[kind], got, strict=True):
                if "expected_status" in row:
                    assert r.status.value == row["expected_status"], (kind, row.get("id"), r)
        finally:
            v.close()


def test_combine_async(math_verifier):
    w = combine(math=1.0, format=0.1, workers=1)
    try:
        completions = ["<think>6*7</think>\n<answer>42</answer>", "<answer>41</answer>", "\\boxed{3}"]
        refs = ["42", "42", None]
        sync = w.verify_batch(completions, refs)
        got = asyncio.run(w.averify_batch(completions, refs))
        assert [(r.status, r.reward, r.extra["components"]) for r in got] == [
            (r.status, r.reward, r.extra["components"]) for r in sync
        ]
        assert got[2].status is Status.BAD_REFERENCE
        assert asyncio.run(averify(w, completions[0], "42")).reward == pytest.approx(sync[0].reward)
    finally:
        w.close()


class _Picky:
    """A verifier whose batch raises when any item is 'boom' (verify_batch is still per item)."""

    kind = "picky"

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.seen: list[str] = []
        self.lock = threading.Lock()

    def reference_from_record(self, record):
        return record.get("answer")

    def verify(self, completion, reference):
        return self.verify_batch([completion], [reference])[0]

    def verify_batch(self, completions, references):
        time.sleep(self.delay)
        with self.lock:
            self.seen.extend(completions)
        if "boom" in completions:
            raise RuntimeError("boom")
        return [VerifyResult(float(c == r), c == r, Status.CORRECT if c == r else Status.WRONG)
                for c, r in zip(completions, references, strict=True)]


def test_registered_class_gets_async_methods_and_errors_stay_per_item():
    register_verifier("picky_test", _Picky, replace=True)
    v = get_verifier("picky_test")
    assert hasattr(v, "averify") and hasattr(v, "averify_batch")

    async def main():
        good = asyncio.gather(*(v.averify(str(i), str(i)) for i in range(20)))
        bad = v.averify("boom", "x")
        return await asyncio.gather(good, bad, return_exceptions=True)

    good, bad = asyncio.run(main())
    assert all(r.status is Status.CORRECT for r in good)
    assert isinstance(bad, RuntimeError)


def test_cancelled_callers_items_are_not_run():
    v = _Picky(delay=0.5)
    configure_async(v, lanes=1, max_batch=1)

    async def main():
        first = asyncio.create_task(averify(v, "a", "a"))
        await asyncio.sleep(0.1)  # the only lane is busy with "a"
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(averify_batch(v, ["b", "c"], ["b", "c"]), 0.1)
        return await first

    assert asyncio.run(main()).status is Status.CORRECT
    time.sleep(0.8)
    assert v.seen == ["a"]


def test_length_mismatch_and_bad_settings():
    v = _Picky()
    with pytest.raises(ValueError, match="2 completions but 1 references"):
        asyncio.run(averify_batch(v, ["a", "b"], ["a"]))
    with pytest.raises(ValueError):
        configure_async(v, lanes=0)
    assert asyncio.run(averify_batch(v, [], [])) == []


class _Priority:
    """Records the nice value of the thread that runs each batch."""

    def __init__(self) -> None:
        self.nice: list[int] = []

    def verify_batch(self, completions, references):
        self.nice.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        return [VerifyResult(1.0, True, Status.CORRECT, "") for _ in completions]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
def test_lanes_run_at_their_nice_value_and_the_caller_keeps_its_own():
    v = _Priority()
    configure_async(v, nice=7)
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    asyncio.run(averify_batch(v, ["a", "b"], ["a", "b"]))
    assert v.nice and set(v.nice) == {min(19, mine + 7)}
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine
    for bad in (-1, 20, 1.5, True):
        with pytest.raises(ValueError, match="nice must be an integer from 0 to 19"):
            configure_async(_Priority(), nice=bad)

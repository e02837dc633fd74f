"""`await`-able verification on the verifiers' own pools: `averify` and `averify_batch`.

Every verifier already has a thread-safe, parallel `verify_batch` backed by its pool (worker
processes for math, tools and format; sandbox threads for code). The async API reuses exactly
that, with no second pool and no thread per call: each verifier gets one `AsyncBridge` with a
fixed number of *lanes* (threads, 4 by default). Callers put items on the bridge's queue and
await futures; an idle lane takes every item waiting (up to `max_batch`) and runs them as one
batch. Under load, items from many concurrent callers travel in one batch (so a reference
shared by a group is parsed once); at low load a lone item goes at once. Results go back to
the callers' event loops with `loop.call_soon_threadsafe` as they are decided: a verifier with
`verify_batch_as_ready` (math, code) gives each verdict when it lands, so a caller whose items
are done never waits for a slower item of the same batch (one that runs to its time limit);
with only `verify_batch`, the batch's results go back together.

Guarantees:
* The event loop never blocks: the only work done on it is queueing and setting futures.
* Nothing is lost: every queued item gets a result, or its caller's future gets the exception
  the verifier raised for that item alone (a raising batch is retried item by item, so one bad
  item never fails the others' futures).
* An item whose caller stopped waiting (its future cancelled, e.g. by a deadline or a client
  that hung up) is not run if it has not started: a lane drops it from the bridge's queue, and a
  lane whose batch holds such items stops the batch at its next verdict (closing the verifier's
  `verify_batch_as_ready`, which cancels what it has not started), drops them and puts the
  batch's other unanswered items back at the front of the queue. A verifier without
  `verify_batch_as_ready` runs a batch it was handed whole. `submit(..., gone=f)` calls
  `f(future)` on the caller's loop once the bridge is done with an item (answered or dropped),
  so a caller can count the work still held for callers that stopped waiting.
* A forked child builds its own bridge (threads do not survive fork), like the pools do.

`nice` (Linux): each lane lowers its own thread's CPU priority by that much before its first
batch. Threads and processes inherit a thread's nice value where they are made, so a pool that
a lane starts (its dispatcher thread, its forked workers, a sandbox's threads and programs)
runs at the lane's priority too, while the event loop and other verifiers' lanes keep theirs.
`veristep serve` uses it to keep cheap kinds from queueing for CPU behind expensive ones.
"""

from __future__ import annotations

import collections
import contextlib
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .result import Status, VerifyResult

if TYPE_CHECKING:  # asyncio loads when a coroutine runs, not with every `import veristep.verifiers`
    import asyncio

__all__ = [
    "AsyncBridge",
    "AsyncVerifyMixin",
    "add_async_methods",
    "averify",
    "averify_batch",
    "bridge_for",
    "configure_async",
    "run_batch",
    "run_batch_as_ready",
]

#: Lanes (threads) per verifier: enough to overlap one batch's in-process work with another's
#: time in the pool, few enough that the pool, not the lanes, is what bounds throughput.
DEFAULT_LANES = 4
#: Most items one lane hands to `verify_batch` at once.
DEFAULT_MAX_BATCH = 512
#: A lane with nothing to do for this long exits; the next item starts it again.
_IDLE_EXIT_S = 30.0
#: Under load (another lane busy) a lane that finds fewer than `_LINGER_BELOW` items waits this
#: long for more: one call over many items costs the pool far fewer messages than many calls
#: over a few. An idle bridge never waits, so a lone caller pays nothing.
DEFAULT_LINGER_S = 0.005
_LINGER_BELOW = 64
#: Linux keeps a nice value per thread; elsewhere `os.nice` would lower the whole process.
PER_THREAD_NICE = sys.platform.startswith("linux")


#: What a dropped item's caller is told: nothing (its future is already done), only `gone`.
_DROPPED = object()


@dataclass
class _Job:
    completion: Any
    reference: Any
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    gone: Callable[[asyncio.Future], None] | None = None


class AsyncBridge:
    """Queue of items for one verifier, drained by a fixed number of lane threads."""

    def __init__(self, verifier: Any, lanes: int = DEFAULT_LANES, max_batch: int = DEFAULT_MAX_BATCH,
                 linger_s: float = DEFAULT_LINGER_S, nice: int = 0) -> None:
        if not isinstance(lanes, int) or lanes < 1:
            raise ValueError(f"lanes must be a positive integer, got {lanes!r}")
        if not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch must be a positive integer, got {max_batch!r}")
        # a weak reference: the bridge (and its idle lanes) must not keep the verifier alive
        self._verifier = weakref.ref(verifier) if _weakrefable(verifier) else (lambda: verifier)
        if not linger_s >= 0:
            raise ValueError(f"linger_s must be >= 0, got {linger_s!r}")
        check_nice(nice)
        self.nice = nice
        self.lanes = lanes
        self.max_batch = max_batch
        self.linger_s = linger_s
        self.pid = os.getpid()
        self._queue: collections.deque[_Job] = collections.deque()
        self._cv = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._idle = 0  # lanes waiting on the condition
        self.batches = 0  # verify_batch calls made (for tests and metrics)
        self.items = 0

    # ------------------------------------------------------------------ caller side

    @property
    def queued(self) -> int:
        """Items waiting for a lane (not counting those being verified)."""
        return len(self._queue)

    async def verify_batch(self, completions: Sequence[Any], references: Sequence[Any]) -> list[VerifyResult]:
        """Verify on the verifier's own pool without blocking the loop; results in input order."""
        import asyncio

        futures = self.submit(completions, references, asyncio.get_running_loop())
        try:
            return list(await asyncio.gather(*futures))
        except BaseException:
            for fut in futures:  # the caller has gone: queued items are dropped, not run
                fut.cancel()
            raise

    def submit(
        self, completions: Sequence[Any], references: Sequence[Any], loop: asyncio.AbstractEventLoop,
        gone: Callable[[asyncio.Future], None] | None = None,
    ) -> list[asyncio.Future]:
        """Queue items and return one future per item, resolved on `loop`.

        `gone(future)` runs on `loop` once the bridge is done with that item: its outcome set,
        or the item dropped unrun because the future was cancelled.
        """
        if len(completions) != len(references):
            raise ValueError(f"got {len(completions)} completions but {len(references)} references")
        futures = [loop.create_future() for _ in completions]
        jobs = [_Job(c, r, loop, f, gone) for c, r, f in zip(completions, references, futures, strict=True)]
        if not jobs:
            return futures
        with self._cv:
            self._queue.extend(jobs)
            self._start_lanes()
            self._cv.notify(min(len(jobs), self._idle) or 1)
        return futures

    # -------------------------------------------------------------------- lane side

    def _start_lanes(self) -> None:
        """Start lanes until every queued item has one or all lanes run (holding `_cv`)."""
        self._threads = [t for t in self._threads if t.is_alive()]
        while len(self._threads) < self.lanes and self._idle < len(self._queue):
            thread = threading.Thread(target=self._lane, name="veristep-async-lane", daemon=True)
            try:
                thread.start()
            except RuntimeError:  # cannot start a thread: the lanes already running drain the queue
                if not self._threads:
                    self._fail_all(RuntimeError("could not start a thread for the async verifier"))
                return
            self._threads.append(thread)
            self._idle += 1  # counted idle until it takes work

    def _fail_all(self, exc: BaseException) -> None:
        jobs = list(self._queue)
        self._queue.clear()
        _deliver(jobs, [exc] * len(jobs))

    def _take(self) -> list[_Job] | None:
        """The next batch (waiting for one), or None when this lane should exit."""
        with self._cv:
            while True:
                jobs: list[_Job] = []
                self._drain_into(jobs)
                if jobs:
                    busy = len(self._threads) - self._idle
                    if busy > 0 and self.linger_s > 0 and len(jobs) < min(_LINGER_BELOW, self.max_batch):
                        until = time.monotonic() + self.linger_s
                        while len(jobs) < min(_LINGER_BELOW, self.max_batch):
                            left = until - time.monotonic()
                            if left <= 0:
                                break
                            self._cv.wait(left)
                            self._drain_into(jobs)
                    self._idle -= 1
                    return jobs
                if not self._cv.wait(_IDLE_EXIT_S) and not self._queue:
                    self._idle -= 1
                    with contextlib.suppress(ValueError):
                        self._threads.remove(threading.current_thread())
                    return None

    def _drain_into(self, jobs: list[_Job]) -> None:
        """Move queued items into `jobs` up to `max_batch` (holding `_cv`)."""
        dropped = []
        while self._queue and len(jobs) < self.max_batch:
            job = self._queue.popleft()
            if job.future.done():  # a cancelled caller's item is not run
                dropped.append(job)
            else:
                jobs.append(job)
        if dropped:
            _deliver(dropped, [_DROPPED] * len(dropped))

    def _lane(self) -> None:
        lower_thread_priority(self.nice)
        while True:
            jobs = self._take()
            if jobs is None:
                return
            self._run(jobs)
            with self._cv:
                self._idle += 1
                self.batches += 1
                self.items += len(jobs)

    def _run(self, jobs: list[_Job]) -> None:
        """Verify a batch, handing each group of verdicts to its callers as it is decided.

        Once a caller of an item still unanswered has stopped waiting, the batch stops at its
        next verdict: those items are dropped (what the verifier has not started is cancelled)
        and the others go back to the front of the queue, for the next batch.
        """
        left = dict(enumerate(jobs))
        try:
            verifier = self._verifier()
            if verifier is None:
                raise RuntimeError("the verifier was garbage-collected")
            groups = run_batch_as_ready(verifier, [j.completion for j in jobs], [j.reference for j in jobs])
            try:
                for group in groups:
                    _deliver([left.pop(i) for i, _ in group], [outcome for _, outcome in group])
                    if any(job.future.done() for job in left.values()):
                        break
                else:
                    return
            finally:
                groups.close()
            unwanted = [job for job in left.values() if job.future.done()]
            wanted = [job for job in left.values() if not job.future.done()]
            left.clear()
            _deliver(unwanted, [_DROPPED] * len(unwanted))
            with self._cv:
                self._queue.extendleft(reversed(wanted))  # in their order, ahead of later items
                self._cv.notify()
        except BaseException as exc:  # noqa: BLE001 - never leave a caller waiting
            _deliver(list(left.values()), [exc] * len(left))


def run_batch(verifier: Any, completions: Sequence[Any], references: Sequence[Any],
              ) -> list[VerifyResult | BaseException]:
    """One `verify_batch`; if it raises, each item alone, so only an item that raises gets its error.

    A verifier may itself return an exception object for an item (the Ray-served verifier does,
    for an item that raised on its actor); it reaches that item's caller as its exception.
    """
    try:
        results = list(verifier.verify_batch(list(completions), list(references)))
        if len(results) == len(completions):
            return results
    except Exception:  # noqa: BLE001 - found item by item below
        pass
    out: list[VerifyResult | BaseException] = []
    for completion, reference in zip(completions, references, strict=True):
        try:
            (result,) = verifier.verify_batch([completion], [reference])
            out.append(result)
        except Exception as exc:  # noqa: BLE001 - that item's own error
            out.append(exc)
    return out


def run_batch_as_ready(verifier: Any, completions: Sequence[Any], references: Sequence[Any],
                       ) -> Iterator[list[tuple[int, VerifyResult | BaseException]]]:
    """`run_batch`'s outcomes in groups of (position, outcome), each as soon as it is decided.

    Uses the verifier's `verify_batch_as_ready` when it has one (every position once, in any
    order); positions it did not give, because it raised or stopped short, are then run by
    `run_batch`. A verifier without it gives all its outcomes in one group.
    """
    as_ready = getattr(verifier, "verify_batch_as_ready", None)
    if as_ready is None:
        yield list(enumerate(run_batch(verifier, completions, references)))
        return
    given = [False] * len(completions)
    groups = None
    try:
        groups = as_ready(list(completions), list(references))
        for group in groups:
            fresh = []
            for pos, result in group:
                if isinstance(pos, int) and 0 <= pos < len(given) and not given[pos]:
                    given[pos] = True
                    fresh.append((pos, result))
            if fresh:
                yield fresh
    except Exception:  # noqa: BLE001 - the rest are run again below, each error kept to its item
        pass
    finally:
        # closed early (the caller stopped reading): the verifier cancels what it has not started
        close = getattr(groups, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                close()
    rest = [pos for pos, done in enumerate(given) if not done]
    if rest:
        outcomes = run_batch(verifier, [completions[p] for p in rest], [references[p] for p in rest])
        yield list(zip(rest, outcomes, strict=True))


def check_nice(nice: int) -> None:
    """ValueError unless `nice` is a whole number from 0 to 19 (a thread can only lower its own)."""
    if isinstance(nice, bool) or not isinstance(nice, int) or not 0 <= nice <= 19:
        raise ValueError(f"nice must be an integer from 0 to 19, got {nice!r}")


def lower_thread_priority(nice: int) -> None:
    """Raise the calling thread's nice value by `nice` (Linux only; elsewhere nothing happens).

    Threads and processes started from this thread afterwards inherit the new value.
    """
    if nice and PER_THREAD_NICE:
        with contextlib.suppress(OSError):
            os.nice(nice)


def _deliver(jobs: Sequence[_Job], outcomes: Sequence[Any]) -> None:
    """Set each job's future on its own loop (one hop per loop, not per item)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future, Any, Any]]] = {}
    for job, outcome in zip(jobs, outcomes, strict=True):
        by_loop.setdefault(job.loop, []).append((job.future, outcome, job.gone))
    for loop, pairs in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            loop.call_soon_threadsafe(_set_all, pairs)


def _set_all(pairs: list[tuple[asyncio.Future, Any, Callable[[asyncio.Future], None] | None]]) -> None:
    for fut, outcome, gone in pairs:
        if outcome is _DROPPED or fut.done():
            pass
        elif isinstance(outcome, BaseException):
            fut.set_exception(outcome)
        else:
            fut.set_result(outcome)
        if gone is not None:
            gone(fut)


def _weakrefable(obj: Any) -> bool:
    try:
        weakref.ref(obj)
    except TypeError:
        return False
    return True


_BRIDGES: weakref.WeakKeyDictionary[Any, AsyncBridge] = weakref.WeakKeyDictionary()
_STRONG_BRIDGES: dict[int, tuple[Any, AsyncBridge]] = {}  # verifiers that take no weak reference
_BRIDGES_LOCK = threading.Lock()


def bridge_for(verifier: Any) -> AsyncBridge:
    """The verifier's bridge, made on first use (and again in a forked child)."""
    with _BRIDGES_LOCK:
        bridge = _lookup(verifier)
        if bridge is None or bridge.pid != os.getpid():
            bridge = AsyncBridge(verifier, *_settings(bridge))
            _store(verifier, bridge)
        return bridge


def configure_async(verifier: Any, *, lanes: int = DEFAULT_LANES, max_batch: int = DEFAULT_MAX_BATCH,
                    nice: int = 0) -> AsyncBridge:
    """Set the lanes, largest batch and lane CPU priority (`nice`) of the verifier's async calls.

    A new `nice` applies to lanes started afterwards (a lane cannot raise its priority again).
    """
    fresh = AsyncBridge(verifier, lanes, max_batch, nice=nice)  # checks the settings
    with _BRIDGES_LOCK:
        bridge = _lookup(verifier)
        if bridge is not None and bridge.pid == os.getpid():
            bridge.lanes, bridge.max_batch, bridge.nice = lanes, max_batch, nice
        else:
            bridge = fresh
            _store(verifier, bridge)
        return bridge


def _settings(bridge: AsyncBridge | None) -> tuple[int, int, float, int]:
    if bridge is None:
        return DEFAULT_LANES, DEFAULT_MAX_BATCH, DEFAULT_LINGER_S, 0
    return bridge.lanes, bridge.max_batch, bridge.linger_s, bridge.nice


def _lookup(verifier: Any) -> AsyncBridge | None:
    try:
        return _BRIDGES.get(verifier)
    except TypeError:  # not hashable or no weak references: keyed by identity, kept alive
        entry = _STRONG_BRIDGES.get(id(verifier))
        return entry[1] if entry is not None and entry[0] is verifier else None


def _store(verifier: Any, bridge: AsyncBridge) -> None:
    try:
        _BRIDGES[verifier] = bridge
    except TypeError:
        _STRONG_BRIDGES[id(verifier)] = (verifier, bridge)


async def averify_batch(verifier: Any, completions: Sequence[Any], references: Sequence[Any]) -> list[VerifyResult]:
    """`await` the verdicts of many completions; the verifier's own `averify_batch` if it has one."""
    own = getattr(verifier, "averify_batch", None)
    if own is not None:
        return await own(completions, references)
    return await bridge_for(verifier).verify_batch(completions, references)


async def averify(verifier: Any, completion: Any, reference: Any) -> VerifyResult:
    """`await` one completion's verdict (batched with other callers' items on the same pool)."""
    (result,) = await averify_batch(verifier, [completion], [reference])
    return result


class AsyncVerifyMixin:
    """`averify` / `averify_batch` for any class with a thread-safe `verify_batch`."""

    async def averify(self, completion: Any, reference: Any) -> VerifyResult:
        """Verify one completion without blocking the event loop."""
        (result,) = await self.averify_batch([completion], [reference])
        return result

    async def averify_batch(self, completions: Sequence[Any], references: Sequence[Any]) -> list[VerifyResult]:
        """Verify many completions without blocking the event loop, in input order."""
        return await bridge_for(self).verify_batch(completions, references)


def add_async_methods(cls: type) -> type:
    """Give a verifier class `averify` / `averify_batch` if it has none (the registry calls it)."""
    for name in ("averify", "averify_batch"):
        if not hasattr(cls, name):
            with contextlib.suppress(TypeError, AttributeError):  # a built-in or frozen type
                setattr(cls, name, getattr(AsyncVerifyMixin, name))
    return cls


def unjudged_timeout(detail: str) -> VerifyResult:
    """The result of an item whose deadline passed before its verdict came back."""
    return VerifyResult(0.0, False, Status.TIMEOUT, detail)

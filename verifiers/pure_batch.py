"""Run a pure-Python check over a batch in worker processes, each item under a hard deadline.

Used by the tool-call and format verifiers. Each worker receives one item at a time, so the
parent knows exactly when every item started; a worker that overruns its item's deadline is
killed and replaced (no signals, safe to call from any thread). Workers persist between
batches so a training loop does not pay process start-up every step.
"""

from __future__ import annotations

import enum
import multiprocessing
import os
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from .base import Status, VerifyResult


class Outcome(str, enum.Enum):
    """How one item's run ended."""

    OK = "ok"
    ERROR = "error"  # the function raised, or the worker died
    TIMEOUT = "timeout"


@dataclass
class ItemResult:
    """The outcome of one item: its value when OK, else a message."""

    outcome: Outcome
    value: Any = None
    message: str = ""


def _apply(fn: Callable[[Any], Any], item: Any) -> tuple[Outcome, Any, str]:
    try:
        return (Outcome.OK, fn(item), "")
    except Exception as err:  # noqa: BLE001 - any failure is reported per item, never fatal
        return (Outcome.ERROR, None, f"{type(err).__name__}: {err}"[:500])


def _worker_main(conn: Connection, fn: Callable[[Any], Any]) -> None:
    while True:
        try:
            chunk = conn.recv()
        except (EOFError, OSError):
            return
        if chunk is None:
            return
        try:
            conn.send([_apply(fn, item) for item in chunk])
        except Exception:  # the result does not pickle or the parent is gone
            return


class _Worker:
    def __init__(self, ctx: Any, fn: Callable[[Any], Any]) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child, fn), daemon=True)
        self.process.start()
        child.close()

    def kill(self) -> None:
        self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except (OSError, ValueError):
            pass
        self.process.join(timeout=1)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=5)
        self.conn.close()


#: Start method of the worker processes; override with VERISTEP_START_METHOD=spawn|forkserver.
START_METHOD_ENV = "VERISTEP_START_METHOD"


def _context() -> Any:
    # fork by default: workers start in milliseconds and never re-run the caller's __main__
    # (spawn/forkserver re-import it, which re-runs a training script that lacks a
    # `if __name__ == "__main__"` guard). The workers only parse text: they never touch CUDA,
    # locks or threads inherited from the parent.
    methods = multiprocessing.get_all_start_methods()
    method = os.environ.get(START_METHOD_ENV) or ("fork" if "fork" in methods else "spawn")
    if method not in methods:
        raise ValueError(f"{START_METHOD_ENV}={method!r} is not one of {methods}")
    return multiprocessing.get_context(method)


_MAX_CHUNK = 32


class BatchRunner:
    """Apply `fn` to items in `workers` processes with a per-item time limit of `timeout` s.

    `workers=0` runs in this process with no time limit (for debugging and tiny batches).
    `fn` must be picklable (a module-level function or a picklable object's method).
    """

    def __init__(self, fn: Callable[[Any], Any], workers: int, timeout: float) -> None:
        if workers < 0:
            raise ValueError(f"workers must be >= 0, got {workers}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.fn, self.workers, self.timeout = fn, workers, timeout
        self._pool: list[_Worker] = []
        self._pid = os.getpid()
        self._finalizer = weakref.finalize(self, _stop_all, self._pool)

    def run(self, items: Sequence[Any]) -> list[ItemResult]:
        """Results in input order; never raises because of an item."""
        if self.workers == 0:
            return [self._run_inline(item) for item in items]
        if not items:
            return []
        if os.getpid() != self._pid:  # we were forked: the inherited pipes belong to the parent
            self._pool.clear()
            self._pid = os.getpid()
        ctx = _context()
        while len(self._pool) < min(self.workers, len(items)):
            self._pool.append(_Worker(ctx, self.fn))
        results: list[ItemResult | None] = [None] * len(items)
        # Items travel in chunks to amortise the pipe round trip; a chunk's deadline is
        # timeout x its size. A chunk that overruns (or whose worker dies) is re-queued one
        # item per task, so only the item that really hangs ends up with TIMEOUT.
        size = max(1, min(_MAX_CHUNK, len(items) // (4 * len(self._pool))))
        pending = deque(
            list(range(i, min(i + size, len(items)))) for i in range(0, len(items), size)
        )
        idle = list(self._pool)
        busy: dict[Connection, tuple[_Worker, list[int], float]] = {}
        while pending or busy:
            while pending and idle:
                worker, chunk = idle.pop(), pending.popleft()
                try:
                    worker.conn.send([items[i] for i in chunk])
                except (OSError, ValueError):  # worker already gone: replace and retry
                    pending.appendleft(chunk)
                    idle.append(self._replace(worker, ctx))
                    continue
                busy[worker.conn] = (worker, chunk, time.monotonic() + self.timeout * len(chunk))
            next_deadline = min(deadline for _, _, deadline in busy.values())
            ready = wait(list(busy), timeout=max(0.0, next_deadline - time.monotonic()))
            for conn in ready:
                worker, chunk, _ = busy.pop(conn)  # type: ignore[index]
                try:
                    outcomes = conn.recv()  # type: ignore[union-attr]
                except (EOFError, OSError):
                    idle.append(self._replace(worker, ctx))
                    self._settle(chunk, pending, results, "worker process died", Outcome.ERROR)
                    continue
                for index, (outcome, value, message) in zip(chunk, outcomes, strict=True):
                    results[index] = ItemResult(outcome, value, message)
                idle.append(worker)
            now = time.monotonic()
            for conn, (worker, chunk, deadline) in list(busy.items()):
                if now >= deadline:
                    del busy[conn]
                    idle.append(self._replace(worker, ctx))
                    message = f"exceeded the {self.timeout:g} s time limit"
                    self._settle(chunk, pending, results, message, Outcome.TIMEOUT)
        return [r if r is not None else ItemResult(Outcome.ERROR, None, "lost") for r in results]

    @staticmethod
    def _settle(
        chunk: list[int],
        pending: deque[list[int]],
        results: list[ItemResult | None],
        message: str,
        outcome: Outcome,
    ) -> None:
        """A failed single item gets `outcome`; a failed chunk is retried item by item."""
        if len(chunk) == 1:
            results[chunk[0]] = ItemResult(outcome, None, message)
        else:
            pending.extendleft([i] for i in reversed(chunk))

    def _run_inline(self, item: Any) -> ItemResult:
        try:
            return ItemResult(Outcome.OK, self.fn(item))
        except Exception as err:  # noqa: BLE001 - reported per item
            return ItemResult(Outcome.ERROR, None, f"{type(err).__name__}: {err}"[:500])

    def _replace(self, worker: _Worker, ctx: Any) -> _Worker:
        worker.kill()
        fresh = _Worker(ctx, self.fn)
        self._pool[self._pool.index(worker)] = fresh
        return fresh

    def close(self) -> None:
        """Stop the worker processes (they are also stopped at exit)."""
        self._finalizer()


def _stop_all(pool: list[_Worker]) -> None:
    for worker in pool:
        worker.stop()
    pool.clear()


def default_workers() -> int:
    """Worker processes used when a verifier is given workers=None."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def as_verify_result(result: ItemResult) -> VerifyResult:
    """The VerifyResult a worker returned, or a TIMEOUT / INTERNAL_ERROR result in its place."""
    if result.outcome is Outcome.OK and isinstance(result.value, VerifyResult):
        return result.value
    if result.outcome is Outcome.TIMEOUT:
        return VerifyResult(0.0, False, Status.TIMEOUT, result.message)
    return VerifyResult(0.0, False, Status.INTERNAL_ERROR, result.message or "no result")

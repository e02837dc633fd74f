"""Apply a pure-Python check to a batch in worker processes, each item under a hard deadline.

Used by the tool-call and format verifiers. A thin adapter over the shared `WorkerPool`
(verifiers/core/workers.py), which owns the processes: an item that overruns is killed with its
worker, the worker is replaced, and no other item's result changes. Workers persist between
batches so a training loop does not pay process start-up every step.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from .result import Status, VerifyResult
from .workers import ItemResult, Outcome, WorkerPool

__all__ = ["BatchRunner", "ItemResult", "Outcome", "as_verify_result", "default_workers"]

# Items travel in chunks to amortise the pipe round trip; the pool re-queues the rest of a
# chunk whose item overran, so only the item that really hangs ends up with TIMEOUT.
_MAX_CHUNK = 32


def _no_preparation(shared: Any) -> None:
    return None


class BatchRunner:
    """Apply `fn` to items in `workers` processes with a per-item time limit of `timeout` s.

    `workers=0` runs in this process with no time limit (for debugging and tiny batches).
    """

    def __init__(self, fn: Callable[[Any], Any], workers: int, timeout: float) -> None:
        if workers < 0:
            raise ValueError(f"workers must be >= 0, got {workers}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.fn, self.workers, self.timeout = fn, workers, timeout
        self._pool: WorkerPool | None = None

    def run(self, items: Sequence[Any]) -> list[ItemResult]:
        """Results in input order; never raises because of an item."""
        if self.workers == 0:
            return [self._run_inline(item) for item in items]
        if not items:
            return []
        if self._pool is None or not self._pool.usable:  # first use, or we were forked
            self._pool = WorkerPool(_no_preparation, self._apply, self.workers, memory_limit_mb=None)
        size = max(1, min(_MAX_CHUNK, len(items) // (4 * self.workers)))
        chunks = [(None, list(items[i : i + size])) for i in range(0, len(items), size)]
        return [result for chunk in self._pool.run_chunks(chunks, self.timeout) for result in chunk]

    def _apply(self, _state: None, item: Any) -> Any:
        return self.fn(item)

    def _run_inline(self, item: Any) -> ItemResult:
        try:
            return ItemResult(Outcome.OK, self.fn(item))
        except Exception as err:  # noqa: BLE001 - reported per item
            return ItemResult(Outcome.ERROR, None, f"{type(err).__name__}: {err}"[:500])

    def close(self) -> None:
        """Stop the worker processes (they are also stopped at exit)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def __getstate__(self) -> dict[str, Any]:
        # Live processes stay behind when the runner's owner is sent to another process.
        return {**self.__dict__, "_pool": None}


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
        return VerifyResult(0.0, False, Status.TIMEOUT, result.detail)
    return VerifyResult(0.0, False, Status.INTERNAL_ERROR, result.detail or "no result")

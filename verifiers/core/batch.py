"""Apply a pure-Python check to a batch in worker processes, each item under a hard deadline.

Used by the tool-call and format verifiers. A thin adapter over the shared `WorkerPool`
(verifiers/core/workers.py), which owns the processes: an item that overruns is killed with its
worker, the worker is replaced, and no other item's result changes. Workers persist between
batches so a training loop does not pay process start-up every step.

Hand-off: items travel in chunks pickled with the C pickler. With `references`, an item is
(payload, reference index) and each chunk carries each distinct reference it uses once, so a
group of samples that share a reference sends (and unpickles) that reference once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .result import Status, VerifyResult
from .workers import ItemResult, Outcome, WorkerPool, default_pool_size

__all__ = ["BatchRunner", "ItemResult", "Outcome", "as_verify_result", "chunk_size", "default_workers"]

# Items travel in chunks to amortise the pipe round trip; the pool re-queues the rest of a
# chunk whose item overran, so only the item that really hangs ends up with TIMEOUT.
_MAX_CHUNK = 64


def _no_preparation(shared: Any) -> Any:
    return shared


class BatchRunner:
    """Apply `fn` to items in `workers` processes with a per-item time limit of `timeout` s.

    `fn(item)` without references; `fn(payload, reference)` when `run` gets `references`.
    `workers=0` runs in this process with no time limit (for debugging and tiny batches).
    """

    def __init__(self, fn: Callable[..., Any], workers: int, timeout: float) -> None:
        if workers < 0:
            raise ValueError(f"workers must be >= 0, got {workers}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.fn, self.workers, self.timeout = fn, workers, timeout
        self._pool: WorkerPool | None = None

    def run(self, items: Sequence[Any], references: Sequence[Any] | None = None) -> list[ItemResult]:
        """Results in input order; never raises because of an item.

        With `references`, each item is (payload, index into references).
        """
        if self.workers == 0:
            if references is None:
                return [self._run_inline(self.fn, item) for item in items]
            return [self._run_inline(self.fn, payload, references[ref]) for payload, ref in items]
        if not items:
            return []
        if self._pool is None or not self._pool.usable:  # first use, failed, or we were forked
            self._pool = WorkerPool(_no_preparation, self._apply, self.workers, memory_limit_mb=None)
        size = chunk_size(len(items), self.workers)
        chunks = []
        for lo in range(0, len(items), size):
            part = list(items[lo : lo + size])
            if references is None:
                chunks.append((None, part))
            else:
                chunks.append(({ref: references[ref] for _, ref in part}, part))
        return [result for chunk in self._pool.run_chunks(chunks, self.timeout) for result in chunk]

    def _apply(self, shared: dict[int, Any] | None, item: Any) -> Any:
        if shared is None:
            return self.fn(item)
        payload, ref = item
        return self.fn(payload, shared[ref])

    @staticmethod
    def _run_inline(fn: Callable[..., Any], *args: Any) -> ItemResult:
        try:
            return ItemResult(Outcome.OK, fn(*args))
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


def chunk_size(items: int, workers: int) -> int:
    """Items per chunk: at least four chunks per worker, at most `_MAX_CHUNK` items each."""
    return max(1, min(_MAX_CHUNK, items // (4 * max(1, workers))))


def default_workers() -> int:
    """Worker processes used when a verifier is given workers=None (workers.default_pool_size)."""
    return default_pool_size()


def as_verify_result(result: ItemResult) -> VerifyResult:
    """The VerifyResult a worker returned, or a TIMEOUT / INTERNAL_ERROR result in its place."""
    if result.outcome is Outcome.OK and isinstance(result.value, VerifyResult):
        return result.value
    if result.outcome is Outcome.TIMEOUT:
        return VerifyResult(0.0, False, Status.TIMEOUT, result.detail)
    return VerifyResult(0.0, False, Status.INTERNAL_ERROR, result.detail or "no result")

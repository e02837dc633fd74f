"""MathVerifier: final-answer checking for math completions, exact, hang-proof and batched.

Pipeline per item: prepare the reference (sympy_free.py, once per distinct reference) -> extract
the final answer (extract.py) -> normalise (normalize.py) -> decide with exact rules
(sympy_free.py) -> else judge with sympy (equiv.py) in an isolated worker process
(core/workers.py, WorkerPool) with a hard time limit. The exact steps are bounded,
linear-time string and `fractions` work and run in the caller's process; a completion longer
than `INLINE_CHARS` is handed to a worker whole, so even its extraction runs under the limit.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.result import Status, VerifyResult
from ..core.text import is_truncated
from ..core.workers import ItemResult, Outcome, Submission, WorkerPool
from .equiv import EquivConfig, PercentMode, Verdict
from .extract import (
    EXTRACTION_MODES,
    Extraction,
    ExtractionMethod,
    ExtractionMode,
    extract_answer,
    reference_answer,
)
from .sympy_free import Reference, decide, missing_number, not_one_answer, prepare_reference
from .worker import RawCompletion, judge, preload, reference_state, unpack

__all__ = ["Extraction", "ExtractionMethod", "MathVerifier", "extract_answer", "reference_answer"]

_PERCENT_MODES = ("either", "strip", "divide")
# Extra time a single call may take beyond its limit: queueing, IPC, replacing a worker.
CALL_GRACE_S = 1.0
# Completions longer than this are extracted in a worker, under the time limit: extraction is
# linear (about a second of CPU per MB on the worst inputs), but not free on a loaded machine.
INLINE_CHARS = 32_000
_REFERENCE_KEYS = ("answer", "reference", "ground_truth")
# Undecided items queued before a batch hands them to the workers mid-pass (at a reference
# boundary, so a group of samples stays in one chunk).
_STREAM_AT = 32

# reference normal form -> (reference, {item: [(position, extraction)]}): a group of G samples
# often repeats an answer, and each distinct pair is judged once. An item is a normalised
# prediction, or a long completion handed over whole (its extraction is then None).
_Pending = dict[str, tuple[Reference, dict[str | RawCompletion, list[tuple[int, Extraction | None]]]]]


@dataclass
class _Submitted:
    """Items handed to the pool, and where each result goes back."""

    pool: WorkerPool
    submission: Submission
    owners: list[list[tuple[int, Extraction | None]]]  # item, in queued order -> [(position, extraction)]
    started: float


class MathVerifier:
    """Check a completion's final answer against a reference answer (kind "math").

    Use as a context manager, or call `close()`, to stop the worker processes; an unclosed
    verifier is cleaned up at interpreter exit.
    """

    kind = "math"

    def __init__(
        self,
        workers: int | None = None,
        timeout: float = 5.0,
        numeric_tolerance: float = 0.5,
        percent: PercentMode = "either",
        imaginary_unit: bool = True,
        memory_limit_mb: int | None = 4096,
        extraction: ExtractionMode = "auto",
        inline_chars: int = INLINE_CHARS,
    ) -> None:
        if workers is not None and (not isinstance(workers, int) or workers < 1):
            raise ValueError(f"workers must be a positive integer or None, got {workers!r}")
        if not timeout or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if numeric_tolerance < 0:
            raise ValueError(f"numeric_tolerance must be >= 0, got {numeric_tolerance!r}")
        if percent not in _PERCENT_MODES:
            raise ValueError(f"percent must be one of {_PERCENT_MODES}, got {percent!r}")
        if extraction not in EXTRACTION_MODES:
            raise ValueError(f"extraction must be one of {EXTRACTION_MODES}, got {extraction!r}")
        if isinstance(inline_chars, bool) or not isinstance(inline_chars, int) or inline_chars < 0:
            raise ValueError(f"inline_chars must be an integer >= 0, got {inline_chars!r}")
        # completions longer than this are extracted in a worker; 0 sends every text completion
        # there, which keeps the caller's thread (and its GIL) free: `veristep serve` does that
        self.inline_chars = inline_chars
        self.extraction: ExtractionMode = extraction
        self.workers = workers
        self.timeout = float(timeout)
        self.memory_limit_mb = memory_limit_mb
        self.config = EquivConfig(float(numeric_tolerance), percent, bool(imaginary_unit))
        self._pool: WorkerPool | None = None
        self._pool_lock = threading.Lock()

    # ----------------------------------------------------------------- protocol

    def reference_from_record(self, record: dict[str, Any]) -> Any:
        """The reference answer of a JSONL record: "answer", else "reference" or "ground_truth"."""
        for key in _REFERENCE_KEYS:
            if key in record:
                return _reference_value(record[key])
        raise KeyError("answer")

    def verify(self, completion: str, reference: Any) -> VerifyResult:
        """Verify one completion; returns within `timeout` plus about a second, from any thread."""
        return self._verify_many([completion], [reference], single_call=True)[0]

    def verify_batch(self, completions: Sequence[str], references: Sequence[Any]) -> list[VerifyResult]:
        """Verify many completions in input order; each distinct reference is parsed once."""
        if len(completions) != len(references):
            raise ValueError(
                f"got {len(completions)} completions but {len(references)} references; pass one each"
            )
        return self._verify_many(list(completions), list(references), single_call=False)

    def verify_batch_as_ready(
        self, completions: Sequence[str], references: Sequence[Any]
    ) -> Iterator[list[tuple[int, VerifyResult]]]:
        """`verify_batch`'s verdicts as they are decided: lists of (input position, result).

        Every position comes once: those decided in this process first, then each worker
        result as it lands, so no item waits for a slower one of the same batch.
        """
        if len(completions) != len(references):
            raise ValueError(
                f"got {len(completions)} completions but {len(references)} references; pass one each"
            )
        listener: queue.SimpleQueue = queue.SimpleQueue()
        results, submitted = self._start(list(completions), list(references), False, listener)
        decided = [(pos, res) for pos, res in enumerate(results) if res is not None]
        if decided:
            yield decided
        if not submitted:
            return
        pools = {id(sub.pool) for sub in submitted}
        if len(pools) > 1:  # the pool was replaced mid-batch: collect each submission whole
            for sub in submitted:
                yield self._waited(sub, False)
            return
        for landed in submitted[0].pool.as_ready([sub.submission for sub in submitted]):
            yield [pair for which, flat, item in landed for pair in self._placed(submitted[which], flat, item, False)]

    def close(self) -> None:
        """Stop the worker processes (a later call starts new ones)."""
        pool, self._pool = self._pool, None
        if pool is not None and pool.owner_pid == os.getpid():
            pool.close()

    def __enter__(self) -> MathVerifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def worker_pids(self) -> list[int]:
        """Process ids of the current workers (empty before first use or after close)."""
        return self._pool.worker_pids() if self._pool is not None else []

    # ----------------------------------------------------------------- pipeline

    def _get_pool(self) -> WorkerPool:
        with self._pool_lock:
            # None before first use and after close; unusable when closed, failed, or
            # inherited through fork (its workers belong to the parent)
            if self._pool is None or not self._pool.usable:
                self._pool = WorkerPool(
                    reference_state, judge, self.workers, warm_up=preload,
                    memory_limit_mb=self.memory_limit_mb,
                )
            return self._pool

    @staticmethod
    def _prepare_reference(reference: Any) -> Reference:
        return prepare_reference(reference)

    def _verify_many(self, completions: list[Any], references: list[Any], single_call: bool) -> list[VerifyResult]:
        results, submitted = self._start(completions, references, single_call)
        for sub in submitted:
            for pos, res in self._waited(sub, single_call):
                results[pos] = res
        return [r for r in results if r is not None]

    def _start(
        self, completions: list[Any], references: list[Any], single_call: bool,
        listener: queue.SimpleQueue | None = None,
    ) -> tuple[list[VerifyResult | None], list[_Submitted]]:
        """Decide what this process can; queue the rest on the pool (results at their positions)."""
        start_all = time.monotonic()
        refs: dict[str, Reference] = {}
        results: list[VerifyResult | None] = [None] * len(completions)
        pending: _Pending = {}
        submitted: list[_Submitted] = []
        n_pending, prev_key = 0, None
        for pos, (completion, reference) in enumerate(zip(completions, references, strict=True)):
            t0 = time.perf_counter()
            key = "" if reference is None else str(reference)
            if n_pending >= _STREAM_AT and key != prev_key:
                # hand finished groups to the workers now, so sympy work overlaps with the
                # in-process pass over the rest of the batch
                submitted.append(self._submit(pending, start_all, single_call, listener))
                pending, n_pending = {}, 0
            prev_key = key
            ref = refs.get(key)
            if ref is None:
                ref = refs[key] = self._prepare_reference(reference)
            try:
                res, item = self._fast_path(completion, ref)
            except Exception as exc:  # a bug here must not cost the whole batch
                res, item = _result(Verdict(Status.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"[:200]), None), None
            if res is not None:
                res.timings["total_s"] = time.perf_counter() - t0
                results[pos] = res
            elif item is not None:
                group = pending.setdefault(ref.normalized, (ref, {}))[1]
                if item[0] not in group:
                    n_pending += 1
                group.setdefault(item[0], []).append((pos, item[1]))
        if pending:
            submitted.append(self._submit(pending, start_all, single_call, listener))
        return results, submitted

    def _fast_path(
        self, completion: Any, ref: Reference
    ) -> tuple[VerifyResult | None, tuple[str | RawCompletion, Extraction | None] | None]:
        """Decide in-process when exact rules can; else return the item a worker must judge."""
        if isinstance(completion, str) and len(completion) > self.inline_chars and not ref.problem:
            return None, (RawCompletion(completion, self.extraction, is_truncated(completion)), None)
        decision = decide(completion, ref, self.config, self.extraction)
        if decision.verdict is not None:
            return _result(decision.verdict, decision.extraction), None
        return None, (decision.prediction, decision.extraction)

    def _plan_chunks(
        self, pending: _Pending, workers: int
    ) -> tuple[list[tuple[Any, list[str | RawCompletion]]], list[list[list[tuple[int, Extraction | None]]]]]:
        """Group undecided items into chunks that share one reference (parsed once per chunk).

        A reference's group stays in one chunk unless it is larger than its fair share of the
        batch; then it is cut into at most `workers` pieces so that every core gets work.
        """
        n_items = sum(len(preds) for _, preds in pending.values())
        fair_share = max(1, -(-n_items // workers))
        chunks: list[tuple[Any, list[str | RawCompletion]]] = []
        owners: list[list[list[tuple[int, Extraction | None]]]] = []
        for ref, preds in pending.values():
            items = list(preds.items())
            size = len(items) if len(items) <= fair_share else -(-len(items) // workers)
            for lo in range(0, len(items), size):
                part = items[lo : lo + size]
                chunks.append(((ref, self.config), [item for item, _ in part]))
                owners.append([where for _, where in part])
        return chunks, owners

    def _submit(self, pending: _Pending, start_all: float, single_call: bool,
                listener: queue.SimpleQueue | None) -> _Submitted:
        """Queue undecided items on the pool, grouped by reference; return at once."""
        pool = self._get_pool()
        chunks, owners = self._plan_chunks(pending, pool.size)
        deadline = start_all + self.timeout + CALL_GRACE_S if single_call else None
        return _Submitted(pool, pool.submit(chunks, self.timeout, deadline, listener),
                          [where for owner in owners for where in owner], time.perf_counter())

    def _waited(self, sub: _Submitted, single_call: bool) -> list[tuple[int, VerifyResult]]:
        """Wait for a whole submission; its results at their input positions."""
        items = [item for chunk in sub.pool.wait(sub.submission) for item in chunk]
        return [pair for flat, item in enumerate(items) for pair in self._placed(sub, flat, item, single_call)]

    @staticmethod
    def _placed(sub: _Submitted, flat: int, item: ItemResult, single_call: bool) -> list[tuple[int, VerifyResult]]:
        """One worker outcome (the submission's `flat`-th item) as results at its input positions."""
        found = None
        if item.outcome is Outcome.OK:
            status, detail, close, packed = item.value
            verdict = Verdict(Status(status), detail, close)
            found = unpack(packed)
        elif item.outcome is Outcome.TIMEOUT:
            verdict = Verdict(Status.TIMEOUT, item.detail)
        else:
            verdict = Verdict(Status.INTERNAL_ERROR, item.detail)
        wall = time.perf_counter() - sub.started
        placed = []
        for pos, ext in sub.owners[flat]:
            res = _result(verdict, ext if ext is not None else found)
            res.timings["worker_s"] = item.seconds
            res.timings["total_s"] = wall if single_call else item.seconds
            placed.append((pos, res))
        return placed


def _reference_value(value: Any) -> Any:
    """A record's reference value as `prepare_reference` takes it: text, or None and NaN kept so
    that they are reported unusable (never judged as the answers "None" or "nan"); ValueError
    for a value Python cannot write as text."""
    if value is None or isinstance(value, str) or missing_number(value):
        return value
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (str, int, float)):
        return _reference_value(value[0])  # a numpy column's tolist(), a list of one answer
    several = not_one_answer(value)
    if several is not None:
        raise ValueError(f"{several} (give it as text)")
    try:
        return str(value)
    except (ValueError, RecursionError) as err:  # a huge integer, deep nesting
        raise ValueError(f"reference cannot be written as text ({type(err).__name__})") from None


def _result(verdict: Verdict, ext: Extraction | None) -> VerifyResult:
    """Turn a verdict and the extraction it judged into a VerifyResult."""
    correct = verdict.status is Status.CORRECT
    extra: dict[str, Any] = {}
    if ext is not None:
        extra["extracted_span"] = [ext.start, ext.end]
        extra["extraction_method"] = ext.method.value
    if verdict.numeric_close and not correct:
        extra["numeric_close"] = True
    return VerifyResult(
        reward=1.0 if correct else 0.0,
        correct=correct,
        status=verdict.status,
        detail=verdict.detail,
        extracted=ext.answer if ext is not None else None,
        extra=extra,
    )

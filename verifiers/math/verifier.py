"""MathVerifier: final-answer checking for math completions, exact, hang-proof and batched.

Pipeline per item: extract (extract.py) -> normalise (normalize.py) -> compare
(equiv.py). Extraction, normalisation and exact-number comparison run in the caller's
process: they are bounded string and `fractions` work that cannot hang. Anything that needs
sympy runs in an isolated worker process (core/workers.py, WorkerPool) with a hard time limit.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..core.result import Status, VerifyResult
from ..core.workers import Outcome, Submission, WorkerPool
from .equiv import (
    EquivConfig,
    PercentMode,
    Verdict,
    compare_monomials,
    compare_numbers,
    judge,
    preload,
    reference_state,
)
from .exact import Monomial, has_several_parts, is_word, parse_monomial
from .extract import Extraction, ExtractionMethod, choice_letter, extract_answer
from .normalize import ExactNumber, normalize_answer, parse_exact_number, split_assignment

__all__ = ["Extraction", "ExtractionMethod", "MathVerifier", "extract_answer"]

_PERCENT_MODES = ("either", "strip", "divide")
# Extra time a single call may take beyond its limit: queueing, IPC, replacing a worker.
CALL_GRACE_S = 1.0
# Longest answer we hand to sympy; longer "answers" are padding or attacks, not answers.
_MAX_ANSWER_CHARS = 2000
_REFERENCE_KEYS = ("answer", "reference", "ground_truth")
# Undecided items queued before a batch hands them to the workers mid-pass (at a reference
# boundary, so a group of samples stays in one chunk).
_STREAM_AT = 32


@dataclass(frozen=True)
class _Reference:
    """A reference answer prepared once per batch in the caller's process."""

    raw: str
    normalized: str
    number: ExactNumber | None
    letter: str | None
    rhs: str | None  # right-hand side when the reference is an assignment such as x=3
    monomial: Monomial | None = None  # exact q·√r·π^k value, when the reference is one


@dataclass
class _Submitted:
    """Items handed to the pool, and where each result goes back."""

    pool: WorkerPool
    submission: Submission
    owners: list[list[list[tuple[int, Extraction]]]]  # chunk -> item -> [(position, extraction)]
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
    ) -> None:
        if workers is not None and (not isinstance(workers, int) or workers < 1):
            raise ValueError(f"workers must be a positive integer or None, got {workers!r}")
        if not timeout or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if numeric_tolerance < 0:
            raise ValueError(f"numeric_tolerance must be >= 0, got {numeric_tolerance!r}")
        if percent not in _PERCENT_MODES:
            raise ValueError(f"percent must be one of {_PERCENT_MODES}, got {percent!r}")
        self.workers = workers
        self.timeout = float(timeout)
        self.memory_limit_mb = memory_limit_mb
        self.config = EquivConfig(float(numeric_tolerance), percent, bool(imaginary_unit))
        self._pool: WorkerPool | None = None
        self._pool_lock = threading.Lock()

    # ----------------------------------------------------------------- protocol

    def reference_from_record(self, record: dict[str, Any]) -> str:
        """The reference answer of a JSONL record: "answer", else "reference" or "ground_truth"."""
        for key in _REFERENCE_KEYS:
            if key in record:
                return str(record[key])
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
    def _prepare_reference(reference: Any) -> _Reference:
        raw = "" if reference is None else str(reference)
        extracted = extract_answer(raw) if "\\boxed" in raw or "\\fbox" in raw else None
        text = extracted.answer if extracted else raw
        normalized = normalize_answer(text)
        letter = choice_letter(text) if len(text.strip()) <= 12 else None
        if letter is not None and not _looks_like_choice(text):
            letter = None
        return _Reference(raw, normalized, parse_exact_number(normalized), letter, split_assignment(normalized),
                          parse_monomial(normalized))

    def _verify_many(self, completions: list[Any], references: list[Any], single_call: bool) -> list[VerifyResult]:
        start_all = time.monotonic()
        refs: dict[str, _Reference] = {}
        results: list[VerifyResult | None] = [None] * len(completions)
        # reference -> (reference, {normalised prediction: [(position, extraction)]}): a group
        # of G samples often repeats an answer, and each distinct pair is judged once
        pending: dict[str, tuple[_Reference, dict[str, list[tuple[int, Extraction]]]]] = {}
        submitted: list[_Submitted] = []
        n_pending, prev_key = 0, None
        for pos, (completion, reference) in enumerate(zip(completions, references, strict=True)):
            t0 = time.perf_counter()
            key = "" if reference is None else str(reference)
            if n_pending >= _STREAM_AT and key != prev_key:
                # hand finished groups to the workers now, so sympy work overlaps with the
                # in-process pass over the rest of the batch
                submitted.append(self._submit(pending, start_all, single_call))
                pending, n_pending = {}, 0
            prev_key = key
            ref = refs.get(key)
            if ref is None:
                ref = refs[key] = self._prepare_reference(reference)
            try:
                res, pred = self._fast_path(completion, ref)
            except Exception as exc:  # a bug here must not cost the whole batch
                res, pred = _result(Verdict(Status.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"[:200]), None), None
            if res is not None:
                res.timings["total_s"] = time.perf_counter() - t0
                results[pos] = res
            elif pred is not None:
                group = pending.setdefault(ref.normalized, (ref, {}))[1]
                if pred[0] not in group:
                    n_pending += 1
                group.setdefault(pred[0], []).append((pos, pred[1]))
        if pending:
            submitted.append(self._submit(pending, start_all, single_call))
        for sub in submitted:
            self._collect(sub, results, single_call)
        return [r for r in results if r is not None]

    def _fast_path(self, completion: Any, ref: _Reference) -> tuple[VerifyResult | None, tuple[str, Extraction] | None]:
        """Decide in-process when that is cheap; else return the normalised prediction for a worker."""
        if not isinstance(completion, str):
            return VerifyResult(0.0, False, Status.NO_ANSWER, "completion is not a string"), None
        if not ref.normalized:
            return VerifyResult(0.0, False, Status.PARSE_ERROR, "empty reference answer"), None
        ext = extract_answer(completion, choices=ref.letter is not None)
        if ext is None:
            return VerifyResult(0.0, False, Status.NO_ANSWER, "no final answer found"), None
        if ref.letter is not None:
            letter = choice_letter(ext.answer)
            if letter is None:
                return _result(Verdict(Status.WRONG, "answer is not a choice letter"), ext), None
            return _result(Verdict(Status.CORRECT if letter == ref.letter else Status.WRONG), ext), None
        if len(ext.answer) > _MAX_ANSWER_CHARS:
            return _result(Verdict(Status.PARSE_ERROR, "answer too long to parse"), ext), None
        pred = normalize_answer(ext.answer)
        if not pred:
            return _result(Verdict(Status.NO_ANSWER, "empty final answer"), ext), None
        if pred == ref.normalized:
            return _result(Verdict(Status.CORRECT), ext), None
        pred_rhs = split_assignment(pred)
        if pred_rhs is not None and ref.rhs is None and "=" not in ref.normalized:
            pred = pred_rhs  # "x = 3" answers a question whose reference is "3"
        elif ref.rhs is not None and pred_rhs is None and "=" not in pred:
            ref = _Reference(ref.raw, ref.rhs, parse_exact_number(ref.rhs), None, None, parse_monomial(ref.rhs))
        if pred == ref.normalized:
            return _result(Verdict(Status.CORRECT), ext), None
        pred_num = parse_exact_number(pred)
        if pred_num is not None and ref.number is not None:
            return _result(compare_numbers(ref.number, pred_num, self.config), ext), None
        pred_mono = parse_monomial(pred)
        if pred_mono is not None and ref.monomial is not None:
            decimals = ref.number.decimals if ref.number is not None else None
            return _result(compare_monomials(ref.monomial, pred_mono, decimals, self.config), ext), None
        # a number is never a word, a tuple, a set, an interval union or a matrix
        ref_scalar = ref.number is not None or ref.monomial is not None
        pred_scalar = pred_num is not None or pred_mono is not None
        if (ref_scalar and _is_compound(pred)) or (pred_scalar and _is_compound(ref.normalized)):
            return _result(Verdict(Status.WRONG, "different kind of answer"), ext), None
        return None, (pred, ext)

    def _plan_chunks(
        self, pending: dict[str, tuple[_Reference, dict[str, list[tuple[int, Extraction]]]]], workers: int
    ) -> tuple[list[tuple[Any, list[str]]], list[list[list[tuple[int, Extraction]]]]]:
        """Group undecided items into chunks that share one reference (parsed once per chunk).

        A reference's group stays in one chunk unless it is larger than its fair share of the
        batch; then it is cut into at most `workers` pieces so that every core gets work.
        """
        n_items = sum(len(preds) for _, preds in pending.values())
        fair_share = max(1, -(-n_items // workers))
        chunks: list[tuple[Any, list[str]]] = []
        owners: list[list[list[tuple[int, Extraction]]]] = []
        for ref, preds in pending.values():
            items = list(preds.items())
            size = len(items) if len(items) <= fair_share else -(-len(items) // workers)
            shared = (ref.normalized, ref.number.decimals if ref.number else None, self.config)
            for lo in range(0, len(items), size):
                part = items[lo : lo + size]
                chunks.append((shared, [pred for pred, _ in part]))
                owners.append([where for _, where in part])
        return chunks, owners

    def _submit(
        self,
        pending: dict[str, tuple[_Reference, dict[str, list[tuple[int, Extraction]]]]],
        start_all: float,
        single_call: bool,
    ) -> _Submitted:
        """Queue undecided items on the pool, grouped by reference; return at once."""
        pool = self._get_pool()
        chunks, owners = self._plan_chunks(pending, pool.size)
        deadline = start_all + self.timeout + CALL_GRACE_S if single_call else None
        return _Submitted(pool, pool.submit(chunks, self.timeout, deadline), owners, time.perf_counter())

    @staticmethod
    def _collect(sub: _Submitted, results: list[VerifyResult | None], single_call: bool) -> None:
        """Wait for a submission and turn its item outcomes into results at their positions."""
        outcomes = sub.pool.wait(sub.submission)
        wall = time.perf_counter() - sub.started
        for owner, chunk_results in zip(sub.owners, outcomes, strict=True):
            for where, item in zip(owner, chunk_results, strict=True):
                if item.outcome is Outcome.OK:
                    status, detail, close = item.value
                    verdict = Verdict(Status(status), detail, close)
                elif item.outcome is Outcome.TIMEOUT:
                    verdict = Verdict(Status.TIMEOUT, item.detail)
                else:
                    verdict = Verdict(Status.INTERNAL_ERROR, item.detail)
                for pos, ext in where:
                    res = _result(verdict, ext)
                    res.timings["worker_s"] = item.seconds
                    res.timings["total_s"] = wall if single_call else item.seconds
                    results[pos] = res


def _is_compound(normalized: str) -> bool:
    """A word answer, or one with several parts (tuple, set, union, matrix)."""
    return is_word(normalized) or has_several_parts(normalized)


def _looks_like_choice(text: str) -> bool:
    """A reference names a choice when it is a lone capital letter, optionally "(B)" or "\\text{B}"."""
    return bool(re.fullmatch(r"\s*(?:\\text\{)?\s*\(?\s*[A-J]\s*\)?\s*\}?\s*\.?\s*", text))


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

"""Calibration metrics for step scores: AUROC (+ bootstrap), ECE, Brier, earliest-error F1."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

#: Ways to turn a trace's step scores into one trace score.
AGGREGATIONS: tuple[str, ...] = ("min", "prod", "mean", "last", "geomean")
_GEO_FLOOR = 1e-6  # a zero step score would make the geometric mean -inf in log space


def aggregate(scores: Sequence[float], how: str) -> float:
    """One trace score from its step scores; NaN for a trace with no steps."""
    if how not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {how!r}; use one of {AGGREGATIONS}")
    if len(scores) == 0:
        return float("nan")
    arr = np.asarray(scores, dtype=np.float64)
    if how == "min":
        return float(arr.min())
    if how == "prod":
        return float(np.prod(arr))
    if how == "mean":
        return float(arr.mean())
    if how == "last":
        return float(arr[-1])
    return float(np.exp(np.log(np.clip(arr, _GEO_FLOOR, 1.0)).mean()))


def _ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks with ties given their average rank."""
    order = np.argsort(values, kind="mergesort")
    sorted_vals = values[order]
    ranks = np.empty(len(values), dtype=np.float64)
    # Boundaries of runs of equal values.
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_vals)) + 1]
    ends = np.r_[starts[1:], len(values)]
    avg = (starts + ends + 1) / 2.0  # mean of ranks start+1 .. end
    ranks[order] = np.repeat(avg, ends - starts)
    return ranks


def auroc(scores: Sequence[float], labels: Sequence[bool | int]) -> float:
    """Area under the ROC curve (ties count one half); NaN unless both classes are present.

    It is the probability that a random positive scores above a random negative, computed
    from the Mann-Whitney U statistic.
    """
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    if s.shape != y.shape:
        raise ValueError(f"scores and labels differ in shape: {s.shape} vs {y.shape}")
    n_pos = int(y.sum())
    n_neg = len(y) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    if np.isnan(s).any():
        raise ValueError("auroc got NaN scores; drop traces without steps first")
    rank_sum = _ranks(s)[y].sum()
    return float((rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


@dataclass(frozen=True)
class Estimate:
    """A point estimate with a bootstrap confidence interval."""

    value: float
    low: float
    high: float


def bootstrap(
    metric: Callable[[np.ndarray, np.ndarray], float],
    scores: Sequence[float],
    labels: Sequence[bool | int],
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Estimate:
    """`metric(scores, labels)` with a percentile bootstrap interval over traces.

    Resamples that lose a class (metric NaN) are redrawn from the count; the interval is NaN
    when the metric itself is.
    """
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    value = float(metric(s, y))
    if math.isnan(value) or n_resamples <= 0:
        return Estimate(value, float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    stats = []
    for _ in range(n_resamples):
        idx = rng.integers(0, len(s), len(s))
        stat = metric(s[idx], y[idx])
        if not math.isnan(stat):
            stats.append(stat)
    if not stats:
        return Estimate(value, float("nan"), float("nan"))
    alpha = (1.0 - confidence) / 2
    low, high = np.quantile(stats, [alpha, 1 - alpha])
    return Estimate(value, float(low), float(high))


def expected_calibration_error(
    probs: Sequence[float], labels: Sequence[bool | int], n_bins: int = 10
) -> float:
    """ECE with equal-width bins on [0, 1] (the last bin includes 1.0); NaN on empty input.

    Sum over bins of (bin size / N) * |mean label - mean probability|.
    """
    if len(probs) == 0:
        return float("nan")
    bins = reliability_bins(probs, labels, n_bins)
    n = sum(b.count for b in bins)
    return float(sum(b.count / n * abs(b.observed - b.mean_prob) for b in bins))


def brier_score(probs: Sequence[float], labels: Sequence[bool | int]) -> float:
    """Mean squared error between probability and 0/1 outcome; NaN on empty input."""
    p = np.asarray(probs, dtype=np.float64)
    if len(p) == 0:
        return float("nan")
    return float(np.mean((p - np.asarray(labels, dtype=np.float64)) ** 2))


def first_below(scores: Sequence[float], threshold: float) -> int:
    """Index of the first step scoring below `threshold`, or -1 (no error predicted)."""
    for i, s in enumerate(scores):
        if s < threshold:
            return i
    return -1


@dataclass(frozen=True)
class EarliestErrorF1:
    """ProcessBench's metric: accuracy on erroneous and on error-free traces, harmonic mean."""

    acc_erroneous: float  # NaN when there are no erroneous traces
    acc_correct: float  # NaN when there are no error-free traces
    f1: float  # NaN when either accuracy is undefined
    n_erroneous: int
    n_correct: int


def earliest_error_f1(predicted: Sequence[int], truth: Sequence[int]) -> EarliestErrorF1:
    """Score predicted earliest-error indices (-1 = none) against the true ones.

    An erroneous trace counts only if the exact step is found; an error-free trace counts if
    no error is predicted. With no traces of one kind the F1 is undefined (NaN) rather than
    silently equal to the other accuracy.
    """
    if len(predicted) != len(truth):
        raise ValueError(f"{len(predicted)} predictions for {len(truth)} traces")
    pred = np.asarray(predicted, dtype=np.int64)
    true = np.asarray(truth, dtype=np.int64)
    err = true >= 0
    n_err, n_ok = int(err.sum()), int((~err).sum())
    acc_err = float((pred[err] == true[err]).mean()) if n_err else float("nan")
    acc_ok = float((pred[~err] == -1).mean()) if n_ok else float("nan")
    if math.isnan(acc_err) or math.isnan(acc_ok):
        f1 = float("nan")
    elif acc_err + acc_ok == 0:
        f1 = 0.0
    else:
        f1 = 2 * acc_err * acc_ok / (acc_err + acc_ok)
    return EarliestErrorF1(acc_err, acc_ok, f1, n_err, n_ok)


def candidate_thresholds(step_scores: Sequence[Sequence[float]], limit: int = 200) -> list[float]:
    """Thresholds worth trying: midpoints between distinct step scores (quantiles if many)."""
    values = np.unique(np.concatenate([np.asarray(s, dtype=np.float64) for s in step_scores if len(s)] or [np.zeros(0)]))
    if len(values) > limit:
        values = np.unique(np.quantile(values, np.linspace(0, 1, limit)))
    mids = (values[:-1] + values[1:]) / 2 if len(values) > 1 else np.zeros(0)
    # Below every score (never flag) and above every score (flag the first step).
    edges = [float(values[0]) if len(values) else 0.0, float(values[-1]) + 1e-9 if len(values) else 1.0]
    return sorted({*map(float, mids), *edges, 0.5})


def tune_threshold(step_scores: Sequence[Sequence[float]], truth: Sequence[int]) -> tuple[float, float]:
    """The threshold that maximises earliest-error F1 on these traces, and that F1."""
    best_t, best_f1 = 0.5, -1.0
    for t in candidate_thresholds(step_scores):
        f1 = earliest_error_f1([first_below(s, t) for s in step_scores], truth).f1
        if not math.isnan(f1) and f1 > best_f1:
            best_t, best_f1 = t, f1
    return best_t, (best_f1 if best_f1 >= 0 else float("nan"))


def roc_curve(scores: Sequence[float], labels: Sequence[bool | int]) -> tuple[np.ndarray, np.ndarray]:
    """False- and true-positive rates at every threshold, from (0, 0) to (1, 1).

    Tied scores form one diagonal segment, so the area under the curve equals `auroc`.
    """
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError("a ROC curve needs both classes")
    order = np.argsort(-s, kind="mergesort")
    s, y = s[order], y[order]
    last_of_tie = np.r_[np.flatnonzero(np.diff(s)), len(s) - 1]
    tp = np.cumsum(y)[last_of_tie]
    fp = np.cumsum(~y)[last_of_tie]
    return np.r_[0.0, fp / n_neg], np.r_[0.0, tp / n_pos]


@dataclass(frozen=True)
class ReliabilityBin:
    """One bin of a reliability diagram: mean predicted probability, observed rate, size."""

    low: float
    high: float
    mean_prob: float
    observed: float
    count: int


def reliability_bins(
    probs: Sequence[float], labels: Sequence[bool | int], n_bins: int = 10
) -> list[ReliabilityBin]:
    """The non-empty equal-width bins behind `expected_calibration_error` (same binning).

    ECE = sum over these bins of count / N * |observed - mean_prob|.
    """
    p = np.asarray(probs, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    bins = np.minimum((np.clip(p, 0.0, 1.0) * n_bins).astype(int), n_bins - 1)
    out = []
    for b in np.unique(bins):
        in_bin = bins == b
        out.append(ReliabilityBin(b / n_bins, (b + 1) / n_bins, float(p[in_bin].mean()),
                                  float(y[in_bin].mean()), int(in_bin.sum())))
    return out

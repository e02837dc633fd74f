"""Metric functions against values computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from veristep.prm.metrics import (
    aggregate,
    auroc,
    bootstrap,
    brier_score,
    candidate_thresholds,
    earliest_error_f1,
    expected_calibration_error,
    first_below,
    tune_threshold,
)


def test_auroc_perfect_inverted_and_chance():
    assert auroc([0.9, 0.8, 0.2, 0.1], [1, 1, 0, 0]) == 1.0
    assert auroc([0.1, 0.2, 0.8, 0.9], [1, 1, 0, 0]) == 0.0
    assert auroc([0.5, 0.5, 0.5, 0.5], [1, 0, 1, 0]) == 0.5


def test_auroc_with_ties_by_hand():
    # positives 0.8, 0.5 ; negatives 0.5, 0.2, 0.2
    # pairs: (0.8 vs all 3) = 3 wins; (0.5 vs 0.5) = tie 0.5; (0.5 vs 0.2, 0.2) = 2 wins
    # AUROC = (3 + 0.5 + 2) / (2 * 3) = 5.5 / 6
    assert auroc([0.8, 0.5, 0.5, 0.2, 0.2], [1, 1, 0, 0, 0]) == pytest.approx(5.5 / 6)
    # the same by brute force over all pairs on random data with many ties
    rng = np.random.default_rng(0)
    s = rng.integers(0, 4, 60).astype(float)
    y = rng.integers(0, 2, 60).astype(bool)
    pos, neg = s[y], s[~y]
    brute = np.mean([(p > n) + 0.5 * (p == n) for p in pos for n in neg])
    assert auroc(s, y) == pytest.approx(brute)


def test_auroc_one_class_is_nan():
    assert math.isnan(auroc([0.1, 0.2], [1, 1]))
    assert math.isnan(auroc([], []))
    with pytest.raises(ValueError):
        auroc([0.1], [1, 0])


def test_bootstrap_interval_brackets_value_and_is_seeded():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 200).astype(bool)
    s = y * 0.3 + rng.random(200)
    a = bootstrap(auroc, s, y, n_resamples=200, seed=3)
    b = bootstrap(auroc, s, y, n_resamples=200, seed=3)
    assert a == b
    assert a.low <= a.value <= a.high
    assert 0.5 < a.value < 1.0
    one_class = bootstrap(auroc, [0.1, 0.2], [1, 1], n_resamples=10)
    assert math.isnan(one_class.value) and math.isnan(one_class.low)


def test_ece_bins_by_hand():
    probs = [0.05, 0.15, 0.15, 0.95, 1.0, 0.55]
    labels = [0, 0, 1, 1, 1, 0]
    # bin 0: {0.05 / 0}: |0 - 0.05| = 0.05, weight 1/6
    # bin 1: {0.15/0, 0.15/1}: |0.5 - 0.15| = 0.35, weight 2/6
    # bin 5: {0.55/0}: 0.55, weight 1/6
    # bin 9: {0.95/1, 1.0/1} (1.0 falls into the last bin): |1 - 0.975| = 0.025, weight 2/6
    expected = (0.05 + 2 * 0.35 + 0.55 + 2 * 0.025) / 6
    assert expected_calibration_error(probs, labels, n_bins=10) == pytest.approx(expected)
    assert expected_calibration_error(probs, labels, n_bins=1) == pytest.approx(
        abs(np.mean(labels) - np.mean(probs))
    )
    assert math.isnan(expected_calibration_error([], []))


def test_brier_by_hand():
    assert brier_score([1.0, 0.0, 0.5], [1, 1, 0]) == pytest.approx((0 + 1 + 0.25) / 3)
    assert math.isnan(brier_score([], []))


def test_aggregations():
    s = [0.9, 0.5, 0.8]
    assert aggregate(s, "min") == 0.5
    assert aggregate(s, "prod") == pytest.approx(0.36)
    assert aggregate(s, "mean") == pytest.approx(2.2 / 3)
    assert aggregate(s, "last") == 0.8
    assert aggregate(s, "geomean") == pytest.approx(0.36 ** (1 / 3))
    assert aggregate([0.0, 1.0], "geomean") == pytest.approx(1e-3)  # floored at 1e-6
    assert math.isnan(aggregate([], "min"))
    with pytest.raises(ValueError):
        aggregate(s, "max")


def test_earliest_error_f1_by_hand():
    truth = [2, 0, -1, -1, 1]
    pred = [2, 1, -1, 0, 1]
    r = earliest_error_f1(pred, truth)
    # erroneous: 2 of 3 exact; error-free: 1 of 2 predicted clean
    assert r.acc_erroneous == pytest.approx(2 / 3)
    assert r.acc_correct == pytest.approx(0.5)
    assert r.f1 == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))
    assert (r.n_erroneous, r.n_correct) == (3, 2)


def test_earliest_error_f1_edge_cases():
    no_errors = earliest_error_f1([-1, 0], [-1, -1])
    assert math.isnan(no_errors.acc_erroneous) and no_errors.acc_correct == 0.5
    assert math.isnan(no_errors.f1)  # undefined, not silently 0.5
    only_errors = earliest_error_f1([1], [1])
    assert only_errors.acc_erroneous == 1.0 and math.isnan(only_errors.f1)
    zero = earliest_error_f1([0, 3], [-1, 1])
    assert zero.f1 == 0.0
    with pytest.raises(ValueError):
        earliest_error_f1([1], [])


def test_threshold_tuning():
    scores = [[0.9, 0.3, 0.2], [0.9, 0.8], [0.6, 0.9]]
    truth = [1, -1, 0]
    assert first_below(scores[0], 0.5) == 1
    assert first_below(scores[1], 0.5) == -1
    # at 0.5 trace 3's error (0.6) is missed; any threshold in (0.6, 0.8] finds all three.
    assert earliest_error_f1([first_below(s, 0.5) for s in scores], truth).f1 < 1
    t, f1 = tune_threshold(scores, truth)
    assert 0.6 < t <= 0.8 and f1 == 1.0
    assert 0.5 in candidate_thresholds(scores)

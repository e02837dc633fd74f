"""The batch runner: order, per-item deadlines, failures, worker replacement."""

from __future__ import annotations

import math
import os
import time

import pytest
from veristep.verifiers.core.batch import BatchRunner, Outcome


@pytest.mark.timeout(120)
def test_slow_item_times_out_and_the_rest_still_finish():
    runner = BatchRunner(time.sleep, workers=2, timeout=1.0)
    try:
        start = time.monotonic()
        results = runner.run([0.0, 30.0, 0.0, 0.0])
        assert time.monotonic() - start < 25  # the 30 s item was cut off, not waited for
        assert [r.outcome for r in results] == [Outcome.OK, Outcome.TIMEOUT, Outcome.OK, Outcome.OK]
        assert "time limit" in results[1].detail
        # the killed worker was replaced: the runner keeps working
        assert [r.outcome for r in runner.run([0.0, 0.0, 0.0])] == [Outcome.OK] * 3
    finally:
        runner.close()


@pytest.mark.timeout(120)
def test_errors_are_per_item_and_results_keep_input_order():
    runner = BatchRunner(math.sqrt, workers=2, timeout=30.0)
    try:
        results = runner.run([4.0, -1.0, 9.0, 16.0, 25.0])
    finally:
        runner.close()
    assert [r.outcome for r in results] == [
        Outcome.OK,
        Outcome.ERROR,
        Outcome.OK,
        Outcome.OK,
        Outcome.OK,
    ]
    assert [r.value for r in results if r.outcome is Outcome.OK] == [2.0, 3.0, 4.0, 5.0]
    assert "ValueError" in results[1].detail


@pytest.mark.timeout(120)
def test_a_worker_that_dies_is_reported_and_replaced():
    runner = BatchRunner(os._exit, workers=1, timeout=30.0)
    try:
        results = runner.run([3, 3])
    finally:
        runner.close()
    assert [r.outcome for r in results] == [Outcome.ERROR, Outcome.ERROR]
    assert "died" in results[0].detail


def test_inline_mode_and_configuration_errors():
    runner = BatchRunner(math.sqrt, workers=0, timeout=1.0)
    assert [r.value for r in runner.run([1.0, 4.0])] == [1.0, 2.0]
    assert runner.run([-1.0])[0].outcome is Outcome.ERROR
    assert BatchRunner(math.sqrt, workers=2, timeout=1.0).run([]) == []
    with pytest.raises(ValueError):
        BatchRunner(math.sqrt, workers=-1, timeout=1.0)
    with pytest.raises(ValueError):
        BatchRunner(math.sqrt, workers=1, timeout=0)


@pytest.mark.timeout(120)
def test_a_hanging_item_inside_a_chunk_is_isolated():
    runner = BatchRunner(time.sleep, workers=2, timeout=0.5)
    items = [0.0] * 40
    items[17] = 60.0
    try:
        results = runner.run(items)
    finally:
        runner.close()
    outcomes = [r.outcome for r in results]
    assert outcomes[17] is Outcome.TIMEOUT
    assert outcomes[:17] + outcomes[18:] == [Outcome.OK] * 39


@pytest.mark.timeout(120)
def test_a_dying_chunk_is_retried_item_by_item():
    runner = BatchRunner(_exit_on_negative, workers=1, timeout=30.0)
    try:
        results = runner.run([1, 2, -1, 4, 5, 6, 7, 8])
    finally:
        runner.close()
    assert [r.value for r in results] == [1, 2, None, 4, 5, 6, 7, 8]
    assert results[2].outcome is Outcome.ERROR and "died" in results[2].detail


def _exit_on_negative(x: int) -> int:
    if x < 0:
        os._exit(1)
    return x

"""DifficultyTracker: EMA success, easy/frontier/hard classes, sampling weights, checkpoint round trips."""

from __future__ import annotations

import json

import pytest
import torch
from veristep.gating import Difficulty, DifficultyTracker


def test_ema_and_routing():
    tracker = DifficultyTracker(alpha=0.5, easy_threshold=0.8, hard_threshold=0.2)
    tracker.update(["a", "b", "c"], [1.0, 0.0, 0.5])
    assert tracker.by_difficulty() == {"easy": ["a"], "frontier": ["c"], "hard": ["b"]}
    tracker.update(["a", "b"], [0.0, 1.0])  # 0.5 * new + 0.5 * old
    assert tracker.success("a") == 0.5 and tracker.success("b") == 0.5
    assert tracker.difficulty_of("a") is Difficulty.FRONTIER
    assert tracker.difficulty_of("never-seen") is Difficulty.FRONTIER
    assert tracker.success("never-seen") is None


def test_sample_weights_follow_difficulty():
    tracker = DifficultyTracker(weights={"easy": 0.0, "hard": 2.0})
    tracker.update(torch.tensor([1, 2, 3]), torch.tensor([1.0, 0.0, 0.5]))
    assert tracker.sample_weights().tolist() == [0.0, 2.0, 1.0]
    assert tracker.sample_weights([3, 99, 1]).tolist() == [1.0, 1.0, 0.0]
    assert tracker.sample_weights().dtype == torch.float64


def test_min_updates_keeps_new_prompts_in_frontier():
    tracker = DifficultyTracker(min_updates=2)
    tracker.update(["x"], [1.0])
    assert tracker.difficulty_of("x") is Difficulty.FRONTIER
    tracker.update(["x"], [1.0])
    assert tracker.difficulty_of("x") is Difficulty.EASY


def test_state_dict_round_trips_through_json():
    tracker = DifficultyTracker(alpha=0.25, easy_threshold=0.7, weights={"easy": 0.3})
    tracker.update([1, "two", 3], [0.9, 0.05, 0.4])
    tracker.update([1], [0.2])
    state = json.loads(json.dumps(tracker.state_dict()))
    restored = DifficultyTracker()
    restored.load_state_dict(state)
    assert restored.by_difficulty() == tracker.by_difficulty()
    assert restored.sample_weights().tolist() == tracker.sample_weights().tolist()
    assert restored.success(1) == tracker.success(1) and restored.alpha == 0.25
    restored.update([1], [1.0])
    tracker.update([1], [1.0])
    assert restored.success(1) == tracker.success(1)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"alpha": 0.0}, "alpha must be in"),
        ({"easy_threshold": 0.1, "hard_threshold": 0.5}, "hard_threshold < easy_threshold"),
        ({"weights": {"medium": 1.0}}, "weights key 'medium'"),
        ({"weights": {"easy": -1.0}}, "finite and >= 0"),
    ],
)
def test_bad_configuration(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DifficultyTracker(**kwargs)


def test_bad_updates():
    tracker = DifficultyTracker()
    with pytest.raises(ValueError, match="2 prompt ids but 1"):
        tracker.update(["a", "b"], [0.5])
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        tracker.update(["a"], [float("nan")])
    with pytest.raises(ValueError, match="version"):
        tracker.load_state_dict({"version": 99})

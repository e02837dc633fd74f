"""PromptPool: EMA success, pool routing, sampling weights and checkpoint round trips."""

from __future__ import annotations

import json

import pytest
import torch
from veristep.gating import Pool, PromptPool


def test_ema_and_routing():
    pool = PromptPool(alpha=0.5, easy_threshold=0.8, hard_threshold=0.2)
    pool.update(["a", "b", "c"], [1.0, 0.0, 0.5])
    assert pool.pools() == {"easy": ["a"], "frontier": ["c"], "hard": ["b"]}
    pool.update(["a", "b"], [0.0, 1.0])  # 0.5 * new + 0.5 * old
    assert pool.success("a") == 0.5 and pool.success("b") == 0.5
    assert pool.pool_of("a") is Pool.FRONTIER
    assert pool.pool_of("never-seen") is Pool.FRONTIER
    assert pool.success("never-seen") is None


def test_sample_weights_follow_pools():
    pool = PromptPool(weights={"easy": 0.0, "hard": 2.0})
    pool.update(torch.tensor([1, 2, 3]), torch.tensor([1.0, 0.0, 0.5]))
    assert pool.sample_weights().tolist() == [0.0, 2.0, 1.0]
    assert pool.sample_weights([3, 99, 1]).tolist() == [1.0, 1.0, 0.0]
    assert pool.sample_weights().dtype == torch.float64


def test_min_updates_keeps_new_prompts_in_frontier():
    pool = PromptPool(min_updates=2)
    pool.update(["x"], [1.0])
    assert pool.pool_of("x") is Pool.FRONTIER
    pool.update(["x"], [1.0])
    assert pool.pool_of("x") is Pool.EASY


def test_state_dict_round_trips_through_json():
    pool = PromptPool(alpha=0.25, easy_threshold=0.7, weights={"easy": 0.3})
    pool.update([1, "two", 3], [0.9, 0.05, 0.4])
    pool.update([1], [0.2])
    state = json.loads(json.dumps(pool.state_dict()))
    restored = PromptPool()
    restored.load_state_dict(state)
    assert restored.pools() == pool.pools()
    assert restored.sample_weights().tolist() == pool.sample_weights().tolist()
    assert restored.success(1) == pool.success(1) and restored.alpha == 0.25
    restored.update([1], [1.0])
    pool.update([1], [1.0])
    assert restored.success(1) == pool.success(1)


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
        PromptPool(**kwargs)


def test_bad_updates():
    pool = PromptPool()
    with pytest.raises(ValueError, match="2 prompt ids but 1"):
        pool.update(["a", "b"], [0.5])
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        pool.update(["a"], [float("nan")])
    with pytest.raises(ValueError, match="version"):
        pool.load_state_dict({"version": 99})

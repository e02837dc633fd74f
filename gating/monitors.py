"""Collapse monitors: which groups carry no outcome signal, and batch-level rates (cost ~0)."""

from __future__ import annotations

import torch

from .checks import check_rewards
from .groups import collapse_rates, collapsed


def collapse_mask(rewards: torch.Tensor, tau: float = 0.0) -> torch.Tensor:
    """bool[N]: group n collapsed, i.e. its rewards [N, G] are all equal (isclose) or pop std <= tau."""
    return collapsed(check_rewards(rewards), tau)


def collapse_stats(
    rewards: torch.Tensor, tau: float = 0.0, low: float = 0.0, high: float = 1.0
) -> dict[str, torch.Tensor]:
    """Like `collapse_metrics` but returns 0-dim tensors, for callers that batch their syncs."""
    return collapse_rates(check_rewards(rewards), tau, low, high)


def collapse_metrics(
    rewards: torch.Tensor, tau: float = 0.0, low: float = 0.0, high: float = 1.0
) -> dict[str, float]:
    """Batch monitors of rewards [N, G]: acr, all_wrong_rate, all_correct_rate, reward_mean/std, pass@1/G.

    `low` / `high` are the wrong / correct reward levels (at-or-below `low` counts as wrong).
    An empty batch (N = 0) gives NaN everywhere.
    """
    stats = collapse_stats(rewards, tau, low, high)
    values = torch.stack(list(stats.values())).tolist()  # one host sync for all of them
    return dict(zip(stats.keys(), (float(v) for v in values), strict=True))

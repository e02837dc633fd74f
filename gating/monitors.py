"""Collapse monitors: which groups carry no outcome signal, and batch-level rates (cost ~0)."""

from __future__ import annotations

import torch

from ._common import as_float, at_or_beyond, check_finite, check_shape, flat_groups, group_moments


def _check_rewards(rewards: torch.Tensor, name: str = "rewards") -> torch.Tensor:
    """Validate a [N, G] reward tensor and return it as floats."""
    rewards = as_float(rewards, name)
    check_shape(name, rewards, "N, G", min_last=1)
    check_finite(name, rewards)
    return rewards


def collapse_mask(rewards: torch.Tensor, tau: float = 0.0) -> torch.Tensor:
    """bool[N]: group n collapsed, i.e. its rewards [N, G] are all equal (isclose) or pop std <= tau."""
    rewards = _check_rewards(rewards)
    return _collapse(rewards, tau)


def _collapse(rewards: torch.Tensor, tau: float) -> torch.Tensor:
    """collapse_mask without validation, for callers that already checked."""
    if tau < 0:
        raise ValueError(f"tau must be >= 0, got {tau}")
    flat = flat_groups(rewards)
    if tau == 0:
        return flat
    _, std, _ = group_moments(rewards, None, ddof=0)
    return flat | (std <= tau)


def collapse_stats(
    rewards: torch.Tensor, tau: float = 0.0, low: float = 0.0, high: float = 1.0
) -> dict[str, torch.Tensor]:
    """Like `collapse_metrics` but returns 0-dim tensors, for callers that batch their syncs."""
    return _collapse_stats(_check_rewards(rewards), tau, low, high)


def _collapse_stats(
    rewards: torch.Tensor, tau: float, low: float, high: float
) -> dict[str, torch.Tensor]:
    """collapse_stats without validating the rewards."""
    if not high > low:
        raise ValueError(f"need high > low, got low={low}, high={high}")
    collapsed = _collapse(rewards, tau)
    all_wrong = collapsed & at_or_beyond(rewards, low, above=False).all(-1)
    all_correct = collapsed & at_or_beyond(rewards, high, above=True).all(-1)
    correct = at_or_beyond(rewards, high, above=True)
    dtype = rewards.dtype
    return {
        "acr": collapsed.to(dtype).mean(),
        "all_wrong_rate": all_wrong.to(dtype).mean(),
        "all_correct_rate": all_correct.to(dtype).mean(),
        "reward_mean": rewards.mean(),
        # Population std over the whole batch: defined even for a single reward.
        "reward_std": (
            rewards.std(correction=0)
            if rewards.numel()
            else torch.full((), torch.nan, dtype=dtype, device=rewards.device)
        ),
        "pass_at_1": correct.to(dtype).mean(),
        "pass_at_g": correct.any(-1).to(dtype).mean(),
    }


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

"""DAPO pieces (Yu et al. 2025): dynamic sampling, overlong shaping and the clipped surrogate.

`clipped_surrogate` is PPO's per-token objective with separate low / high clip (DAPO's
clip-higher when eps_high > eps_low); the trainer's loss (veristep.train.loss) is built on it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .checks import check_rewards
from .groups import collapsed


def dynamic_sampling_keep(rewards: torch.Tensor, tau: float = 0.0) -> torch.Tensor:
    """bool[N]: keep the groups of rewards [N, G] whose rewards differ (accuracy not 0 or 1).

    The trainer keeps sampling until it has enough kept groups and reports the extra rollouts.
    """
    rewards = check_rewards(rewards)
    if rewards.shape[1] < 2:
        raise ValueError(
            f"dynamic sampling needs G >= 2 samples per prompt (got G={rewards.shape[1]}): "
            "a single sample is always collapsed, so no group would ever be kept"
        )
    return ~collapsed(rewards, tau)


def overlong_penalty(
    lengths: torch.Tensor | Sequence[int], max_len: int, cache_len: int
) -> torch.Tensor:
    """DAPO soft overlong reward: 0 up to max_len - cache_len, linear to -1 at max_len, -1 beyond."""
    if not 0 < cache_len <= max_len:
        raise ValueError(
            f"need 0 < cache_len <= max_len, got cache_len={cache_len}, max_len={max_len}"
        )
    length = torch.as_tensor(lengths)
    if not length.is_floating_point():
        length = length.to(torch.get_default_dtype())
    start = max_len - cache_len
    ramp = (start - length) / cache_len
    penalty = torch.where(length <= start, torch.zeros_like(length), ramp)
    return torch.where(length > max_len, torch.full_like(length, -1.0), penalty)


def clipped_surrogate(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
) -> torch.Tensor:
    """Per-token PPO objective to maximise: min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A).

    `ratio` is pi_theta / pi_old (the sampling policy, not the reference); DAPO's clip-higher
    is eps_high > eps_low. Where the clipped term is chosen the gradient w.r.t. rho is 0.
    """
    if eps_low < 0 or eps_high < 0 or eps_low >= 1:
        raise ValueError(f"need 0 <= eps_low < 1 and eps_high >= 0, got {eps_low}, {eps_high}")
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    return torch.minimum(ratio * advantages, clipped * advantages)

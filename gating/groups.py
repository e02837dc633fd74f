"""Group statistics on checked tensors: flatness, moments, normalisation, collapse and its rates.

Inputs are assumed validated (see `checks`): the public estimators check once and then call
these, so no check (and no host sync) runs twice.
"""

from __future__ import annotations

import torch

from .checks import check_non_negative

# Two values count as equal when torch.isclose says so with its defaults; the plain-Python
# reference (veristep.gating.spec_loops) uses the same two numbers.
RTOL = 1e-5
ATOL = 1e-8


def flat_groups(values: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """bool[N]: the valid entries of each row of `values` [N, ...] are all equal (isclose).

    Rows with no valid entry count as flat.
    """
    v = values.flatten(1)
    if mask is None:
        if v.shape[1] == 0:
            return torch.ones(v.shape[0], dtype=torch.bool, device=v.device)
        hi, lo = v.amax(-1), v.amin(-1)
    else:
        m = mask.reshape(v.shape)
        if v.shape[1] == 0:
            return torch.ones(v.shape[0], dtype=torch.bool, device=v.device)
        hi = torch.where(m, v, -torch.inf).amax(-1)
        lo = torch.where(m, v, torch.inf).amin(-1)
        empty = ~m.any(-1)
        hi = torch.where(empty, 0.0, hi)
        lo = torch.where(empty, 0.0, lo)
    return (hi - lo).abs() <= ATOL + RTOL * lo.abs()


def group_moments(
    values: torch.Tensor, mask: torch.Tensor | None, ddof: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row mean, std and deviation of `values` [N, ...] over valid entries (0 where masked).

    A row with count <= ddof has std 0 (its deviations are 0 as well). Half-precision input is
    summed in float32: a group's sum of squares passes float16's 65,504 at ordinary values (64
    suffix sums of 40 step scores), and every deviation divided by the inf std became 0. The
    results come back in the input's dtype.
    """
    v = values.flatten(1)
    if v.dtype in (torch.float16, torch.bfloat16):
        mean, std, dev = group_moments(values.float(), mask, ddof)
        return mean.to(values.dtype), std.to(values.dtype), dev.to(values.dtype)
    if mask is None:
        count = torch.full((v.shape[0], 1), v.shape[1], dtype=v.dtype, device=v.device)
        v0 = v
    else:
        m = mask.reshape(v.shape)
        count = m.sum(-1, keepdim=True).to(v.dtype)
        v0 = torch.where(m, v, 0.0)
    mean = v0.sum(-1, keepdim=True) / count.clamp(min=1)
    dev = v0 - mean if mask is None else torch.where(m, v0 - mean, 0.0)
    var = dev.square().sum(-1, keepdim=True) / (count - ddof).clamp(min=1)
    return mean.squeeze(-1), var.sqrt().squeeze(-1), dev.reshape(values.shape)


def group_normalise(
    values: torch.Tensor,
    mask: torch.Tensor | None,
    ddof: int,
    eps: float,
    *,
    scale: bool = True,
) -> torch.Tensor:
    """(x - mean) / (std + eps) per row of `values` [N, ...] over its valid entries.

    Masked entries and rows whose valid values are all equal get exactly 0, so float
    round-off in the mean never turns a collapsed group into a tiny spurious signal.
    With scale=False only the mean is removed (Dr. GRPO).
    """
    _, std, dev = group_moments(values, mask, ddof)
    if scale:
        shape = (values.shape[0],) + (1,) * (values.dim() - 1)
        dev = dev / (std.reshape(shape) + eps)
    flat = flat_groups(values, mask).reshape((values.shape[0],) + (1,) * (values.dim() - 1))
    return torch.where(flat, torch.zeros((), dtype=dev.dtype, device=dev.device), dev)


def at_or_beyond(values: torch.Tensor, bound: float, above: bool) -> torch.Tensor:
    """bool mask: value >= bound (above=True) or <= bound, counting isclose as equal."""
    close = (values - bound).abs() <= ATOL + RTOL * abs(bound)
    return close | (values >= bound if above else values <= bound)


def collapsed(rewards: torch.Tensor, tau: float) -> torch.Tensor:
    """bool[N]: the groups of checked rewards [N, G] that collapsed (all equal, or pop std <= tau)."""
    check_non_negative("tau", tau)
    flat = flat_groups(rewards)
    if tau == 0:
        return flat
    _, std, _ = group_moments(rewards, None, ddof=0)
    return flat | (std <= tau)


def collapse_rates(
    rewards: torch.Tensor, tau: float, low: float, high: float
) -> dict[str, torch.Tensor]:
    """Batch rates of checked rewards [N, G] as 0-dim tensors (see monitors.collapse_metrics)."""
    if not high > low:
        raise ValueError(f"need high > low, got low={low}, high={high}")
    is_collapsed = collapsed(rewards, tau)
    all_wrong = is_collapsed & at_or_beyond(rewards, low, above=False).all(-1)
    all_correct = is_collapsed & at_or_beyond(rewards, high, above=True).all(-1)
    correct = at_or_beyond(rewards, high, above=True)
    dtype = rewards.dtype
    return {
        "acr": is_collapsed.to(dtype).mean(),
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

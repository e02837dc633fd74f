"""PRM-as-outcome: the baseline that replaces the verifier's reward by an aggregated PRM score."""

from __future__ import annotations

import torch

from .checks import as_bool, as_float, check_finite
from .options import Agg, parse_option


def prm_as_outcome_rewards(
    step_scores: torch.Tensor,
    step_mask: torch.Tensor,
    agg: str = "min",
    empty: float = 0.0,
) -> torch.Tensor:
    """Fold step scores [..., S] into one reward per response [...] (min, prod, mean or last).

    Only valid (unmasked) steps count; a response with no valid step gets `empty`.
    Typical use: rewards [N, G] from step_scores [N, G, S], then outcome_advantages.
    """
    scores = as_float(step_scores, "step_scores")
    if scores.dim() < 1:
        raise ValueError("step_scores must have a step dimension, e.g. shape [N, G, S]")
    if step_mask.shape != scores.shape:
        raise ValueError(
            f"step_mask shape {tuple(step_mask.shape)} != step_scores {tuple(scores.shape)}"
        )
    if step_mask.device != scores.device:
        raise ValueError(f"step_mask is on {step_mask.device} but step_scores on {scores.device}")
    how = parse_option(Agg, agg, "agg")
    mask = as_bool(step_mask, "step_mask")
    check_finite("step_scores", scores, mask)
    count = mask.sum(-1)
    if scores.shape[-1] == 0:
        return torch.full(scores.shape[:-1], float(empty), dtype=scores.dtype, device=scores.device)
    if how is Agg.MIN:
        out = torch.where(mask, scores, torch.inf).amin(-1)
    elif how is Agg.PROD:
        out = torch.where(mask, scores, 1.0).prod(-1)
    elif how is Agg.MEAN:
        out = torch.where(mask, scores, 0.0).sum(-1) / count.clamp(min=1)
    else:
        positions = torch.arange(scores.shape[-1], device=scores.device)
        last = torch.where(mask, positions, -1).amax(-1, keepdim=True).clamp(min=0)
        out = torch.gather(scores, -1, last).squeeze(-1)
    return torch.where(count > 0, out, torch.full_like(out, float(empty)))

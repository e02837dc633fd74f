"""The trainer's loss: the clipped objective of `veristep.gating.clipped_surrogate`, k3 KL, aggregation.

Per token t of a completion: rho_t = pi_theta / pi_old,
    l_t = -min(rho_t A_t, clip(rho_t, 1 - eps_low, 1 + eps_high) A_t) + kl_coef * k3_t,
    k3_t = exp(ref_t - logp_t) - (ref_t - logp_t) - 1.
The batch loss is sum_t w_t l_t with weights from `aggregation_weights`, whose denominators are
counted over the whole (global) mini-batch so micro-batching and data parallelism do not change
the gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from veristep.gating import clipped_surrogate


def aggregation_weights(mask: torch.Tensor, agg: str, total_tokens: float, total_seqs: float,
                        constant: float | None = None) -> torch.Tensor:
    """Token weights `[B, T]` of the loss aggregation over a mini-batch.

    token-mean: 1 / (tokens in the mini-batch); sequence-mean: 1 / (len_b * sequences);
    constant: 1 / (sequences * constant) (Dr. GRPO; `constant` = max completion length);
    winner-constant: the same formula, where the caller counts `total_seqs` as G per group
    with a positive advantage (WAPO), so groups without a winner do not dilute the others.
    """
    mask = mask.float()
    if agg == "token-mean":
        return mask / max(total_tokens, 1.0)
    if agg == "sequence-mean":
        lengths = mask.sum(-1, keepdim=True).clamp(min=1.0)
        return mask / lengths / max(total_seqs, 1.0)
    if agg in ("constant", "winner-constant"):
        if constant is None:
            raise ValueError(f"loss aggregation {agg!r} needs a constant normaliser")
        return mask / (max(total_seqs, 1.0) * constant)
    raise ValueError(f"unknown loss aggregation {agg!r}: use token-mean, sequence-mean, constant "
                     "or winner-constant")


@dataclass
class LossTerms:
    """One micro-batch's contribution: the loss to backpropagate and weighted sums to log."""

    loss: torch.Tensor  # scalar, already weighted (sum over micro-batches = mini-batch loss)
    policy: float  # weighted policy term
    kl: float  # weighted KL term (before the coefficient)
    clipped_low: float  # count of tokens clipped below with A < 0
    clipped_high: float  # count of tokens clipped above with A > 0
    tokens: float  # count of real tokens
    ratio_dev: float = 0.0  # sum over real tokens of |pi_theta / pi_old - 1| (0 on a batch's first update)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(pi_theta || pi_ref): exp(d) - d - 1 with d = ref - logp."""
    d = (ref_logp - logp).clamp(-20.0, 20.0)  # exp overflow guard on wild early ratios
    return torch.exp(d) - d - 1.0


def clipped_policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                        mask: torch.Tensor, weights: torch.Tensor, eps_low: float, eps_high: float,
                        ref_logp: torch.Tensor | None = None, kl_coef: float = 0.0) -> LossTerms:
    """Clipped-ratio loss of one micro-batch; all tensors `[B, T]`, `weights` from aggregation."""
    mask = mask.float()
    ratio = torch.exp((logp - old_logp).clamp(-20.0, 20.0))
    per_token = -clipped_surrogate(ratio, advantages, eps_low, eps_high)
    policy = (per_token * weights).sum()
    loss = policy
    kl_value = 0.0
    if ref_logp is not None:
        kl = k3_kl(logp, ref_logp)
        kl_sum = (kl * weights).sum()
        kl_value = float(kl_sum.detach())
        if kl_coef:
            loss = loss + kl_coef * kl_sum
    with torch.no_grad():
        low = ((ratio < 1.0 - eps_low) & (advantages < 0)).float() * mask
        high = ((ratio > 1.0 + eps_high) & (advantages > 0)).float() * mask
        ratio_dev = float(((ratio - 1.0).abs() * mask).sum())
    return LossTerms(loss=loss, policy=float(policy.detach()), kl=kl_value,
                     clipped_low=float(low.sum()), clipped_high=float(high.sum()),
                     tokens=float(mask.sum()), ratio_dev=ratio_dev)

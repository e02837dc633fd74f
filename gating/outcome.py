"""Outcome-only advantage estimators: GRPO, Dr. GRPO, sign, winner-only (WAPO) and AVSPO."""

from __future__ import annotations

from typing import Any

import torch

from .checks import check_non_negative, check_rewards, is_finite_number
from .groups import collapsed, group_normalise
from .options import OutcomeMethod, Std, VirtualValue, parse_option

# Options each method accepts besides std/eps; anything else is a configuration error.
_METHOD_OPTIONS: dict[OutcomeMethod, frozenset[str]] = {
    OutcomeMethod.GRPO: frozenset(),
    OutcomeMethod.DR_GRPO: frozenset(),
    OutcomeMethod.WAPO: frozenset(),
    OutcomeMethod.SIGN: frozenset({"low", "high"}),
    OutcomeMethod.AVSPO: frozenset(
        {"virtual", "virtual_value", "low", "high", "tau", "acr_threshold", "generator"}
    ),
}


def outcome_advantages(
    rewards: torch.Tensor,
    method: str = "grpo",
    std: str = "sample",
    eps: float = 1e-4,
    **method_options: Any,
) -> torch.Tensor:
    """Per-sample advantages [N, G] from outcome rewards [N, G] by one estimator.

    Methods (defined in docs/gating-spec.md):
      - ``grpo``: (r - mean) / (std + eps) per group.
      - ``dr_grpo``: r - mean (no std).
      - ``sign``: 2 (r - low) / (high - low) - 1, i.e. 2r - 1 for binary r; no group statistics.
        Options ``low=0.0``, ``high=1.0``.
      - ``wapo``: r - mean, with every non-winner (advantage <= 0) set to 0.
      - ``avspo``: GRPO, except that a collapsed group gets one virtual reward appended before
        its mean and std are taken; only the G real samples get advantages. Options:
        ``virtual="opposite"`` (released rule: ``high`` for a group at or below the midpoint
        of [low, high], ``low`` otherwise) | ``"fixed"`` (``virtual_value``, default 0.5) |
        ``"random"`` (uniform in [low, high], drawn per group from ``generator``);
        ``tau`` (collapse threshold, default 0); ``acr_threshold`` (apply the virtual sample
        only when the batch ACR exceeds it; default None = always).
    A group whose rewards are all equal gets exactly 0 from grpo, dr_grpo and wapo.
    """
    rewards = check_rewards(rewards)
    method = parse_option(OutcomeMethod, method, "method")
    ddof = parse_option(Std, std, "std").ddof
    check_non_negative("eps", eps)
    unknown = set(method_options) - _METHOD_OPTIONS[method]
    if unknown:
        allowed = ", ".join(sorted(_METHOD_OPTIONS[method])) or "none"
        raise ValueError(
            f"method {method.value!r} does not take option(s) {', '.join(sorted(unknown))}; "
            f"it accepts: {allowed}"
        )

    if method is OutcomeMethod.GRPO:
        return group_normalise(rewards, None, ddof, eps)
    if method is OutcomeMethod.DR_GRPO:
        return group_normalise(rewards, None, ddof, eps, scale=False)
    if method is OutcomeMethod.WAPO:
        centred = group_normalise(rewards, None, ddof, eps, scale=False)
        return torch.where(centred > 0, centred, torch.zeros_like(centred))
    if method is OutcomeMethod.SIGN:
        low, high = _bounds(method_options)
        return 2.0 * (rewards - low) / (high - low) - 1.0
    return _avspo(rewards, ddof, eps, **method_options)


def _bounds(options: dict[str, Any]) -> tuple[float, float]:
    """The (low, high) reward levels from method options, validated."""
    low, high = float(options.get("low", 0.0)), float(options.get("high", 1.0))
    if not high > low:
        raise ValueError(f"need high > low, got low={low}, high={high}")
    return low, high


def _avspo(
    rewards: torch.Tensor,
    ddof: int,
    eps: float,
    virtual: str = "opposite",
    virtual_value: float = 0.5,
    tau: float = 0.0,
    acr_threshold: float | None = None,
    generator: torch.Generator | None = None,
    **bounds: float,
) -> torch.Tensor:
    """AVSPO advantages: GRPO with one virtual reward appended to each collapsed group."""
    kind = parse_option(VirtualValue, virtual, "virtual")
    low, high = _bounds(bounds)
    n = rewards.shape[0]
    is_collapsed = collapsed(rewards, tau)
    if kind is VirtualValue.OPPOSITE:
        level = rewards.mean(-1)
        v = torch.where(level <= (low + high) / 2, high, low).to(rewards.dtype)
    elif kind is VirtualValue.FIXED:
        if not is_finite_number(virtual_value):
            raise ValueError(f"virtual_value must be a finite number, got {virtual_value!r}")
        v = torch.full((n,), float(virtual_value), dtype=rewards.dtype, device=rewards.device)
    else:
        u = torch.rand(n, generator=generator, dtype=rewards.dtype, device=rewards.device)
        v = low + (high - low) * u
    augmented = torch.cat([rewards, v.unsqueeze(-1)], dim=-1)
    # The virtual column is dropped after normalising: it shifts the statistics, gets no gradient.
    with_virtual = group_normalise(augmented, None, ddof, eps)[:, :-1]
    plain = group_normalise(rewards, None, ddof, eps)
    use = is_collapsed
    if acr_threshold is not None:
        # A 0-dim comparison instead of a Python `if` keeps this free of host syncs.
        use = use & (is_collapsed.to(rewards.dtype).mean() > acr_threshold)
    return torch.where(use.unsqueeze(-1), with_virtual, plain)

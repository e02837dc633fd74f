"""Input validation of the gating functions: dtypes, shapes, devices, finiteness, index ranges.

Each public estimator validates its inputs once with these and then calls the kernels of
`groups` on the checked tensors.
"""

from __future__ import annotations

import math
import numbers

import torch


def is_finite_number(value: object) -> bool:
    """Whether `value` is a finite real number (numpy scalars too; a bool is not one)."""
    return not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)


def check_non_negative(name: str, value: float) -> None:
    """Raise a ValueError unless `value` is a finite real number >= 0 (NaN passed `value < 0`)."""
    if not (is_finite_number(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def as_float(t: torch.Tensor, name: str) -> torch.Tensor:
    """Return `t` as a floating tensor (bool/int rewards become the default float dtype)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.is_floating_point():
        return t
    if t.is_complex():
        raise TypeError(f"{name} must be real, got dtype {t.dtype}")
    return t.to(torch.get_default_dtype())


def as_bool(t: torch.Tensor, name: str) -> torch.Tensor:
    """Return a mask as a bool tensor; accepts bool or 0/1 integer tensors."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    return t if t.dtype == torch.bool else t != 0


def check_shape(name: str, t: torch.Tensor, dims: str, *, min_last: int = 0) -> None:
    """Raise a ValueError unless `t` has len(dims.split(',')) dimensions."""
    names = [d.strip() for d in dims.split(",")]
    if t.dim() != len(names):
        raise ValueError(
            f"{name} must have shape [{', '.join(names)}], got {tuple(t.shape)} "
            f"({t.dim()} dims instead of {len(names)})"
        )
    if t.shape[-1] < min_last:
        raise ValueError(f"{name} needs at least {min_last} along {names[-1]}, got {tuple(t.shape)}")


def check_prefix(name: str, t: torch.Tensor, ref_name: str, ref: torch.Tensor, n: int) -> None:
    """Raise unless the first `n` sizes of `t` equal those of `ref` and both share a device."""
    if tuple(t.shape[:n]) != tuple(ref.shape[:n]):
        raise ValueError(
            f"{name} has shape {tuple(t.shape)} but {ref_name} has {tuple(ref.shape)}: "
            f"the first {n} sizes must agree"
        )
    if t.device != ref.device:
        raise ValueError(f"{name} is on {t.device} but {ref_name} is on {ref.device}")


def check_finite(name: str, t: torch.Tensor, mask: torch.Tensor | None = None) -> None:
    """Raise a ValueError if any (unmasked) entry of `t` is NaN or infinite."""
    bad = ~torch.isfinite(t)
    if mask is not None:
        bad = bad & mask
    if bool(bad.any()):
        raise ValueError(f"{name} contains NaN or infinite values where it is not masked out")


def check_rewards(rewards: torch.Tensor, name: str = "rewards") -> torch.Tensor:
    """Validate a [N, G] reward tensor and return it as floats."""
    rewards = as_float(rewards, name)
    check_shape(name, rewards, "N, G", min_last=1)
    check_finite(name, rewards)
    return rewards


def check_steps(
    step_scores: torch.Tensor, step_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate step scores / mask [N, G, S]; return (float scores, bool mask)."""
    step_scores = as_float(step_scores, "step_scores")
    check_shape("step_scores", step_scores, "N, G, S")
    check_shape("step_mask", step_mask, "N, G, S")
    if step_mask.shape != step_scores.shape:
        raise ValueError(
            f"step_mask shape {tuple(step_mask.shape)} != step_scores {tuple(step_scores.shape)}"
        )
    check_prefix("step_mask", step_mask, "step_scores", step_scores, 3)
    return step_scores, as_bool(step_mask, "step_mask")


def check_token_step(token_step: torch.Tensor, n_steps: int) -> None:
    """Raise unless token_step is an integer tensor with values in [-1, max(n_steps - 1, 0)].

    Index 0 stays legal when there are no steps at all (S = 0): a batch in which no group
    reaches the PRM still marks its completion tokens with a non-negative index.
    """
    if not isinstance(token_step, torch.Tensor):
        raise TypeError(f"token_step must be a torch.Tensor, got {type(token_step).__name__}")
    if token_step.is_floating_point() or token_step.dtype == torch.bool:
        raise ValueError(f"token_step must hold integer step indices, got dtype {token_step.dtype}")
    top = max(n_steps - 1, 0)
    if not token_step.numel():
        return
    lo, hi = (int(v) for v in torch.aminmax(token_step))
    if lo < -1 or hi > top:
        raise ValueError(
            f"token_step values must be -1 (padding) or a step index in [0, {top}], "
            f"got values in [{lo}, {hi}]"
        )

"""Private helpers shared by the gating modules: option enums, shape checks, group statistics."""

from __future__ import annotations

from enum import Enum
from typing import TypeVar

import torch

# Two values count as equal when torch.isclose says so with its defaults; the plain-Python
# reference (veristep.gating.reference) uses the same two numbers.
RTOL = 1e-5
ATOL = 1e-8


class Std(str, Enum):
    """Which standard deviation divides a group: ddof=1 (`sample`) or ddof=0 (`population`)."""

    SAMPLE = "sample"
    POPULATION = "population"

    @property
    def ddof(self) -> int:
        """Delta degrees of freedom of this convention."""
        return 1 if self is Std.SAMPLE else 0


class OutcomeMethod(str, Enum):
    """Outcome-only advantage estimators of `outcome_advantages`."""

    GRPO = "grpo"
    DR_GRPO = "dr_grpo"
    SIGN = "sign"
    WAPO = "wapo"
    AVSPO = "avspo"


class Gate(str, Enum):
    """Which collapsed groups VeriGate sends to the PRM branch."""

    ALL_WRONG = "all_wrong"
    ANY_COLLAPSED = "any_collapsed"


class Agg(str, Enum):
    """How `prm_as_outcome_rewards` folds step scores into one reward."""

    MIN = "min"
    PROD = "prod"
    MEAN = "mean"
    LAST = "last"


class VirtualValue(str, Enum):
    """Where AVSPO's virtual reward comes from."""

    OPPOSITE = "opposite"  # the released rule: the other label
    FIXED = "fixed"
    RANDOM = "random"


E = TypeVar("E", bound=Enum)


def parse_option(enum_cls: type[E], value: str | E, name: str) -> E:
    """Turn a string option into its enum member, or raise a ValueError listing the choices."""
    try:
        return enum_cls(value)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in enum_cls)
        raise ValueError(f"{name}={value!r} is not one of {choices}") from None


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

    A row with count <= ddof has std 0 (its deviations are 0 as well).
    """
    v = values.flatten(1)
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

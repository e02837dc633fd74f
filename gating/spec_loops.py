"""Slow plain-Python reference of the gating estimators, for tests and the benchmark.

Written independently of the tensor code: ragged Python lists instead of padded tensors,
explicit loops over groups, rollouts, steps and tokens. It follows docs/gating-spec.md and
the same two conventions the tensor code documents: values count as equal when
|a - b| <= 1e-8 + 1e-5 |b| (torch.isclose defaults), and a group whose values are all equal
gets advantage exactly 0. Never use it for training; it exists to be obviously right.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

Group = Sequence[float]
Steps = Sequence[Sequence[float]]  # one list of step scores per rollout of a group


def _close(a: float, b: float) -> bool:
    """torch.isclose(a, b) with default tolerances."""
    return abs(a - b) <= 1e-8 + 1e-5 * abs(b)


def _all_equal(values: Sequence[float]) -> bool:
    """True if max and min of `values` are close (an empty list counts as equal)."""
    if not values:
        return True
    return _close(max(values), min(values))


def _mean(values: Sequence[float]) -> float:
    """Arithmetic mean."""
    return sum(values) / len(values)


def _std(values: Sequence[float], ddof: int) -> float:
    """Standard deviation with `ddof`; 0 when there are not more than ddof values."""
    n = len(values)
    if n <= ddof:
        return 0.0
    m = _mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (n - ddof))


def normalise(values: Sequence[float], ddof: int, eps: float, scale: bool = True) -> list[float]:
    """(v - mean) / (std + eps) (or v - mean without scale); all zeros if the values are equal."""
    if _all_equal(values):
        return [0.0] * len(values)
    m = _mean(values)
    s = _std(values, ddof) + eps if scale else 1.0
    return [(v - m) / s for v in values]


def collapsed(group: Group, tau: float = 0.0) -> bool:
    """Collapse of one group: all rewards equal, or population std <= tau."""
    return _all_equal(group) or (tau > 0 and _std(group, 0) <= tau)


def _at_or_below(v: float, bound: float) -> bool:
    """v <= bound, counting close as equal."""
    return v <= bound or _close(v, bound)


def _at_or_above(v: float, bound: float) -> bool:
    """v >= bound, counting close as equal."""
    return v >= bound or _close(v, bound)


def collapse_metrics(
    groups: Sequence[Group], tau: float = 0.0, low: float = 0.0, high: float = 1.0
) -> dict[str, float]:
    """ACR and friends over a batch of groups."""
    n = len(groups)
    flags = [collapsed(g, tau) for g in groups]
    wrong = [f and all(_at_or_below(v, low) for v in g) for f, g in zip(flags, groups, strict=True)]
    right = [f and all(_at_or_above(v, high) for v in g) for f, g in zip(flags, groups, strict=True)]
    flat = [v for g in groups for v in g]
    return {
        "acr": sum(flags) / n,
        "all_wrong_rate": sum(wrong) / n,
        "all_correct_rate": sum(right) / n,
        "reward_mean": _mean(flat),
        "reward_std": _std(flat, 0),
        "pass_at_1": sum(_at_or_above(v, high) for v in flat) / len(flat),
        "pass_at_g": sum(any(_at_or_above(v, high) for v in g) for g in groups) / n,
    }


def outcome_advantages(
    groups: Sequence[Group],
    method: str,
    ddof: int,
    eps: float,
    virtual: Sequence[float] | None = None,
    tau: float = 0.0,
    low: float = 0.0,
    high: float = 1.0,
) -> list[list[float]]:
    """Per-sample advantages of each group. For AVSPO, `virtual` gives each group's virtual
    reward (None: the released opposite-label rule)."""
    out = []
    for n, g in enumerate(groups):
        if method == "grpo":
            out.append(normalise(g, ddof, eps))
        elif method == "dr_grpo":
            out.append(normalise(g, ddof, eps, scale=False))
        elif method == "wapo":
            out.append([max(a, 0.0) for a in normalise(g, ddof, eps, scale=False)])
        elif method == "sign":
            out.append([2.0 * (v - low) / (high - low) - 1.0 for v in g])
        elif method == "avspo":
            if not collapsed(g, tau):
                out.append(normalise(g, ddof, eps))
                continue
            if virtual is None:
                v = high if _mean(g) <= (low + high) / 2 else low
            else:
                v = virtual[n]
            out.append(normalise([*g, v], ddof, eps)[: len(g)])
        else:
            raise ValueError(method)
    return out


def future_cumulated(scores: Sequence[float]) -> list[float]:
    """Suffix sums c_j = s_j + ... + s_last of one rollout's step scores."""
    out = []
    total = 0.0
    for s in reversed(scores):
        total += s
        out.append(total)
    return out[::-1]


def _split(flat: Sequence[float], lengths: Sequence[int]) -> list[list[float]]:
    """Cut a flat list back into consecutive pieces of the given lengths."""
    pieces, start = [], 0
    for n in lengths:
        pieces.append(list(flat[start : start + n]))
        start += n
    return pieces


def future_min(scores: Sequence[float]) -> list[float]:
    """Suffix minima m_j = min(s_j, ..., s_last) of one rollout's step scores."""
    out = []
    low = math.inf
    for s in reversed(scores):
        low = min(low, s)
        out.append(low)
    return out[::-1]


def verified_prefix(scores: Sequence[float], start: float = 1.0) -> list[float | None]:
    """V_j = min(start, s_1..s_j) up to and including the first score below 0.5; None after it."""
    out: list[float | None] = []
    value, erred = start, False
    for s in scores:
        if erred:
            out.append(None)
            continue
        value = min(value, s)
        out.append(value)
        erred = s < 0.5
    return out


def running_min_progress(scores: Sequence[float], start: float = 1.0) -> list[float]:
    """Progress of each step: V_k - V_{k-1}, V_k = min(start, s_1, ..., s_k), V_0 = start."""
    out, value = [], start
    for s in scores:
        new = min(value, s)
        out.append(new - value)
        value = new
    return out


def value_delta(scores: Sequence[float], start: float) -> list[float]:
    """Change of value across each step: V_k - V_{k-1}, V_k = s_k, V_0 = start."""
    out, value = [], start
    for s in scores:
        out.append(s - value)
        value = s
    return out


def prm_step_advantages(
    steps: Steps, ddof: int, eps: float, centre: bool = False, credit: str = "suffix",
    start: float | None = None, neutral: float | None = None,
) -> list[list[float]]:
    """VeriGate PRM branch for one group under a credit form (docs/gating-spec.md section 8).

    suffix: suffix sums, then normalised over all (i, j); min: suffix minima, normalised the
    same way; progress: the drop of the running minimum, per rollout, no group statistics;
    delta: the change of the score read as a value, from the group's mean first score;
    prefix: the running minimum up to the first error, normalised over those steps. Under min
    and prefix a step scored `neutral` is dropped from the minima and the statistics (it gets 0).
    """
    if credit in ("min", "prefix"):
        return _evidence_credit(steps, ddof, eps, credit, 1.0 if start is None else start, neutral)
    if credit == "progress":
        return [running_min_progress(row, 1.0 if start is None else start) for row in steps]
    if credit == "delta":
        firsts = [row[0] for row in steps if row]
        v0 = start if start is not None else (sum(firsts) / len(firsts) if firsts else 0.0)
        return [value_delta(row, v0) for row in steps]
    if credit == "suffix":
        values = [future_cumulated([2 * s - 1 if centre else s for s in row]) for row in steps]
    else:
        raise ValueError(credit)
    flat = [c for row in values for c in row]
    return _split(normalise(flat, ddof, eps), [len(row) for row in steps])


def _evidence_credit(steps: Steps, ddof: int, eps: float, credit: str, start: float,
                     neutral: float | None) -> list[list[float]]:
    """min / prefix credit: computed on the non-neutral steps, normalised over the counted ones."""
    kept = [[j for j, s in enumerate(row) if neutral is None or s != neutral] for row in steps]
    values: list[list[float | None]] = []
    for row, idx in zip(steps, kept, strict=True):
        sub = [row[j] for j in idx]
        vals = future_min(sub) if credit == "min" else verified_prefix(sub, start)
        full: list[float | None] = [None] * len(row)
        for j, v in zip(idx, vals, strict=True):
            full[j] = v
        values.append(full)
    flat = [v for row in values for v in row if v is not None]
    normed = iter(normalise(flat, ddof, eps))
    return [[0.0 if v is None else next(normed) for v in row] for row in values]


def process_grpo(steps: Steps, ddof: int, eps: float) -> list[list[float]]:
    """DeepSeekMath process GRPO for one group: normalise over all (i, j), then suffix sums."""
    flat = [s for row in steps for s in row]
    normed = _split(normalise(flat, ddof, eps), [len(row) for row in steps])
    return [future_cumulated(row) for row in normed]


def verigate(
    groups: Sequence[Group],
    steps: Sequence[Steps],
    token_steps: Sequence[Sequence[Sequence[int]]],
    gate: str = "all_wrong",
    tau: float = 0.0,
    ddof: int = 0,
    eps: float = 1e-6,
    centre: bool = False,
    low: float = 0.0,
    credit: str = "suffix",
    start: float | None = None,
    neutral: float | None = None,
) -> tuple[list[list[list[float]]], list[bool]]:
    """Token advantages per group / rollout / token (no padding) and which groups were gated.

    token_steps[n][i] lists the step index of each token of rollout i; an index beyond the
    rollout's steps gets 0.
    """
    out, gated_flags = [], []
    for g, st, ts in zip(groups, steps, token_steps, strict=True):
        is_collapsed = collapsed(g, tau)
        if gate == "all_wrong":
            gated = is_collapsed and all(_at_or_below(v, low) for v in g)
        else:
            gated = is_collapsed
        gated_flags.append(gated)
        if gated:
            adv = prm_step_advantages(st, ddof, eps, centre, credit, start, neutral)
            out.append(
                [[row[j] if j < len(row) else 0.0 for j in toks] for row, toks in zip(adv, ts, strict=True)]
            )
        elif is_collapsed:
            out.append([[0.0] * len(toks) for toks in ts])
        else:
            adv = normalise(g, ddof, eps)
            out.append([[a] * len(toks) for a, toks in zip(adv, ts, strict=True)])
    return out, gated_flags


def prm_as_outcome(scores: Sequence[float], agg: str, empty: float = 0.0) -> float:
    """One response's aggregated PRM score."""
    if not scores:
        return empty
    if agg == "min":
        return min(scores)
    if agg == "prod":
        return math.prod(scores)
    if agg == "mean":
        return _mean(scores)
    if agg == "last":
        return scores[-1]
    raise ValueError(agg)


def overlong_penalty(length: float, max_len: int, cache_len: int) -> float:
    """DAPO soft overlong punishment of one response length."""
    if length <= max_len - cache_len:
        return 0.0
    if length <= max_len:
        return (max_len - cache_len - length) / cache_len
    return -1.0


def pad_case(
    groups: Sequence[Group],
    steps: Sequence[Steps],
    token_steps: Sequence[Sequence[Sequence[int]]],
    extra_steps: int = 0,
    extra_tokens: int = 0,
    dtype: torch.dtype | None = None,
    fill: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Ragged lists -> (rewards [N, G], step_scores [N, G, S], step_mask, token_step [N, G, T]).

    Pads with `extra_steps` / `extra_tokens` beyond the longest row; padded step scores hold
    `fill` (tests put NaN there to prove padding is never read).
    """
    import torch

    dtype = dtype or torch.get_default_dtype()
    n, g = len(groups), len(groups[0]) if groups else 0
    s = max((len(row) for st in steps for row in st), default=0) + extra_steps
    t = max((len(row) for ts in token_steps for row in ts), default=0) + extra_tokens
    rewards = torch.tensor([list(gr) for gr in groups], dtype=dtype).reshape(n, g)
    scores = torch.full((n, g, s), fill, dtype=dtype)
    mask = torch.zeros((n, g, s), dtype=torch.bool)
    token_step = torch.full((n, g, t), -1, dtype=torch.long)
    for a in range(n):
        for b in range(g):
            row = steps[a][b]
            scores[a, b, : len(row)] = torch.tensor(list(row), dtype=dtype)
            mask[a, b, : len(row)] = True
            toks = token_steps[a][b]
            token_step[a, b, : len(toks)] = torch.tensor(list(toks), dtype=torch.long)
    return rewards, scores, mask, token_step


def unpad_tokens(advantages: torch.Tensor, token_step: torch.Tensor) -> list[list[list[float]]]:
    """Token advantages [N, G, T] -> ragged lists over the non-padding tokens (token_step >= 0)."""
    adv, ts = advantages.tolist(), token_step.tolist()
    return [
        [[a for a, j in zip(ra, rj, strict=True) if j >= 0] for ra, rj in zip(ga, gj, strict=True)]
        for ga, gj in zip(adv, ts, strict=True)
    ]

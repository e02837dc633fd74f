"""VeriGate: outcome GRPO where the verifier separates a group, PRM step advantages where not.

Also DeepSeekMath's process-supervision GRPO, which normalises first and sums second, for
comparison (spec test T8).
"""

from __future__ import annotations

import torch

from .checks import (
    check_finite,
    check_non_negative,
    check_prefix,
    check_rewards,
    check_shape,
    check_steps,
    check_token_step,
    is_finite_number,
)
from .groups import at_or_beyond, collapse_rates, collapsed, group_normalise
from .options import Credit, Gate, Std, parse_option
from .token_steps import gather_steps


def _suffix_sum(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Masked suffix sum along the last dim; masked positions are 0."""
    s = torch.where(mask, scores, 0.0)
    c = s.flip(-1).cumsum(-1).flip(-1)
    return torch.where(mask, c, 0.0)


def _running_min_progress(scores: torch.Tensor, mask: torch.Tensor, start: float) -> torch.Tensor:
    """V_k - V_{k-1} with V_k = min(start, s_1..s_k) over the valid steps; masked positions 0."""
    s = torch.where(mask, scores, torch.inf)  # valid steps come first: a masked tail keeps V
    v = s.cummin(-1).values.clamp(max=start)
    prev = torch.cat([torch.full_like(v[..., :1], start), v[..., :-1]], dim=-1)
    return torch.where(mask, v - prev, 0.0)


def _value_delta(scores: torch.Tensor, mask: torch.Tensor, start: float | None) -> torch.Tensor:
    """V_k - V_{k-1} with V_k = s_k (a value estimate) over the valid steps; masked positions 0.

    V_0 is `start`, or with None the group's mean first-step value: every rollout's first
    step estimates the prompt's value, so their mean is the estimate with the most samples.
    """
    steps = torch.arange(scores.shape[-1], device=scores.device)
    last_valid = torch.where(mask, steps, -1).cummax(-1).values  # a masked step keeps the last V
    if start is None:
        has = mask.any(-1)
        first = scores.gather(-1, mask.to(torch.int8).argmax(-1, keepdim=True)).squeeze(-1)
        v0 = torch.where(has, first, 0.0).sum(-1) / has.sum(-1).clamp(min=1)  # [N]; NaN padding unread
        v0 = v0[:, None].expand(scores.shape[:2])
    else:
        v0 = torch.full(scores.shape[:2], float(start), dtype=scores.dtype, device=scores.device)
    held = scores.gather(-1, last_valid.clamp(min=0))
    held = torch.where(last_valid >= 0, held, v0.unsqueeze(-1))
    prev = torch.cat([v0.unsqueeze(-1), held[..., :-1]], dim=-1)
    return torch.where(mask, scores - prev, 0.0)


def _evidence(scores: torch.Tensor, mask: torch.Tensor, neutral: float | None) -> torch.Tensor:
    """The valid steps whose score says something: all of them, less those scored `neutral`."""
    return mask if neutral is None else mask & (scores != neutral)


def _min_form(scores: torch.Tensor, mask: torch.Tensor, ddof: int, eps: float,
              neutral: float | None) -> torch.Tensor:
    """PURE's min form: the minimum evidence score from the step onward, normalised over the group.

    A neutral step is no evidence: it is skipped in the minima, gets 0 and stays out of the
    statistics, so a neutral answer line can never be what a rollout is paid for.
    """
    evidence = _evidence(scores, mask, neutral)
    m = torch.where(evidence, scores, torch.inf).flip(-1).cummin(-1).values.flip(-1)
    counted = evidence & mask
    return group_normalise(torch.where(counted, m, 0.0), counted, ddof, eps)


def _verified_prefix(scores: torch.Tensor, mask: torch.Tensor, ddof: int, eps: float,
                     neutral: float | None, start: float) -> torch.Tensor:
    """Prefix credit: V_j = min(start, evidence scores up to j), normalised over the counted steps.

    Counted are the evidence steps up to and including a rollout's first error (an evidence
    score below 0.5); later steps, built on a wrong prefix, and neutral steps get 0.
    """
    evidence = _evidence(scores, mask, neutral)
    v = torch.where(evidence, scores, torch.inf).cummin(-1).values.clamp(max=start)
    error = evidence & (scores < 0.5)
    after_error = (error.cumsum(-1) - error.to(torch.long)) > 0
    counted = evidence & ~after_error
    return group_normalise(torch.where(counted, v, 0.0), counted, ddof, eps)


def future_cumulated_rewards(step_scores: torch.Tensor, step_mask: torch.Tensor) -> torch.Tensor:
    """c[n, g, j] = sum of the valid scores of steps k >= j (undiscounted); 0 on masked steps."""
    scores, mask = check_steps(step_scores, step_mask)
    check_finite("step_scores", scores, mask)
    return _suffix_sum(scores, mask)


def prm_step_advantages(
    step_scores: torch.Tensor,
    step_mask: torch.Tensor,
    std: str = "population",
    eps: float = 1e-6,
    centre_scores: bool = False,
    credit: str = "suffix",
    start: float | None = None,
    neutral: float | None = None,
) -> torch.Tensor:
    """VeriGate's PRM branch for every group: [N, G, S] step advantages under a credit form.

    `credit="suffix"` (VeriGate as specified): future-cumulated scores c (of 2s - 1 when
    centre_scores) normalised over all valid (rollout, step) pairs of the group; a group whose c
    are all equal, or that has no step, gets 0. `"min"` (PURE): the minimum score from the step
    onward, normalised the same way. `"progress"`: V_k - V_{k-1} with V_k = min(start, s_1..s_k),
    the drop of the running minimum across step k, not re-centred; V_0 = start (None: 1).
    `"delta"`: V_k - V_k-1 with V_k = s_k, for scores that are value estimates (Monte-Carlo);
    V_0 = start (None: the group's mean first-step value); not re-centred. `"prefix"`: V_k =
    min(start, s_1..s_k) on each step up to a rollout's first error (score < 0.5), normalised
    over those steps: the verified prefix is rewarded and the first error charged; later steps
    get 0 (start None: 1). `neutral`: a score that means "cannot tell" (the rule PRM's 0.5); in
    the min and prefix forms such a step is no evidence and gets 0 (gating-spec.md section 8).
    Masked steps get 0.
    """
    scores, mask = check_steps(step_scores, step_mask)
    check_finite("step_scores", scores, mask)
    ddof = parse_option(Std, std, "std").ddof
    check_non_negative("eps", eps)
    kind = _check_credit(credit, centre_scores, start, neutral)
    return _prm_step_advantages(scores, mask, ddof, eps, centre_scores, kind, start, neutral)


def _finite_or_none(name: str, value: float | None) -> None:
    """Raise unless `value` is None or a finite real number (a bool is not one)."""
    if value is not None and not is_finite_number(value):
        raise ValueError(f"{name} must be a finite number or None, got {value!r}")


def _check_credit(credit: str, centre_scores: bool, start: float | None, neutral: float | None = None) -> Credit:
    """The credit form as an enum; centring only applies to suffix sums, start and neutral finite."""
    kind = parse_option(Credit, credit, "credit")
    if centre_scores and kind is not Credit.SUFFIX:
        raise ValueError(f"centre_scores applies to credit='suffix' only, got credit={kind.value!r}")
    _finite_or_none("start", start)
    _finite_or_none("neutral", neutral)
    return kind


def _prm_step_advantages(
    scores: torch.Tensor, mask: torch.Tensor, ddof: int, eps: float, centre_scores: bool,
    credit: Credit = Credit.SUFFIX, start: float | None = None, neutral: float | None = None,
) -> torch.Tensor:
    """prm_step_advantages without validation."""
    if credit is Credit.PROGRESS:
        return _running_min_progress(scores, mask, 1.0 if start is None else float(start))
    if credit is Credit.DELTA:
        return _value_delta(scores, mask, start)
    if credit is Credit.MIN:
        return _min_form(scores, mask, ddof, eps, neutral)
    if credit is Credit.PREFIX:
        return _verified_prefix(scores, mask, ddof, eps, neutral, 1.0 if start is None else float(start))
    if centre_scores:
        scores = 2.0 * scores - 1.0
    return group_normalise(_suffix_sum(scores, mask), mask, ddof, eps)


def process_grpo_advantages(
    step_scores: torch.Tensor,
    step_mask: torch.Tensor,
    std: str = "population",
    eps: float = 1e-6,
) -> torch.Tensor:
    """DeepSeekMath process-supervision GRPO: [N, G, S] step advantages.

    Step scores are normalised over all valid (rollout, step) pairs of the group first, then
    each step gets the suffix sum of the normalised values (the reverse order of VeriGate).
    """
    scores, mask = check_steps(step_scores, step_mask)
    check_finite("step_scores", scores, mask)
    ddof = parse_option(Std, std, "std").ddof
    check_non_negative("eps", eps)
    return _suffix_sum(group_normalise(scores, mask, ddof, eps), mask)


def gate_mask(
    rewards: torch.Tensor, gate: str = "all_wrong", tau: float = 0.0, low: float = 0.0
) -> torch.Tensor:
    """bool[N]: the groups VeriGate sends to the PRM branch; score only these with the PRM.

    "all_wrong": collapsed and every reward at or below `low`; "any_collapsed": collapsed.
    """
    rewards = check_rewards(rewards)
    return _gate(rewards, parse_option(Gate, gate, "gate"), tau, low)


def _gate(rewards: torch.Tensor, gate: Gate, tau: float, low: float) -> torch.Tensor:
    """gate_mask without validation."""
    is_collapsed = collapsed(rewards, tau)
    if gate is Gate.ALL_WRONG:
        return is_collapsed & at_or_beyond(rewards, low, above=False).all(-1)
    return is_collapsed


def verigate_advantages(
    rewards: torch.Tensor,
    step_scores: torch.Tensor,
    step_mask: torch.Tensor,
    token_step: torch.Tensor,
    gate: str = "all_wrong",
    tau: float = 0.0,
    std: str = "population",
    eps: float = 1e-6,
    centre_scores: bool = False,
    *,
    low: float = 0.0,
    high: float = 1.0,
    credit: str = "suffix",
    start: float | None = None,
    neutral: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Token-level VeriGate advantages [N, G, T] and metrics.

    Inputs: rewards [N, G]; step_scores / step_mask [N, G, S] (only the gated groups' entries
    are read, so the PRM need not be run on the others); token_step [N, G, T], each token's
    step index, -1 for padding.
    Per group: if its rewards are not collapsed (pop std > tau and not all equal), every
    token of o_i gets the GRPO advantage (r_i - mean) / (std + eps). A collapsed group goes
    to the PRM branch when `gate` selects it ("all_wrong": every reward at or below `low`;
    "any_collapsed": every collapsed group); its tokens get the step advantage of their step
    (see prm_step_advantages: `credit` "suffix", "min", "progress", "delta" or "prefix",
    `start` the V_0 of the last three, `neutral` the scorer's "cannot tell" score). Other collapsed groups get 0; tokens pointing at a masked step
    get 0; padding gets 0.
    Metrics: gate/gated_groups (count), gate/steps_per_gated_response (mean over gated
    responses, 0 when none), gate/prm_flat_groups (gated groups whose PRM branch is all 0),
    adv/nonzero_frac (share of non-padding tokens with |A| > 0), gate/acr,
    gate/all_wrong_rate, gate/all_correct_rate.
    """
    rewards = check_rewards(rewards)
    scores, mask = check_steps(step_scores, step_mask)
    check_prefix("step_scores", scores, "rewards", rewards, 2)
    check_shape("token_step", token_step, "N, G, T")
    check_prefix("token_step", token_step, "rewards", rewards, 2)
    check_token_step(token_step, scores.shape[-1])
    gate_kind = parse_option(Gate, gate, "gate")
    ddof = parse_option(Std, std, "std").ddof
    credit_kind = _check_credit(credit, centre_scores, start, neutral)
    check_non_negative("eps", eps)
    if not high > low:
        raise ValueError(f"need high > low, got low={low}, high={high}")
    dtype = torch.promote_types(rewards.dtype, scores.dtype)
    rewards, scores = rewards.to(dtype), scores.to(dtype)

    is_collapsed = collapsed(rewards, tau)
    gated = _gate(rewards, gate_kind, tau, low)
    check_finite("step_scores", scores, mask & gated[:, None, None])

    if scores.shape[-1] == 0:  # no steps at all: one masked step keeps the table below valid
        scores = scores.new_zeros(scores.shape[:2] + (1,))
        mask = mask.new_zeros(scores.shape)

    zero = torch.zeros((), dtype=dtype, device=rewards.device)
    outcome = group_normalise(rewards, None, ddof, eps)
    # tau > 0 can call a group collapsed whose rewards still differ slightly: it gets 0 too.
    outcome = torch.where(is_collapsed.unsqueeze(-1), zero, outcome)
    step_adv = _prm_step_advantages(scores, mask, ddof, eps, centre_scores, credit_kind, start, neutral)
    # One [N, G, S] table serves both branches (a gated group's step advantages, else the
    # outcome advantage on every step), so the [N, G, T] work is a single gather.
    table = torch.where(gated[:, None, None], step_adv, outcome.unsqueeze(-1))
    adv = gather_steps(table, token_step)

    stats = collapse_rates(rewards, tau, low, high)
    n_gated = gated.sum()
    gated_steps = (mask.sum(-1) * gated.unsqueeze(-1)).sum()
    gated_responses = n_gated * rewards.shape[1]
    prm_flat = gated & ~(step_adv != 0).flatten(1).any(-1)
    n_tokens = torch.count_nonzero(token_step >= 0)
    nonzero = torch.count_nonzero(adv)  # padding is exactly 0
    values = torch.stack(
        [
            n_gated.to(torch.float64),
            (gated_steps / gated_responses.clamp(min=1)).to(torch.float64),
            prm_flat.sum().to(torch.float64),
            (nonzero / n_tokens.clamp(min=1)).to(torch.float64),
            stats["acr"].to(torch.float64),
            stats["all_wrong_rate"].to(torch.float64),
            stats["all_correct_rate"].to(torch.float64),
        ]
    ).tolist()  # one host sync for every metric
    metrics = {
        "gate/gated_groups": int(values[0]),
        "gate/steps_per_gated_response": values[1],
        "gate/prm_flat_groups": int(values[2]),
        "adv/nonzero_frac": values[3],
        "gate/acr": values[4],
        "gate/all_wrong_rate": values[5],
        "gate/all_correct_rate": values[6],
    }
    return adv, metrics

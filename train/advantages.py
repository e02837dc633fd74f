"""Advantage method dispatch: which groups need the PRM, and token-level advantages per method.

All the estimators live in `veristep.gating`; this module only maps a config's `advantage`
name onto them and shapes the results as `[N, G, T]`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from veristep import gating

from .distributed import DistInfo, all_reduce, gather_padded

#: Outcome-only methods and the `veristep.gating.outcome_advantages` method each uses.
OUTCOME_METHOD = {"grpo": "grpo", "dapo": "grpo", "dr_grpo": "dr_grpo", "sign": "sign",
                  "wapo": "wapo", "avspo": "avspo"}


def gate_options(cfg: Any) -> dict[str, Any]:
    """The gate's arguments from the config: the one source of both the PRM's groups and VeriGate's.

    `prm_groups` (which groups the PRM scores) and `compute_advantages` (which groups VeriGate
    sends to its PRM branch) both pass exactly these to `veristep.gating`, so the two
    decisions cannot drift apart.
    """
    return {"gate": cfg.gate, "tau": cfg.tau, "low": cfg.reward_low}


def partly_judged(judged: torch.Tensor | None) -> list[int]:
    """Groups (rows of `judged` [N, G]) with at least one completion no verifier could judge."""
    if judged is None:
        return []
    return [int(g) for g in torch.nonzero(~judged.all(dim=1)).flatten()]


def prm_groups(cfg: Any, rewards: torch.Tensor, judged: torch.Tensor | None = None) -> list[int]:
    """Indices of the groups whose completions the PRM must score (rewards `[N, G]`).

    VeriGate: exactly the groups `veristep.gating.gate_mask` sends to its PRM branch, so
    the PRM runs on nothing the gate will not read; prm_as_outcome: every group. A group
    with unjudged completions (`judged` [N, G] False) is gated on its judged ones alone.
    """
    if cfg.advantage == "prm_as_outcome":
        return list(range(rewards.shape[0]))
    if cfg.advantage != "verigate":
        return []
    sent = on_judged(lambda r: gating.gate_mask(r, **gate_options(cfg)), rewards, judged)
    return [int(i) for i in torch.nonzero(sent).flatten()]


def on_judged(decide: Callable[[torch.Tensor], torch.Tensor], rewards: torch.Tensor,
              judged: torch.Tensor | None, min_judged: int = 1) -> torch.Tensor:
    """`decide`'s bool[N] over groups of rewards [N, G], each group read on its judged completions.

    An unjudged completion has no reward, not 0: a partly judged group is decided on its judged
    columns alone, and is False with fewer than `min_judged` of them.
    """
    out = decide(rewards)
    for g in partly_judged(judged):
        cols = torch.nonzero(judged[g]).flatten()
        out[g] = cols.numel() >= min_judged and bool(decide(rewards[g, cols][None])[0])
    return out


def compute_advantages(cfg: Any, rewards: torch.Tensor, token_mask: torch.Tensor,
                       steps: Any | None = None, keep: torch.Tensor | None = None,
                       judged: torch.Tensor | None = None,
                       info: DistInfo | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Token advantages `[N, G, T]` and metrics for `cfg.advantage`.

    `rewards` `[N, G]`; `token_mask` `[N, G, T]` (1 on completion tokens); `steps` is the
    `StepTensors` of the PRM for verigate and prm_as_outcome; `keep` `[N, G]` bool zeroes
    the advantages of the completions left out of the loss (e.g. truncated ones). `judged`
    `[N, G]` bool: an unjudged completion (a checker time-out, a sandbox error, a bad reference)
    has no reward, not a zero one: its group's advantages are those of its judged completions
    alone (the same estimator on the smaller group), and it gets none. The metrics are over
    the groups of every rank under `info`, except the gate's batch monitors (`gate/acr`,
    `gate/gated_groups`, `gate/steps_per_gated_response`, ...): the trainer's monitors, which
    measure them over every rank, replace them.
    """
    adv, metrics = _token_advantages(cfg, rewards, token_mask, steps)
    for g in partly_judged(judged):
        cols = torch.nonzero(judged[g]).flatten()
        adv[g] = 0.0
        if cols.numel():
            sub_steps = steps.select(g, cols) if steps is not None else None
            sub, _ = _token_advantages(cfg, rewards[g, cols][None], token_mask[g, cols][None], sub_steps)
            adv[g, cols] = sub[0].to(adv.dtype)
    adv = torch.nan_to_num(adv.float(), nan=0.0, posinf=0.0, neginf=0.0) * token_mask
    if keep is not None:
        adv = adv * keep.unsqueeze(-1).to(adv.dtype)
    if judged is not None:
        adv = adv * judged.unsqueeze(-1).to(adv.dtype)
    info = info or DistInfo()
    if "gate/prm_flat_groups" in metrics:
        metrics["gate/prm_flat_groups"] = int(all_reduce(float(metrics["gate/prm_flat_groups"]), info))
    # One all-reduce of the sums; in one process they stay float32, as the ratios always were.
    nonzero, abs_sum, real = all_reduce(torch.stack(
        [((adv != 0).float() * token_mask).sum(), adv.abs().sum(), token_mask.sum()]), info)
    real = real.clamp(min=1)
    # Coverage, not signal: any PRM (even one that scores every step 0.5) makes the gated groups'
    # tokens non-zero (docs/trainer.md, "What adv/nonzero_frac does and does not say").
    metrics["adv/nonzero_frac"] = float(nonzero / real)
    metrics["adv/abs_mean"] = float(abs_sum / real)
    return adv, metrics



def _token_advantages(cfg: Any, rewards: torch.Tensor, token_mask: torch.Tensor,
                      steps: Any | None) -> tuple[torch.Tensor, dict[str, float]]:
    """The estimator of `cfg.advantage` on a batch of groups: `[N, G, T]` advantages, gate metrics."""
    method = cfg.advantage
    metrics: dict[str, float] = {}
    if method == "verigate":
        adv, gate_metrics = gating.verigate_advantages(
            rewards, steps.step_scores, steps.step_mask, steps.token_step, std=cfg.adv_std,
            eps=cfg.adv_eps, centre_scores=cfg.centre_scores, high=cfg.reward_high(), credit=cfg.credit,
            neutral=steps.neutral, **gate_options(cfg))
        metrics.update({k: float(v) for k, v in gate_metrics.items()})
        return adv, metrics
    if method == "prm_as_outcome":
        rewards = gating.prm_as_outcome_rewards(steps.step_scores, steps.step_mask, agg=cfg.prm_agg)
        outcome = "grpo"
    else:
        outcome = OUTCOME_METHOD[method]
    opts = {"virtual": cfg.avspo_virtual} if outcome == "avspo" else {}
    seq_adv = gating.outcome_advantages(rewards, method=outcome, std=cfg.adv_std, eps=cfg.adv_eps, **opts)
    return gating.broadcast_to_tokens(seq_adv, token_mask), metrics


def winner_groups(adv: torch.Tensor) -> torch.Tensor:
    """WAPO: bool `[N]`, groups with at least one positive advantage (its loss divisor counts them)."""
    return (adv > 0).flatten(1).any(dim=1)


#: The credit diagnostic's metrics (logged when an oracle labels the steps: the built-in task).
CREDIT_METRICS = ("gate/first_error_blamed", "gate/first_error_responses", "credit/adv_on_track",
                  "credit/adv_first_error", "credit/adv_after_error", "credit/adv_answer")


def oracle_credit_metrics(cfg: Any, oracle: Any, tokenizer: Any, problem_texts: list[str],
                          completion_ids: list[list[int]], texts: list[str], rewards: torch.Tensor,
                          adv: torch.Tensor, info: DistInfo | None = None) -> dict[str, float | None]:
    """Which steps of the gate's groups the advantages `adv` [N, G, T] blame, by oracle labels.

    Measured on the groups `veristep.gating.gate_mask` selects with this run's gate options
    (for every method, so GRPO's zeros and a placebo's noise are measured too), with exact
    step labels from `oracle` (`veristep.prm.oracle.OracleScorer`), whatever scorer drove the
    advantages. Under `info` the labelled tensors of every rank are gathered (padded to the
    longest completion and step count) and measured as one batch, as one process would.
    """
    from .rewards import prm_step_tensors

    n, G, T = adv.shape
    groups = [int(g) for g in torch.nonzero(gating.gate_mask(rewards, **gate_options(cfg))).flatten()]
    info = info or DistInfo()
    if not groups and not info.enabled:
        return _no_credit()
    st = prm_step_tensors(oracle, tokenizer, problem_texts, completion_ids, texts, G, T, groups)
    is_answer = torch.zeros_like(st.step_mask)
    for g in groups:
        for j in range(G):
            flags = oracle.labels(problem_texts[g], texts[g * G + j]).is_answer
            is_answer[g, j, : len(flags)] = torch.tensor(flags, dtype=torch.bool)
    rows = torch.zeros(n, G, dtype=torch.bool)
    rows[groups] = True
    parts = [adv, st.token_step, st.step_scores > 0.5, is_answer, st.step_mask, rows]
    if info.enabled:
        fills = [0.0, -1, False, False, False, False]
        parts = [gather_padded(t, info, fill) for t, fill in zip(parts, fills, strict=True)]
        if not bool(parts[-1].any()):
            return _no_credit()
    return gating.credit_diagnostics(*parts)


def _no_credit() -> dict[str, float | None]:
    """The credit diagnostic of a step whose gate selected no group."""
    return {k: (0 if k == "gate/first_error_responses" else None) for k in CREDIT_METRICS}

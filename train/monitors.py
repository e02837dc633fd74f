"""The step's monitors, each measured over every rank's groups: collapse and rewards, the PRM's
coverage and cost, prompt difficulty, completion lengths, and the slowest rank's timings.

Each rank holds a slice of the step's groups, so a rank's own mean is not the step's: every
metric here gathers the rows, or sums numerators and denominators, over all ranks, and equals
what one process would log on the same rollouts.
"""

from __future__ import annotations

from typing import Any

import torch

from veristep import gating

from .distributed import DistInfo, all_reduce, gather_objects, gather_rows


def batch_monitors(cfg: Any, info: DistInfo, rewards: torch.Tensor, outcome: torch.Tensor,
                   correct: torch.Tensor, judged: torch.Tensor, completion_ids: list[list[int]],
                   truncated: list[bool], prompt_idx: list[int],
                   difficulty: gating.DifficultyTracker) -> dict[str, Any]:
    """Collapse, reward, completion and difficulty metrics of the global batch; updates `difficulty`.

    `rewards` `[n, G]` (shaped), `outcome` `[n, G]` (the verifiers' own), `correct` and
    `judged` `[n, G]` bool, all of this rank's groups; `prompt_idx` each group's prompt.
    """
    m: dict[str, Any] = {}
    all_outcome = gather_rows(outcome, info)
    all_correct = gather_rows(correct, info)
    all_judged = gather_rows(judged, info)
    coll = gating.collapse_metrics(judged_groups(all_outcome, all_judged), cfg.tau, cfg.reward_low,
                                   cfg.reward_high())
    m.update({f"gate/{k}": float(v) for k, v in coll.items() if k in ("acr", "all_wrong_rate", "all_correct_rate")})
    judged_rewards = gather_rows(rewards, info)[all_judged]  # an unjudged completion has none
    m["reward/mean"] = float(judged_rewards.mean())
    m["reward/std"] = float(judged_rewards.std(unbiased=False))
    m["reward/correct_frac"] = float(all_correct.float().mean())
    m["reward/unjudged_frac"] = float((~all_judged).float().mean())
    global_idx = [i for part in gather_objects(prompt_idx, info) for i in part]
    n_judged = all_judged.sum(dim=1)
    rates = (all_correct & all_judged).sum(dim=1) / n_judged.clamp(min=1)
    seen = torch.nonzero(n_judged).flatten().tolist()  # a prompt with no verdict says nothing
    difficulty.update([global_idx[i] for i in seen], rates[seen])
    for name, members in difficulty.by_difficulty().items():
        m[f"difficulty/{name}"] = len(members)
    lens = torch.tensor([float(len(c)) for c in completion_ids])
    m["completion/len_mean"] = float(gather_rows(lens, info).mean())
    m["completion/truncated_frac"] = float(gather_rows(torch.tensor(truncated, dtype=torch.float32), info).mean())
    return m


def judged_groups(values: torch.Tensor, judged: torch.Tensor) -> torch.Tensor:
    """The groups of `values` [N, G] with a verdict, as the collapse monitors must read them.

    Each unjudged entry takes the value of its group's first judged one, so that a group's
    collapse and its all-right or all-wrong state are those of its judged completions (an
    unjudged one counted as 0 made [1, 1, 1, time-out] a mixed group); groups with no judged
    completion are left out.
    """
    has = judged.any(dim=1)
    v, j = values[has], judged[has]
    first = v.gather(1, j.to(torch.int8).argmax(dim=1, keepdim=True))
    return torch.where(j, v, first)


def prm_monitors(groups: list[int], group_size: int, scored: bool, steps: Any | None, mc_rollouts: int,
                 info: DistInfo) -> dict[str, Any]:
    """How many groups the gate sent, what the PRM scored and what its Monte-Carlo values cost.

    `groups` this rank's gated groups; `scored` whether a PRM ran on them; `steps` its
    `StepTensors` (None without a PRM); `mc_rollouts` continuations this rank sampled.
    """
    counts = torch.zeros(0)
    nan_steps = 0
    if steps is not None:
        nan_steps = steps.nan_steps
        if steps.scored_groups:
            counts = steps.step_mask[steps.scored_groups].sum(-1).float()
    # One all-reduce; in one process the sums stay float32, as the means always were.
    sums = all_reduce(torch.tensor([float(len(groups)), float(len(groups) * group_size if scored else 0),
                                    float(mc_rollouts), float(nan_steps)]), info)
    step_sum = all_reduce(torch.stack([counts.sum(), torch.tensor(float(counts.numel()))]), info)
    m: dict[str, Any] = {"gate/gated_groups": int(sums[0]), "gate/prm_completions": int(sums[1]),
                         "gate/mc_rollouts": int(sums[2])}
    if steps is not None:
        m["gate/steps_per_gated_response"] = float(step_sum[0] / step_sum[1]) if float(step_sum[1]) else 0.0
        m["prm/nan_steps"] = int(sums[3])
    return m


def slowest(seconds: dict[str, float], info: DistInfo) -> dict[str, float]:
    """Each timing as the slowest rank's (the step waits for it), in one all-reduce."""
    if not info.enabled:
        return dict(seconds)
    top = all_reduce(torch.tensor(list(seconds.values()), dtype=torch.float64), info, op="max")
    return {k: float(v) for k, v in zip(seconds, top.tolist(), strict=True)}

"""One step's rollout batch: this rank's share of the step's prompts, G completions each, scored by
the verifiers; with `--advantage dapo`, DAPO's dynamic sampling adds rounds until enough groups
carry signal (gating-spec section 4)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from veristep import gating

from .advantages import on_judged
from .distributed import DistInfo, all_reduce, shard
from .lockstep import require_same_count
from .placebo import placebo_generator, shuffle_within_groups
from .rewards import OutcomeRewarder, OutcomeRewards
from .rollout import Rollouts


@dataclass
class StepBatch:
    """The groups a step trains on, their outcome rewards, and what sampling them cost."""

    ro: Rollouts  # G completions per group, group-major
    scored: OutcomeRewards
    prompt_idx: list[int]  # this rank's prompt index of each group
    rollout_s: float  # seconds generating, every round included
    sampled: int  # completions generated, kept or not
    sampled_tokens: int
    metrics: dict[str, Any] = field(default_factory=dict)  # dapo/*


def rollout_seeds(cfg: Any, step: int, round_: int, global_idx: list[int], info: DistInfo) -> list[int]:
    """Per-prompt sampling seeds of this rank's slice, fixed by (seed, step, round, position)."""
    per = len(global_idx) // info.world_size
    base = (cfg.seed * 1_000_003 + step * 10_007 + round_ * 101) % (2**31 - 1)
    return [(base + (info.rank * per + j) * 7_919) % (2**31 - 1) for j in range(per)]


def sample_batch(cfg: Any, engine: Any, rewarder: OutcomeRewarder, sampler: Any, prompt_ids: list[list[int]],
                 refs: list[list[Any]], step: int, info: DistInfo) -> StepBatch:
    """Sample and score this rank's groups of step `step` (dynamic sampling under dapo)."""
    G = cfg.group_size
    engine.wake_up()
    idx = sampler.next_indices(cfg.prompts_per_step)
    local_idx = shard(idx, info)
    # Equal prompts per rank: the engine then makes the same generate calls on every rank.
    require_same_count(len(local_idx), info, "rollout prompts per process")
    ro = engine.generate([prompt_ids[i] for i in local_idx], G, rollout_seeds(cfg, step, 0, idx, info))
    scored = rewarder.score(ro.texts, [refs[i] for i in local_idx for _ in range(G)])
    batch = StepBatch(ro, scored, local_idx, ro.timings["rollout_s"], len(ro), ro.num_tokens())
    if cfg.advantage == "dapo":
        batch = dynamic_sampling(cfg, engine, rewarder, sampler, prompt_ids, refs, batch, step, info)
    return batch


def dynamic_sampling(cfg: Any, engine: Any, rewarder: OutcomeRewarder, sampler: Any,
                     prompt_ids: list[list[int]], refs: list[list[Any]], first: StepBatch, step: int,
                     info: DistInfo) -> StepBatch:
    """DAPO: sample more groups until this step has `n` groups with mixed outcomes (or the cap)."""
    G, n = cfg.group_size, len(first.prompt_idx)
    ro, scored, local_idx = first.ro, first.scored, first.prompt_idx
    t_rollout = 0.0
    rounds = 0
    while True:
        keep = informative_groups(scored.rewards.view(-1, G), scored.judged.view(-1, G))
        short = int(keep.sum()) < n
        # Every rank samples another round if any rank is short, so their generate calls match.
        if not bool(all_reduce(float(short), info, op="max")) or rounds >= cfg.dynamic_sampling_rounds:
            break
        rounds += 1
        idx = sampler.next_indices(cfg.prompts_per_step)
        more_idx = shard(idx, info)
        more = engine.generate([prompt_ids[i] for i in more_idx], G, rollout_seeds(cfg, step, rounds, idx, info))
        t_rollout += more.timings["rollout_s"]
        scored = scored.extend(rewarder.score(more.texts, [refs[i] for i in more_idx for _ in range(G)]))
        ro.extend(more)
        local_idx = local_idx + more_idx
    keep = informative_groups(scored.rewards.view(-1, G), scored.judged.view(-1, G))
    # Keep n groups, informative first; fill with collapsed ones if the cap was hit, so every
    # rank runs the same number of forward passes.
    order = [i for i in range(len(local_idx)) if keep[i]] + [i for i in range(len(local_idx)) if not keep[i]]
    chosen = order[:n]
    rows = [g * G + j for g in chosen for j in range(G)]
    metrics = {"dapo/rounds": rounds,
               "dapo/extra_rollouts": int(all_reduce(float(rounds * n * G), info)),
               "dapo/kept_informative": int(all_reduce(float(min(int(keep.sum()), n)), info))}
    return StepBatch(ro.select_groups(chosen, G), scored.select(rows), [local_idx[i] for i in chosen],
                     first.rollout_s + t_rollout, len(ro), ro.num_tokens(), metrics)


def informative_groups(rewards: torch.Tensor, judged: torch.Tensor) -> torch.Tensor:
    """DAPO's keep (bool[N]) of rewards [N, G], each group read on its judged completions alone.

    An unjudged completion has no reward, not 0 (`compute_advantages` trains its group on the
    judged ones): [1, 1, 1, time-out] is a collapsed group, which DAPO must sample past.
    """
    # two judged completions at least: DAPO cannot compare fewer
    return on_judged(gating.dynamic_sampling_keep, rewards, judged, min_judged=2)


def step_rewards(cfg: Any, batch: StepBatch, step: int
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The step's rewards as the gate and advantages see them, and what the monitors read.

    Returns `rewards` (the verifiers' plus DAPO's overlong shaping, permuted within groups under
    `--placebo rewards`), `outcome` (the verifiers' own), `correct` and `judged`, each `[n, G]`.
    """
    G = cfg.group_size
    n = len(batch.prompt_idx)
    judged = batch.scored.judged.view(n, G)
    rewards = batch.scored.rewards
    if cfg.overlong_cache_len:
        lengths = torch.tensor([len(c) for c in batch.ro.completion_ids], dtype=torch.float32)
        rewards = rewards + gating.overlong_penalty(lengths, cfg.max_completion_len, cfg.overlong_cache_len)
    rewards = rewards.view(n, G)
    if cfg.placebo == "rewards":  # control: the same rewards, on random completions
        rewards = shuffle_within_groups(rewards, placebo_generator(cfg.seed, step), judged)
    return rewards, batch.scored.rewards.view(n, G), batch.scored.correct.view(n, G), judged

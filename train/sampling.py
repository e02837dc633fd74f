"""One step's rollout batch: this rank's share of the step's prompts, G completions each, scored by
the verifiers; with `--advantage dapo`, DAPO's dynamic sampling adds rounds until enough groups
carry signal (gating-spec section 4)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from veristep import gating

from .advantages import on_judged
from .distributed import DistInfo, all_reduce, gather_objects, gather_rows, shard
from .lockstep import require_same_count
from .placebo import placebo_generator, shuffle_within_groups
from .rewards import OutcomeRewarder, OutcomeRewards
from .rollout import Rollouts, group_rows


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
    """DAPO: sample more rounds until the step has prompts_per_step groups with mixed outcomes (or
    the cap), then keep the groups one process would keep, this rank's share of them."""
    G, n = cfg.group_size, len(first.prompt_idx)
    wanted = n * info.world_size
    ro, scored, local_idx = first.ro, first.scored, first.prompt_idx
    t_rollout = 0.0
    rounds = 0
    while True:
        keep = informative_groups(scored.rewards.view(-1, G), scored.judged.view(-1, G))
        informative = int(all_reduce(float(keep.sum()), info))
        # one count over all ranks, so every rank takes the same rounds (their generate calls match)
        if informative >= wanted or rounds >= cfg.dynamic_sampling_rounds:
            break
        rounds += 1
        idx = sampler.next_indices(cfg.prompts_per_step)
        more_idx = shard(idx, info)
        more = engine.generate([prompt_ids[i] for i in more_idx], G, rollout_seeds(cfg, step, rounds, idx, info))
        t_rollout += more.timings["rollout_s"]
        scored = scored.extend(rewarder.score(more.texts, [refs[i] for i in more_idx for _ in range(G)]))
        ro.extend(more)
        local_idx = local_idx + more_idx
    chosen = kept_groups(gather_rows(keep.view(1, -1), info), n)
    # The kept groups may have been sampled on another rank: every rank sends the ones it holds,
    # so the pool holds them rank by rank, each rank's in the order chosen (a stable sort).
    mine = [i for rank, i in chosen if rank == info.rank]
    parts = gather_objects((ro.select_groups(mine, G), scored.select(group_rows(mine, G)),
                            [local_idx[i] for i in mine]), info)
    pooled_ro, pooled_scored, pooled_idx = parts[0][0], parts[0][1], list(parts[0][2])
    for part_ro, part_scored, part_idx in parts[1:]:
        pooled_ro.extend(part_ro)
        pooled_scored = pooled_scored.extend(part_scored)
        pooled_idx += part_idx
    position = {g: k for k, g in enumerate(sorted(chosen, key=lambda g: g[0]))}
    ours = [position[g] for g in chosen[info.rank * n:(info.rank + 1) * n]]
    metrics = {"dapo/rounds": rounds,
               "dapo/extra_rollouts": int(all_reduce(float(rounds * n * G), info)),
               "dapo/kept_informative": min(informative, wanted)}
    return StepBatch(pooled_ro.select_groups(ours, G), pooled_scored.select(group_rows(ours, G)),
                     [pooled_idx[g] for g in ours], first.rollout_s + t_rollout, len(ro), ro.num_tokens(), metrics)


def kept_groups(keep: torch.Tensor, n: int) -> list[tuple[int, int]]:
    """DAPO's choice of `n` x ranks groups as (rank, local group) from every rank's keep flags.

    `keep` is `[ranks, rounds * n]`: rank r's local group i is round i // n, position r * n + i % n
    of that round's global batch. The groups are read in the one-process order (round, then
    global position), informative first, then collapsed ones to fill up when the round cap is hit,
    so several processes keep the groups one process keeps, every rank n of them.
    """
    ranks, total = keep.shape
    order = [(r, rnd * n + j) for rnd in range(total // n) for r in range(ranks) for j in range(n)]
    flags = keep.tolist()
    ranked = [g for g in order if flags[g[0]][g[1]]] + [g for g in order if not flags[g[0]][g[1]]]
    return ranked[:n * ranks]


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

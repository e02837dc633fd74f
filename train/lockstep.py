"""The one rule of data parallelism here: every rank runs the same forward passes.

FSDP2 all-gathers each layer's parameters inside every forward pass (and `generate` under
`synced_gpus` keeps ranks stepping together), DDP all-reduces gradients after every backward. A
rank that runs one pass more or fewer than the others leaves them waiting: NCCL hangs, gloo
aborts with a collective mismatch. Every place where ranks could part ways goes through this
module, which either pads the work to equal length or refuses the configuration with a message
that names the setting to change:

- training mini-batches: `check_training` refuses (padding would change the update);
- evaluation: `even_shard` pads each rank's prompts with repeats whose results are dropped;
- rollout chunks: `require_same_count` checks, before generating, that every rank holds as many
  prompts as the others (the engine then makes the same number of generate calls);
- Monte-Carlo step values: `refuse_multi_process` (ranks gate different numbers of groups).
"""

from __future__ import annotations

import torch

from .config import ConfigError
from .distributed import DistInfo, all_reduce


class LockstepError(ConfigError):
    """A setting under which the ranks would run different numbers of forward passes."""


def check_training(prompts_per_step: int, mini_batches: int, info: DistInfo) -> None:
    """Refuse a step whose prompts or mini-batches do not split evenly over the ranks.

    Every rank holds `prompts_per_step / world` groups; mini-batch k is the set of global
    groups g with g % mini_batches == k, so all ranks hold equally many groups of every
    mini-batch exactly when their share divides by `mini_batches` (or there is one rank).
    """
    world = info.world_size
    if prompts_per_step % world:
        raise LockstepError(f"prompts_per_step={prompts_per_step}: must divide by the number of "
                            f"processes ({world}), so that every process samples as many groups")
    per_rank = prompts_per_step // world
    if per_rank < mini_batches:
        raise LockstepError(f"mini_batches={mini_batches}: each process holds only {per_rank} "
                            "groups per step")
    if world > 1 and per_rank % mini_batches:
        raise LockstepError(
            f"mini_batches={mini_batches}: each of the {world} processes holds {per_rank} groups "
            f"per step, which do not split evenly into {mini_batches} mini-batches, so processes "
            "would run different numbers of forward passes (FSDP2 hangs); choose a mini_batches "
            "that divides prompts_per_step / processes")


def even_shard(n: int, info: DistInfo) -> tuple[list[int], int]:
    """This rank's items of range(n) (rank, rank + world, ...), padded to ceil(n / world).

    Returns the indices and how many of them are real: the padding repeats the rank's first
    item (item 0 if it has none), so every rank makes the same calls, and its results must be
    dropped. With n == 0 every rank gets nothing.
    """
    mine = list(range(info.rank, n, info.world_size))
    width = -(-n // info.world_size)
    real = len(mine)
    filler = mine[0] if mine else 0
    return mine + [filler] * (width - real) if n else [], real


def require_same_count(count: int, info: DistInfo, what: str) -> None:
    """Raise LockstepError on every rank unless all ranks pass the same `count` (one all-reduce)."""
    if not info.enabled:
        return
    # one all-reduce: the max of (count, -count) is (max, -min)
    hi_lo = all_reduce(torch.tensor([float(count), -float(count)]), info, op="max")
    hi, lo = int(hi_lo[0]), -int(hi_lo[1])
    if hi != lo:
        raise LockstepError(f"{what}: the processes hold between {lo} and {hi}, so they would run "
                            "different numbers of forward passes; this is a bug in the trainer, "
                            "please report it")


def refuse_multi_process(info: DistInfo, setting: str, why: str) -> None:
    """Refuse a setting that cannot keep the ranks in step (raised before any work)."""
    if info.enabled:
        raise LockstepError(f"{setting}: runs in a single process only ({why})")

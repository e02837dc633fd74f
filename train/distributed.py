"""Data parallelism through PyTorch distributed, launched with `torchrun` (DDP, or FSDP2).

Every rank samples the same global batch of prompts and keeps its own contiguous slice; gradients
are averaged by DDP/FSDP, and the trainer scales its loss by the world size so the update equals
the single-process one on the union of the slices.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass
class DistInfo:
    """Where this process sits in the job."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def enabled(self) -> bool:
        """True under torchrun with more than one process."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """True on the process that writes files."""
        return self.rank == 0


def setup(device: str = "auto") -> DistInfo:
    """Initialise the process group when launched by torchrun; pick this rank's device (on CPU,
    one torch thread unless OMP_NUM_THREADS says otherwise)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() if device == "auto" else device.startswith("cuda")
    if use_cuda:
        dev = torch.device("cuda", local) if device in ("auto", "cuda") else torch.device(device)
        torch.cuda.set_device(dev)
    else:
        dev = torch.device("cpu")
        if "OMP_NUM_THREADS" not in os.environ:
            # Small models gain little from intra-op threads, and on a shared machine spinning
            # threads cost 4x the CPU: a 10-step run took 255 s with 2 threads, 84-112 s with 1.
            torch.set_num_threads(1)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo", rank=rank, world_size=world)
    return DistInfo(rank, world, local, dev)


def mini_batch_rows(group_of_row: torch.Tensor, mini_batches: int, index: int) -> torch.Tensor:
    """Rows (of a rank's batch) in mini-batch `index`: those whose global group % mini_batches == index."""
    return torch.nonzero(group_of_row % mini_batches == index).flatten()


def teardown(info: DistInfo) -> None:
    """Destroy the process group if this module created one."""
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()


def wrap_model(model: torch.nn.Module, info: DistInfo, fsdp: bool) -> torch.nn.Module:
    """DDP or FSDP2 (`fully_shard` per decoder layer, then the root) under torchrun; else as is."""
    if not info.enabled:
        return model
    if fsdp:
        from torch.distributed.fsdp import fully_shard

        for layer in _decoder_layers(model):
            fully_shard(layer)
        fully_shard(model)
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [info.device.index] if info.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def _decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    inner = getattr(model, "model", model)
    layers = getattr(inner, "layers", None)
    return list(layers) if layers is not None else []


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The module inside a DDP wrapper (FSDP2 shards in place, so it is the module itself)."""
    return getattr(model, "module", model)


def all_reduce(value: torch.Tensor | float, info: DistInfo, op: str = "sum") -> torch.Tensor:
    """Sum or max a tensor (or float) over ranks; identity in a single process."""
    t = value.detach().clone() if isinstance(value, torch.Tensor) else torch.tensor(float(value))
    if not info.enabled:
        return t
    backend_device = info.device if info.device.type == "cuda" else torch.device("cpu")
    t = t.to(backend_device, torch.float64 if t.is_floating_point() else t.dtype)
    dist.all_reduce(t, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
    return t.cpu()


def gather_rows(t: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Concatenate a tensor's first dimension over ranks, in rank order (all ranks get it)."""
    if not info.enabled:
        return t
    parts = [None] * info.world_size
    dist.all_gather_object(parts, t.detach().cpu())
    return torch.cat(parts)


def gather_padded(t: torch.Tensor, info: DistInfo, fill: float | bool = 0) -> torch.Tensor:
    """`gather_rows` of tensors whose later dimensions differ by rank: each is first padded with
    `fill` to the largest size over ranks (one all-reduce of the shapes)."""
    if not info.enabled:
        return t
    sizes = [int(s) for s in all_reduce(torch.tensor(t.shape[1:], dtype=torch.float64), info, op="max")]
    if list(t.shape[1:]) != sizes:
        padded = torch.full((t.shape[0], *sizes), fill, dtype=t.dtype)
        padded[tuple(slice(0, s) for s in t.shape)] = t.cpu()
        t = padded
    return gather_rows(t, info)


def gather_objects(obj: Any, info: DistInfo) -> list[Any]:
    """Every rank's object, in rank order."""
    if not info.enabled:
        return [obj]
    parts: list[Any] = [None] * info.world_size
    dist.all_gather_object(parts, obj)
    return parts


def shard(items: list[Any], info: DistInfo) -> list[Any]:
    """This rank's contiguous slice of a list whose length divides by the world size."""
    per = len(items) // info.world_size
    return items[info.rank * per : (info.rank + 1) * per]


def grad_sync(model: torch.nn.Module, enabled: bool) -> Any:
    """Context that skips the gradient all-reduce of DDP/FSDP2 on accumulation micro-batches."""
    import contextlib

    if enabled:
        return contextlib.nullcontext()
    if hasattr(model, "no_sync"):  # DDP
        return model.no_sync()
    if hasattr(model, "set_requires_gradient_sync"):  # FSDP2

        @contextlib.contextmanager
        def _fsdp_no_sync():
            model.set_requires_gradient_sync(False)
            try:
                yield
            finally:
                model.set_requires_gradient_sync(True)

        return _fsdp_no_sync()
    return contextlib.nullcontext()

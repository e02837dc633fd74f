"""Checkpoints that lose nothing: model, optimizer, scheduler, RNG states, sampler and prompt difficulty,
step counter; written atomically (a temporary folder renamed into place, then a `latest` pointer
replaced), so a crash mid-save leaves the previous checkpoint intact.

Layout: `<output_dir>/checkpoints/step-000040/{model/ (from_pretrained-ready), trainer.pt, COMPLETE}`.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
from pathlib import Path
from typing import Any

import numpy as np
import torch
from veristep.train.distributed import DistInfo, gather_objects, unwrap

_STEP_DIR = re.compile(r"^step-(\d+)$")
COMPLETE = "COMPLETE"
_REPLACED = ".replaced-"  # prefix of a checkpoint being replaced by a re-save of its step


def rng_state() -> dict[str, Any]:
    """Every random generator the run draws from."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what `rng_state` captured."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _full_states(model: torch.nn.Module, optimizer: torch.optim.Optimizer, fsdp: bool
                 ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    if fsdp:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_state_dict(model, optimizer, options=opts)
    return unwrap(model).state_dict(), optimizer.state_dict()


def save_checkpoint(output_dir: str | Path, step: int, model: torch.nn.Module,
                    optimizer: torch.optim.Optimizer, scheduler: Any, state: dict[str, Any],
                    info: DistInfo, tokenizer: Any = None, fsdp: bool = False, keep: int = 2) -> Path:
    """Write a complete checkpoint of `step` atomically (collective under torchrun)."""
    root = Path(output_dir) / "checkpoints"
    final = root / f"step-{step:06d}"
    model_sd, optim_sd = _full_states(model, optimizer, fsdp and info.enabled)
    rngs = gather_objects(rng_state(), info)  # each rank draws its own samples
    if info.is_main:
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / f".tmp-step-{step:06d}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        hf_model = unwrap(model)
        hf_model.save_pretrained(tmp / "model", state_dict={k: v.detach().cpu() for k, v in model_sd.items()})
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp / "model")
        torch.save({"step": step, "optimizer": optim_sd,
                    "scheduler": scheduler.state_dict() if scheduler is not None else None,
                    "rng": rngs, "world_size": info.world_size, **state}, tmp / "trainer.pt")
        (tmp / COMPLETE).write_text(str(step))
        _move_into_place(tmp, final)
        latest_tmp = root / "latest.tmp"
        latest_tmp.write_text(final.name)
        os.replace(latest_tmp, root / "latest")
        _prune(root, keep)
    if info.enabled:
        torch.distributed.barrier()
    return final


def _move_into_place(tmp: Path, final: Path) -> None:
    """Rename a finished checkpoint to `final`; an existing one there is removed only after.

    A directory cannot replace a non-empty one in one rename, so the old one is first renamed
    aside (`.replaced-step-N`); a crash between the two renames leaves it complete there, where
    `latest_checkpoint` still finds it. It is deleted once the new one has landed.
    """
    if not final.exists():
        os.replace(tmp, final)
        return
    aside = final.with_name(f"{_REPLACED}{final.name}")
    shutil.rmtree(aside, ignore_errors=True)
    os.replace(final, aside)
    os.replace(tmp, final)
    shutil.rmtree(aside, ignore_errors=True)


def _prune(root: Path, keep: int) -> None:
    for aside in root.iterdir():  # an interrupted re-save's old copy, once its step is back
        if aside.name.startswith(_REPLACED) and (root / aside.name[len(_REPLACED):] / COMPLETE).exists():
            shutil.rmtree(aside, ignore_errors=True)
    done = sorted(p for p in root.iterdir() if _STEP_DIR.match(p.name) and (p / COMPLETE).exists())
    for old in done[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest complete checkpoint under `output_dir`, or None."""
    root = Path(output_dir) / "checkpoints"
    if not root.exists():
        return None
    pointer = root / "latest"
    if pointer.exists():
        candidate = root / pointer.read_text().strip()
        if (candidate / COMPLETE).exists():
            return candidate
    done = sorted(p for p in root.iterdir() if _STEP_DIR.match(p.name) and (p / COMPLETE).exists())
    # A re-save interrupted between its two renames left the old copy aside: still a checkpoint.
    aside = [p for p in root.iterdir() if p.name.startswith(_REPLACED)
             and _STEP_DIR.match(p.name[len(_REPLACED):]) and (p / COMPLETE).exists()
             and not (root / p.name[len(_REPLACED):] / COMPLETE).exists()]
    done = sorted(done + aside, key=lambda p: int(_STEP_DIR.match(p.name.removeprefix(_REPLACED)).group(1)))
    return done[-1] if done else None


def load_checkpoint(path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    scheduler: Any, info: DistInfo, fsdp: bool = False) -> dict[str, Any]:
    """Restore model, optimizer, scheduler and this rank's RNG; return the trainer state dict."""
    from safetensors.torch import load_file

    path = Path(path)
    files = sorted((path / "model").glob("*.safetensors"))
    model_sd: dict[str, torch.Tensor] = {}
    for f in files:
        model_sd.update(load_file(str(f)))
    state = torch.load(path / "trainer.pt", map_location="cpu", weights_only=False)
    if fsdp and info.enabled:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        set_state_dict(model, optimizer, model_state_dict=model_sd, optim_state_dict=state["optimizer"],
                       options=StateDictOptions(full_state_dict=True, strict=False))
    else:
        # Tied embeddings are saved once; strict=False lets the tied copy be skipped.
        missing, unexpected = unwrap(model).load_state_dict(model_sd, strict=False)
        real_missing = [m for m in missing if not _is_tied(unwrap(model), m)]
        if real_missing or unexpected:
            raise ValueError(f"resume: checkpoint {path} does not match the model "
                             f"(missing {real_missing[:5]}, unexpected {unexpected[:5]})")
        optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None and state.get("scheduler") is not None:
        scheduler.load_state_dict(state["scheduler"])
    rngs = state["rng"]
    if state.get("world_size") == info.world_size:
        set_rng_state(rngs[info.rank])
    else:  # a different world size cannot replay per-rank streams; reseed deterministically
        torch.manual_seed(int(state["step"]) * 7919 + info.rank)
    return state


def _is_tied(model: torch.nn.Module, name: str) -> bool:
    return bool(getattr(getattr(model, "config", None), "tie_word_embeddings", False)) and "lm_head" in name


class StopFlag:
    """Set by SIGTERM/SIGINT: the loop finishes its step, checkpoints and exits cleanly."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopFlag:
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: signals stay with the caller
                pass
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C means now
        self.requested = True

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

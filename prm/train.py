"""Train a PRM head on step labels: token classification at each step's last token.

The model is `AutoModelForTokenClassification` (2 classes) initialised from a causal LM (the
policy or any base); its input is the layout of `TokenClassificationScorer` (TRL's former
PRMTrainer: `[bos] + prompt + (step + sep)*`, read at the last token of each step piece), built
by that scorer's own `encode`, so what is trained is exactly what is scored. The loss is the
cross-entropy against the step's target (soft labels: the Monte-Carlo share; hard: 0/1).

Training is checkpointed to a hidden sibling folder (`.NAME.partial/`) every few steps and on
an interrupt, and resumes from it when the same command runs again. The finished model is written
to a temporary folder and moved into place, with `veristep_prm.json` written last: a folder
without it is not a finished PRM, and `load_scorer("trained:DIR")` refuses it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .mc_labels import LabelledExample

#: The file that marks a finished PRM folder; written last.
META_FILE = "veristep_prm.json"
FORMAT = "token-cls"
CHECKPOINT_FILE = "checkpoint.pt"


@dataclass(frozen=True)
class PRMTrainConfig:
    """Everything that determines a trained PRM (hashed to match a checkpoint to its run)."""

    base: str
    labels: str = "soft"  # which targets the examples carry (recorded, not used by the loop)
    steps: int = 200
    batch_size: int = 16
    lr: float = 3e-4
    weight_decay: float = 0.0
    warmup_steps: int = 10
    max_length: int = 512
    separator: str = "\n"
    step_separator: str = "\n"
    seed: int = 0
    checkpoint_every: int = 50

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "max_length", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if not self.separator or not self.step_separator:
            raise ValueError("separator and step_separator must be non-empty")


class TrainingInterrupted(Exception):
    """Training stopped early; the checkpoint to resume from is saved."""

    def __init__(self, step: int, checkpoint: Path) -> None:
        self.step, self.checkpoint = step, checkpoint
        super().__init__(f"interrupted at step {step}; checkpoint {checkpoint} (run the same "
                         "command again to resume)")


def partial_dir(output: str | Path) -> Path:
    """The hidden folder holding the resumable checkpoint of a run writing `output`."""
    out = Path(output)
    return out.parent / f".{out.name}.partial"


def fingerprint(cfg: PRMTrainConfig, examples: Sequence[LabelledExample]) -> str:
    """Hash of the config and the data: a checkpoint resumes only the run that wrote it."""
    digest = hashlib.sha256(json.dumps(asdict(cfg), sort_keys=True).encode())
    for ex in examples:
        digest.update(json.dumps([ex.prompt, ex.steps, ex.targets]).encode())
    return digest.hexdigest()[:16]


def check_output_folder(output: str | Path) -> None:
    """ValueError unless `output` is absent, empty, or an earlier trained PRM (replaced at the end)."""
    out = Path(output)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out} is a file; the PRM is written to a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / META_FILE).exists():
        raise ValueError(f"{out} exists and is not a trained PRM folder; choose another")


def load_base(base: str, device: str) -> tuple[Any, Any]:
    """The token-classification model (2 classes, new head) and tokenizer from a causal LM folder."""
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "newly initialized: score.weight" is the point, not news
    try:
        tokenizer = AutoTokenizer.from_pretrained(base)
        model = AutoModelForTokenClassification.from_pretrained(base, num_labels=2, dtype=torch.float32)
    except Exception as err:  # noqa: BLE001 - a folder that does not load is one line
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"cannot load base model {base!r}: {first}") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.config.pad_token_id = tokenizer.pad_token_id
    return model.to(device), tokenizer


def _encoder(model: Any, tokenizer: Any, cfg: PRMTrainConfig) -> Any:
    from .hf import TokenClassificationScorer

    return TokenClassificationScorer(model, tokenizer, step_separator=cfg.step_separator,
                                     separator=cfg.separator, max_length=cfg.max_length)


def _encode(encoder: Any, ex: LabelledExample) -> tuple[list[int], list[int], list[float]]:
    from .hf import _truncate

    enc = _truncate(encoder.encode(ex.prompt, ex.steps), encoder.max_length, encoder._leading_specials())
    keep = [(p, t) for p, t in zip(enc.positions, ex.targets, strict=True) if p >= 0]
    return enc.input_ids, [p for p, _ in keep], [t for _, t in keep]


def step_loss(model: Any, batch: Sequence[tuple[list[int], list[int], list[float]]], pad_id: int) -> Any:
    """Mean cross-entropy of the 2-class head at the step positions against the soft targets."""
    import torch

    device = next(model.parameters()).device
    width = max(len(ids) for ids, _, _ in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for r, (seq, _, _) in enumerate(batch):
        ids[r, :len(seq)] = torch.tensor(seq)
        mask[r, :len(seq)] = 1
    logits = model(input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False).logits
    rows = [r for r, (_, pos, _) in enumerate(batch) for _ in pos]
    cols = [p for _, pos, _ in batch for p in pos]
    target = torch.tensor([t for _, _, tg in batch for t in tg], device=device)
    logp = torch.log_softmax(logits[rows, cols].float(), dim=-1)
    return -(target * logp[:, 1] + (1 - target) * logp[:, 0]).mean()


def train_prm(examples: Sequence[LabelledExample], cfg: PRMTrainConfig, output: str | Path, *,
              device: str | None = None, progress: bool = False, restart: bool = False,
              label_budget: dict[str, Any] | None = None,
              on_step: Callable[[int, float], None] | None = None) -> dict[str, Any]:
    """Train, checkpointing as it goes, and write the finished PRM to `output`; returns its meta.

    `on_step(step, loss)` is called after each optimizer step (a KeyboardInterrupt raised there,
    or anywhere in the loop, saves a checkpoint and raises TrainingInterrupted). A checkpoint
    of another config or data is an error unless `restart`.
    """
    import torch

    from .hf import pick_device

    if not examples:
        raise ValueError("no labelled examples to train on")
    check_output_folder(output)
    device = pick_device(device)
    key = fingerprint(cfg, examples)
    part = partial_dir(output)
    ckpt_path = part / CHECKPOINT_FILE
    state = None
    if ckpt_path.exists():
        if restart:
            shutil.rmtree(part)
        else:
            state = torch.load(ckpt_path, map_location="cpu", weights_only=False)
            if state.get("fingerprint") != key:
                raise ValueError(f"{part} holds a checkpoint of another run (other data or "
                                 "settings); pass --restart to discard it")
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    model, tokenizer = load_base(cfg.base, device)
    encoder = _encoder(model, tokenizer, cfg)
    encoded = [_encode(encoder, ex) for ex in examples]
    encoded = [e for e in encoded if e[1]]
    if not encoded:
        raise ValueError("no example has a step inside max_length")
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr,
                                  weight_decay=cfg.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / max(1, cfg.warmup_steps)))
    step, losses, seconds = 0, [], 0.0
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        step, losses, seconds = state["step"], state["losses"], state["seconds"]
        torch.set_rng_state(state["torch_rng"])
        print(f"resuming PRM training at step {step}/{cfg.steps} from {part}", file=sys.stderr)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=cfg.steps, initial=step, desc="prm train", unit="step", file=sys.stderr)
    model.train()
    t_run = time.perf_counter()

    def save_checkpoint() -> None:
        part.mkdir(parents=True, exist_ok=True)
        tmp = part / f"{CHECKPOINT_FILE}.tmp-{os.getpid()}"
        torch.save({"fingerprint": key, "step": step, "losses": losses,
                    "seconds": seconds + time.perf_counter() - t_run,
                    "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "schedule": schedule.state_dict(), "torch_rng": torch.get_rng_state()}, tmp)
        os.replace(tmp, ckpt_path)  # a crash mid-write leaves the previous checkpoint intact

    try:
        while step < cfg.steps:
            # The batch of step s is a function of (seed, s) alone, so a resumed run sees the
            # same batches as one that never stopped.
            rng = random.Random(f"{cfg.seed}:{step}")
            batch = [encoded[rng.randrange(len(encoded))] for _ in range(cfg.batch_size)]
            loss = step_loss(model, batch, tokenizer.pad_token_id)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            step += 1
            losses.append(round(loss.item(), 6))
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{losses[-1]:.4f}")
            if on_step is not None:
                on_step(step, losses[-1])
            if step % cfg.checkpoint_every == 0 and step < cfg.steps:
                save_checkpoint()
    except KeyboardInterrupt:
        save_checkpoint()
        raise TrainingInterrupted(step, ckpt_path) from None
    finally:
        if bar is not None:
            bar.close()
    seconds += time.perf_counter() - t_run
    meta = {
        "format": FORMAT, "kind": "trained", "base": Path(cfg.base).name if os.path.exists(cfg.base) else cfg.base,
        "separator": cfg.separator, "step_separator": cfg.step_separator,
        "max_length": cfg.max_length, "config": {**asdict(cfg), "base": Path(cfg.base).name},
        "examples": len(encoded), "labelled_steps": sum(len(e[2]) for e in encoded),
        "train_steps": step, "train_seconds": round(seconds, 2),
        "loss_first": _mean(losses[:10]), "loss_last": _mean(losses[-10:]),
        "label_rollouts": sum(ex.rollouts for ex in examples),
        "label_budget": label_budget or {},
    }
    save_prm(model, tokenizer, output, meta)
    shutil.rmtree(part, ignore_errors=True)
    return meta


def _mean(xs: Sequence[float]) -> float:
    return round(sum(xs) / len(xs), 6) if xs else math.nan


def save_prm(model: Any, tokenizer: Any, output: str | Path, meta: dict[str, Any]) -> Path:
    """Write model, tokenizer and META_FILE (last) to a temporary folder, then move it into place."""
    def write(tmp: Path) -> dict[str, Any]:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        return meta

    return write_folder_atomically(output, write)


def write_folder_atomically(output: str | Path, write: Callable[[Path], dict[str, Any]]) -> Path:
    """Let `write` fill a temporary folder beside `output`, add META_FILE last, then swap it in.

    META_FILE holds the meta `write` returns plus the size of every weights file, so a folder
    whose weights were cut short is refused on load; an existing `output` is replaced only
    once the new folder is complete.
    """
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        meta = write(tmp)
        weights = {str(p.relative_to(tmp)): p.stat().st_size for p in sorted(tmp.rglob("*.safetensors"))}
        (tmp / META_FILE).write_text(json.dumps({**meta, "weights": weights}, indent=2) + "\n", encoding="utf-8")
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def read_meta(folder: str | Path, kind: str) -> dict[str, Any]:
    """The META_FILE of a finished PRM folder of `kind`; ValueError (one line) if it is not one."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"no folder {folder}")
    path = folder / META_FILE
    if not path.is_file():
        raise ValueError(f"{folder} is not a finished veristep PRM (no {META_FILE}: training did "
                         "not finish, or this is another kind of folder)")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: unreadable ({err})") from None
    if not isinstance(meta, dict) or meta.get("kind") != kind:
        raise ValueError(f"{folder} holds a {meta.get('kind') if isinstance(meta, dict) else '?'!r} "
                         f"PRM, not a {kind!r} one")
    for name, size in (meta.get("weights") or {}).items():
        file = folder / name
        if not file.is_file() or file.stat().st_size != size:
            raise ValueError(f"{folder}: weights file {name} is missing or has the wrong size "
                             "(a partial copy?)")
    if not meta.get("weights"):
        raise ValueError(f"{folder}: {META_FILE} lists no weights")
    return meta

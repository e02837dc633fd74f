"""Model loading for the trainer and its evaluation: the policy, its tokenizer, tokenised prompts,
the optimizer and learning-rate schedule, and the run's seeds."""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .distributed import DistInfo


def quiet_libraries() -> None:
    """Keep the console to our progress bar and step lines (no per-shard load/save bars)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def resolve_model(cfg: Any, info: DistInfo) -> str:
    """A local path or hub name for from_pretrained; builds the built-in warm start if asked."""
    if cfg.model != "builtin:warmstart":
        return cfg.model
    from .demo import warmstart

    if info.is_main:
        path = warmstart.ensure_warm_start(cfg.warmstart_dir, seed=0)
        print(f"warm start: {path} ({warmstart.describe_checksum(warmstart.load_meta(path))})",
              file=sys.stderr, flush=True)
    if info.enabled:
        torch.distributed.barrier()  # rank 0 built it; the others read the finished cache
        if not info.is_main:
            path = warmstart.ensure_warm_start(cfg.warmstart_dir, seed=0)
    return str(path)


def load_tokenizer(path: str) -> Any:
    """The tokenizer at `path`, with a pad token (the EOS if it has none)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(path: str, dtype: torch.dtype, device: torch.device) -> torch.nn.Module:
    """A causal LM from `path` in `dtype` on `device`."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return model.to(device)


def tokenize_prompts(texts: list[str], tokenizer: Any, cfg: Any) -> list[list[int]]:
    """Token ids of each prompt, left-truncated to max_prompt_len (the question's end matters most)."""
    if not texts:
        return []
    enc = tokenizer(texts, add_special_tokens=not cfg.chat_template)["input_ids"]
    return [list(ids[-cfg.max_prompt_len:]) or [tokenizer.eos_token_id] for ids in enc]


def make_optimizer(cfg: Any, model: torch.nn.Module) -> torch.optim.Optimizer:
    """AdamW, fused (one kernel for all parameters) where this torch build supports it."""
    kwargs = dict(lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2), weight_decay=cfg.weight_decay)
    params = [p for p in model.parameters() if p.requires_grad]
    plain = all(type(p.data) is torch.Tensor for p in params)  # FSDP2's DTensors use foreach
    if plain:
        try:
            return torch.optim.AdamW(params, fused=True, **kwargs)
        except (RuntimeError, ValueError):
            pass
    return torch.optim.AdamW(params, **kwargs)


def lr_lambda(cfg: Any) -> Callable[[int], float]:
    """The learning-rate factor of each step: linear warm-up, then constant, linear or cosine."""

    def factor(step: int) -> float:
        if cfg.warmup_steps and step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        span = max(1, cfg.steps - cfg.warmup_steps)
        progress = min(1.0, (step - cfg.warmup_steps) / span)
        if cfg.lr_schedule == "linear":
            return 1.0 - progress
        if cfg.lr_schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0

    return factor


def make_scheduler(cfg: Any, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LambdaLR:
    """The run's learning-rate schedule on `optimizer`."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg))

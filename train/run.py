"""Run construction: everything one training run holds, built from a `Config` in a fixed order
(the random draws of model loading and data generation come in the same order every time), with
each part that owns processes or files registered for teardown on an `ExitStack`, and resume
from the last checkpoint."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from veristep import gating

from .checkpoint import latest_checkpoint, load_checkpoint
from .config import PRM_METHODS, Config, LossSettings
from .data import Problem, PromptSampler, check_data_files, load_train_and_eval
from .distributed import DistInfo, unwrap, wrap_model
from .logprobs import resolve_dtype
from .models import (
    load_model,
    load_tokenizer,
    make_optimizer,
    make_scheduler,
    resolve_model,
    tokenize_prompts,
)
from .online_prm import restore_online_prm
from .rewards import OutcomeRewarder
from .rollout import RolloutEngine, build_engine


@dataclass
class Run:
    """The parts of one training run (`build_run`), and where it resumes (`resume`)."""

    model_path: str
    tokenizer: Any
    model: torch.nn.Module  # the policy pi_theta, wrapped for DDP / FSDP2 under torchrun
    ref_model: torch.nn.Module | None  # pi_ref, only when the KL penalty is on
    optimizer: torch.optim.Optimizer
    scheduler: Any
    train_set: list[Problem]
    eval_set: list[Problem]
    train_ids: list[list[int]]
    eval_ids: list[list[int]]
    train_refs: list[list[Any]]
    eval_refs: list[list[Any]]
    rewarder: OutcomeRewarder
    sampler: PromptSampler
    difficulty: gating.DifficultyTracker
    engine: RolloutEngine
    scorer: Any | None  # the step scorer of the PRM methods
    oracle: Any | None  # exact step labels for the credit diagnostic (the built-in task)
    pad_id: int
    loss: LossSettings
    start_step: int = 0
    state: dict[str, Any] = field(default_factory=dict)  # the trainer state of a resumed checkpoint
    checkpoint: Path | None = None


def build_run(cfg: Config, info: DistInfo, stack: ExitStack) -> Run:
    """Load the models, data, verifiers, PRM and rollout engine of `cfg`; teardown goes on `stack`."""
    device = info.device
    check_data_files(cfg.dataset, cfg.eval_dataset)  # before a warm start takes minutes to build
    model_path = resolve_model(cfg, info)
    tokenizer = load_tokenizer(cfg.tokenizer or model_path)
    dtype = resolve_dtype(cfg.dtype, device)  # forward passes; the policy's weights stay float32
    policy = load_model(model_path, torch.float32, device)
    if cfg.gradient_checkpointing:
        policy.gradient_checkpointing_enable()
    ref_model = None
    if cfg.kl_coef > 0:
        ref_model = load_model(cfg.ref_model or model_path, dtype, device).eval().requires_grad_(False)
    model = wrap_model(policy, info, cfg.fsdp)
    optimizer = make_optimizer(cfg, model)
    scheduler = make_scheduler(cfg, optimizer)

    train_set, eval_set = load_train_and_eval(cfg, tokenizer)
    rewarder = OutcomeRewarder(cfg.verifier_kinds(), cfg.verifier_weight_list(), cfg.verifier_workers)
    stack.callback(rewarder.close)  # its worker processes would otherwise outlive the run
    train_refs = rewarder.references([p.record for p in train_set])
    eval_refs = rewarder.references([p.record for p in eval_set])
    train_ids = tokenize_prompts([p.model_input for p in train_set], tokenizer, cfg)
    eval_ids = tokenize_prompts([p.model_input for p in eval_set], tokenizer, cfg)
    options = scorer_options(cfg)
    sampler = PromptSampler(len(train_set), cfg.seed)
    difficulty = gating.DifficultyTracker(alpha=cfg.difficulty_ema)
    engine = build_engine(cfg, unwrap(model), tokenizer, model_path, device, info.enabled)
    scorer = None
    if cfg.advantage in PRM_METHODS:
        scorer = build_scorer(cfg, engine, tokenizer, rewarder, train_set, train_ids, train_refs, options, info)
        _close_on_exit(stack, scorer)
    oracle = None
    if cfg.dataset.startswith("builtin:arith"):  # the credit diagnostic needs exact step labels
        from veristep.prm import load_scorer

        oracle = load_scorer("oracle", **options)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return Run(model_path, tokenizer, model, ref_model, optimizer, scheduler, train_set, eval_set, train_ids,
               eval_ids, train_refs, eval_refs, rewarder, sampler, difficulty, engine, scorer, oracle, pad_id,
               cfg.loss_settings())


def scorer_options(cfg: Config) -> dict[str, str]:
    """The step separator the PRM splits on: the flag's, or the built-in task's for builtin:arith."""
    separator = cfg.prm_separator
    if separator is None and cfg.dataset.startswith("builtin:arith"):
        from .demo.task import STEP_SEPARATOR as separator
    return {"separator": separator} if separator else {}


def build_scorer(cfg: Config, engine: Any, tokenizer: Any, rewarder: OutcomeRewarder, train_set: list[Problem],
                 train_ids: list[list[int]], train_refs: list[list[Any]], options: dict[str, str],
                 info: DistInfo) -> Any:
    """The step scorer `cfg.prm` names; `mc:k=K` samples with this run's engine and verifiers."""
    from .mc_values import build_mc_scorer, is_mc_spec
    from .online_prm import check_online_prm, is_implicit_spec

    if not is_mc_spec(cfg.prm):
        from veristep.prm import load_scorer

        if is_implicit_spec(cfg.prm):  # updated from this run's outcomes, on its reward scale
            check_online_prm(cfg.prm, info)
            options = {**options, "low": cfg.reward_low, "high": cfg.reward_high()}
        return load_scorer(cfg.prm, device=cfg.prm_device or str(info.device), **options)
    return build_mc_scorer(cfg, engine, tokenizer, rewarder, train_set, train_ids, train_refs, options, info)


def _close_on_exit(stack: ExitStack, part: Any) -> None:
    """Register `part.close()` for teardown if it has one (model PRMs hold memory and workers)."""
    close = getattr(part, "close", None)
    if callable(close):
        stack.callback(close)


def resume(run: Run, cfg: Config, out: Path, info: DistInfo) -> None:
    """With `cfg.resume`, restore the last complete checkpoint under `out` into `run`."""
    ckpt = latest_checkpoint(out) if cfg.resume else None
    if ckpt is None:
        return
    state = load_checkpoint(ckpt, run.model, run.optimizer, run.scheduler, info, cfg.fsdp)
    run.start_step, run.state, run.checkpoint = int(state["step"]), state, ckpt
    run.sampler.load_state_dict(state["sampler"])
    run.difficulty.load_state_dict(difficulty_state(state, ckpt))
    restore_online_prm(run.scorer, state, ckpt)
    run.engine.update_weights(run.model)


def difficulty_state(run_state: dict[str, Any], ckpt: Path) -> dict[str, Any]:
    """The DifficultyTracker state of a checkpoint; checkpoints before the rename call it "pool"."""
    state = run_state.get("difficulty", run_state.get("pool"))
    if not isinstance(state, dict):
        raise ValueError(f"checkpoint {ckpt} holds no prompt difficulty state (key 'difficulty'); "
                         "it was not written by this trainer, or is damaged: start without --resume")
    return state

"""The trainer's side of Monte-Carlo step values: `prm.mc_values` given this trainer's engine.

The MC scorer itself lives with the other step scorers (`veristep.prm.mc_values`); it samples
through whatever rollout engine and rewarder it is given. This module wires in the trainer's:
`build_mc_scorer` makes the `--prm mc:k=K` scorer of a run (its engine samples from the weights
being trained), and `load_policy` loads a causal LM behind the trainer's rollout engine and
verifiers as the `Policy` that `veristep prm label` / `prm traces` / `prm calibrate --scorer mc`
sample with. The scorer's names are re-exported here, where they used to live.
"""

from __future__ import annotations

from typing import Any

from veristep.prm.mc_labels import Policy
from veristep.prm.mc_values import DEFAULT_K, MCStepScorer, is_mc_spec, parse_mc_spec

from .config import Config, ConfigError
from .data import Problem
from .distributed import DistInfo
from .lockstep import refuse_multi_process
from .rewards import OutcomeRewarder

__all__ = ["DEFAULT_K", "MCStepScorer", "build_mc_scorer", "is_mc_spec", "load_policy", "parse_mc_spec"]


def build_mc_scorer(cfg: Config, engine: Any, tokenizer: Any, rewarder: OutcomeRewarder,
                    train_set: list[Problem], train_ids: list[list[int]], train_refs: list[list[Any]],
                    options: dict[str, str], info: DistInfo) -> MCStepScorer:
    """The run's `mc:k=K` scorer: continuations from `engine`, judged by the run's verifiers."""
    refuse_multi_process(info, f"prm={cfg.prm!r}", "Monte-Carlo step values: ranks gate different "
                         "numbers of groups, so their continuation calls would not line up")
    try:
        opts = parse_mc_spec(cfg.prm)
    except ValueError as err:
        raise ConfigError(f"prm={cfg.prm!r}: {err}") from None
    contexts = {p.text: (ids, refs) for p, ids, refs in zip(train_set, train_ids, train_refs, strict=True)}
    return MCStepScorer(opts["k"], engine, tokenizer, rewarder, contexts, regex=None,
                        low=cfg.reward_low, high=cfg.reward_high(), seed=cfg.seed * 7_919 + opts["seed"],
                        **options)


def load_policy(path: str, *, max_new_tokens: int = 128, temperature: float = 1.0,
                device: str | None = None, rollout: str = "hf", verifier: str = "math",
                batch_prompts: int = 0) -> Policy:
    """Load a causal LM and the trainer's rollout engine; any failure is one ValueError line."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from veristep.prm.hf import pick_device

    from .rollout import build_engine

    device = pick_device(device)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device).eval()
    except Exception as err:  # noqa: BLE001 - bad folder, missing weights, hub offline: one line
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"cannot load policy model {path!r}: {first}") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    # The engine reads only its rollout fields of the config; the rest keep their defaults.
    cfg = Config(rollout=rollout, max_completion_len=max_new_tokens, temperature=temperature,
                 rollout_batch_prompts=batch_prompts, tokenizer=path, dtype="float32",
                 vllm_gpu_memory_utilization=0.5)
    engine = build_engine(cfg, model, tokenizer, path, torch.device(device), distributed=False)
    return Policy(path, model, tokenizer, engine, OutcomeRewarder([verifier], [1.0]), device,
                  max_new_tokens)


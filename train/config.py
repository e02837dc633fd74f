"""The trainer's configuration: one dataclass that is also the command line and a YAML schema.

Precedence: dataclass defaults < YAML file (`--config run.yaml`) < explicit flags. Every field is
a flag (`--max-completion-len 256`, booleans as `--flag/--no-flag`). `Config.validate()` runs at
start-up and raises `ConfigError` naming the field to change.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .placebo import PLACEBOS

ADVANTAGE_METHODS = ("verigate", "grpo", "dr_grpo", "dapo", "avspo", "sign", "wapo", "prm_as_outcome")
LOSS_AGGREGATIONS = ("token-mean", "sequence-mean", "constant", "winner-constant")
#: Aggregations that divide by a constant (`loss_constant`, default max_completion_len).
CONSTANT_AGGREGATIONS = ("constant", "winner-constant")
#: The objective presets of `--loss`: clip range and loss aggregation. An explicit `eps_low`,
#: `eps_high` or `loss_agg` overrides its preset value; nothing else changes them.
LOSS_PRESETS: dict[str, dict[str, Any]] = {
    # DAPO (Yu et al. 2025): clip-higher and one mean over all tokens of the batch.
    "dapo-clip-higher": {"eps_low": 0.2, "eps_high": 0.28, "loss_agg": "token-mean"},
    # PPO's symmetric clip and a mean per sequence, then over sequences (the GRPO paper).
    "ppo-clip": {"eps_low": 0.2, "eps_high": 0.2, "loss_agg": "sequence-mean"},
    # Dr. GRPO (Liu et al. 2025): no 1/|o| length normalisation, one constant normaliser.
    "dr-grpo": {"eps_low": 0.2, "eps_high": 0.2, "loss_agg": "constant"},
    # WAPO's divisor: the constant normaliser over the groups that have a winner. It is a loss
    # aggregation, not part of the wapo estimator, because it divides the loss, not the
    # advantages: the estimator stays a pure function of the rewards, and any estimator can
    # be paired with any objective. Clip-higher as in the default: only the divisor differs.
    "wapo": {"eps_low": 0.2, "eps_high": 0.28, "loss_agg": "winner-constant"},
}
#: VeriGate's credit forms (`veristep.gating.Credit`).
CREDITS = ("suffix", "min", "progress", "delta", "prefix")
#: Methods whose advantages need PRM step scores (on some or all groups).
PRM_METHODS = ("verigate", "prm_as_outcome")


class ConfigError(ValueError):
    """A configuration value that cannot work; the message names the field."""


#: Fields renamed since earlier versions: old name -> new name (named in the error message).
RENAMED_FIELDS = {"pool_ema": "difficulty_ema"}


def _unknown_fields(names: list[str]) -> str:
    """The unknown field names, each with its new name where it was renamed."""
    return ", ".join(f"{n} (renamed to {RENAMED_FIELDS[n]})" if n in RENAMED_FIELDS else n
                     for n in names)


@dataclass(frozen=True)
class LossSettings:
    """The objective a run optimises: its `loss` preset with explicit fields applied."""

    preset: str
    eps_low: float
    eps_high: float
    agg: str
    constant: float  # normaliser of the constant aggregations (loss_constant or max_completion_len)

    def describe(self) -> str:
        """One line for the console, e.g. `dapo-clip-higher (eps 0.2/0.28, token-mean)`."""
        const = f", constant {self.constant:g}" if self.agg in CONSTANT_AGGREGATIONS else ""
        return f"{self.preset} (eps {self.eps_low:g}/{self.eps_high:g}, {self.agg}{const})"

    def to_dict(self) -> dict[str, Any]:
        """The resolved values under the names of the Config fields (for summary.json)."""
        return {"loss": self.preset, "eps_low": self.eps_low, "eps_high": self.eps_high,
                "loss_agg": self.agg, "loss_constant": self.constant}


@dataclass
class Config:
    """Everything a gated GRPO run needs; each field is also a command-line flag."""

    # --- run -------------------------------------------------------------------------------
    config: str | None = field(default=None, metadata={"help": "YAML file with field values (flags override it)"})
    output_dir: str = field(default="runs/gated_grpo", metadata={"help": "where metrics, checkpoints and the summary go"})
    seed: int = field(default=0, metadata={"help": "seed for sampling, data order and init"})
    steps: int = field(default=150, metadata={"help": "optimizer steps (each = one rollout batch)"})
    resume: bool = field(default=False, metadata={"help": "continue from the last complete checkpoint in output_dir"})
    checkpoint_interval: int = field(default=50, metadata={"help": "save every N steps (0: only at the end)"})
    keep_checkpoints: int = field(default=2, metadata={"help": "how many recent checkpoints to keep"})
    # --- model -----------------------------------------------------------------------------
    model: str = field(default="builtin:warmstart", metadata={"help": "HF model dir/name, or builtin:warmstart (tiny CPU model, built on first use)"})
    tokenizer: str | None = field(default=None, metadata={"help": "tokenizer path (default: the model's)"})
    dtype: str = field(default="auto", metadata={"help": "auto|float32|bfloat16|float16 (auto: bf16 on GPU, fp32 on CPU)"})
    device: str = field(default="auto", metadata={"help": "auto|cpu|cuda (auto picks cuda when present)"})
    gradient_checkpointing: bool = field(default=False, metadata={"help": "recompute activations to save memory"})
    warmstart_dir: str = field(default="runs/warmstart", metadata={"help": "cache folder for builtin:warmstart"})
    # --- data ------------------------------------------------------------------------------
    dataset: str = field(default="builtin:arith:level=medium", metadata={"help": "JSONL/Parquet path, a `datasets` name, or builtin:arith[:key=value,...]"})
    dataset_config: str | None = field(default=None, metadata={"help": "`datasets` configuration name"})
    dataset_split: str = field(default="train", metadata={"help": "`datasets` split"})
    prompt_field: str = field(default="prompt", metadata={"help": "record field holding the problem text"})
    answer_field: str = field(default="answer", metadata={"help": "record field holding the reference answer"})
    prompt_template: str = field(default="{prompt}", metadata={"help": "str.format template applied to each record"})
    chat_template: bool = field(default=False, metadata={"help": "wrap the prompt as a user turn with the tokenizer's chat template"})
    train_size: int = field(default=2000, metadata={"help": "prompts generated for builtin datasets / max records read (0: all)"})
    eval_dataset: str | None = field(default=None, metadata={"help": "held-out set (default: a disjoint builtin set, or none)"})
    eval_split: str = field(default="test", metadata={"help": "`datasets` split of eval_dataset"})
    eval_size: int = field(default=500, metadata={"help": "held-out prompts evaluated"})
    eval_interval: int = field(default=0, metadata={"help": "evaluate every N steps (0: only before and after)"})
    eval_samples: int = field(default=4, metadata={"help": "samples per eval prompt at the training temperature (0: group_size); eval/pass@G is the unbiased pass@min(G, eval_samples)"})
    eval_greedy: bool = field(default=True, metadata={"help": "also evaluate one greedy completion per prompt (eval/greedy)"})
    # --- rewards ---------------------------------------------------------------------------
    verifier: str = field(default="math", metadata={"help": "verifier kind(s), comma separated: math, code, tools, format, or module:Class / file.py:Class"})
    verifier_weights: str | None = field(default=None, metadata={"help": "comma separated weights, one per verifier (default: equal, summing to 1)"})
    verifier_workers: int | None = field(default=None, metadata={"help": "parallel workers for verify_batch"})
    prm: str = field(default="rule", metadata={"help": "PRM scorer spec for veristep.prm.load_scorer ('' for none)"})
    prm_separator: str | None = field(default=None, metadata={"help": "step separator for the PRM (default: the built-in task's for builtin:arith, else the scorer's own)"})
    prm_device: str | None = field(default=None, metadata={"help": "device for a model PRM (default: the trainer's)"})
    mask_truncated: bool = field(default=False, metadata={"help": "leave completions that hit max_completion_len out of the loss"})
    overlong_cache_len: int = field(default=0, metadata={"help": "DAPO overlong shaping window (0: off)"})
    # --- advantages ------------------------------------------------------------------------
    advantage: str = field(default="verigate", metadata={"help": "advantage estimator: " + "|".join(ADVANTAGE_METHODS) + "; the objective is chosen apart by --loss (dapo here also turns on DAPO's dynamic sampling)"})
    gate: str = field(default="all_wrong", metadata={"help": "collapsed groups sent to the PRM: all_wrong|any_collapsed"})
    tau: float = field(default=0.0, metadata={"help": "a group collapses when std(rewards) <= tau"})
    reward_low: float = field(default=0.0, metadata={"help": "a reward at or below this counts as wrong: the all_wrong gate (PRM scoring and VeriGate's branch) and gate/all_wrong_rate use it"})
    adv_std: str = field(default="sample", metadata={"help": "std convention of group normalisation, exactly one of: sample (ddof 1) | population (ddof 0)"})
    adv_eps: float = field(default=1e-4, metadata={"help": "epsilon added to the std"})
    centre_scores: bool = field(default=False, metadata={"help": "VeriGate: use 2p-1 step scores (credit suffix only)"})
    credit: str = field(default="suffix", metadata={"help": "VeriGate credit form on gated groups: suffix (suffix sums, normalised; as specified) | min (PURE: min score from the step onward, normalised) | progress (drop of the running minimum across the step, not re-centred) | delta (change of a value estimate such as mc:k=K across the step, from the group's mean first-step value: PAV's process advantage with the policy as prover) | prefix (the verified prefix rewarded, the first error charged, normalised; a scorer's neutral score is no evidence under min and prefix); docs/gating-spec.md section 8"})
    prm_agg: str = field(default="min", metadata={"help": "prm_as_outcome aggregation: min|prod|mean|last"})
    avspo_virtual: str = field(default="opposite", metadata={"help": "AVSPO virtual reward: opposite (the released rule) | fixed | random"})
    placebo: str = field(default="", metadata={"help": "control run: '' (none) | rewards (permute outcome rewards within each group) | steps (permute step scores within each gated group); both keep the gradient's size and remove its information"})
    dynamic_sampling_rounds: int = field(default=4, metadata={"help": "dapo: max extra rollout rounds to fill the batch"})
    difficulty_ema: float = field(default=0.3, metadata={"help": "EMA weight of a step's success rate in each prompt's difficulty (easy/frontier/hard; logged as difficulty/*)"})
    # --- rollout ---------------------------------------------------------------------------
    rollout: str = field(default="hf", metadata={"help": "rollout engine: hf|vllm"})
    group_size: int = field(default=4, metadata={"help": "G, completions per prompt"})
    prompts_per_step: int = field(default=16, metadata={"help": "prompts per optimizer step (global, over all ranks)"})
    max_prompt_len: int = field(default=256, metadata={"help": "prompts are left-truncated to this many tokens"})
    max_completion_len: int = field(default=100, metadata={"help": "max new tokens per completion"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling"})
    rollout_batch_prompts: int = field(default=0, metadata={"help": "hf: prompts per generate call (0: all at once)"})
    reproducible_rollouts: bool = field(default=False, metadata={"help": "hf: one generate call per prompt under its own seed, so samples do not depend on the batch or world size (slower); without it a batch's seeds seed its random stream"})
    vllm_gpu_memory_utilization: float = field(default=0.3, metadata={"help": "vllm: fraction of GPU memory for the engine"})
    vllm_sleep_mode: bool = field(default=False, metadata={"help": "vllm: free engine memory during training"})
    vllm_max_model_len: int | None = field(default=None, metadata={"help": "vllm: context length (default prompt+completion)"})
    # --- optimisation ----------------------------------------------------------------------
    lr: float = field(default=3e-5, metadata={"help": "AdamW learning rate"})
    lr_schedule: str = field(default="constant", metadata={"help": "constant|linear|cosine (after warmup)"})
    warmup_steps: int = field(default=0, metadata={"help": "linear warmup steps"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay"})
    adam_beta1: float = field(default=0.9, metadata={"help": "AdamW beta1"})
    adam_beta2: float = field(default=0.99, metadata={"help": "AdamW beta2"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping norm (0: off)"})
    loss: str = field(default="dapo-clip-higher", metadata={"help": "objective preset (clip range and aggregation): dapo-clip-higher (eps 0.2/0.28, token-mean) | ppo-clip (0.2/0.2, sequence-mean, as in the GRPO paper) | dr-grpo (0.2/0.2, constant) | wapo (0.2/0.28, winner-constant); eps_low, eps_high and loss_agg given explicitly override their preset value; never changed by --advantage"})
    eps_low: float | None = field(default=None, metadata={"help": "ratio clipped below at 1-eps_low (unset: the --loss preset's)"})
    eps_high: float | None = field(default=None, metadata={"help": "ratio clipped above at 1+eps_high, > eps_low is DAPO's clip-higher (unset: the --loss preset's)"})
    old_logprobs: str = field(default="trainer", metadata={"help": "pi_old from the trainer's forward pass or the rollout engine: trainer|engine"})
    kl_coef: float = field(default=0.0, metadata={"help": "k3 KL penalty to the reference model (0: no reference model)"})
    ref_model: str | None = field(default=None, metadata={"help": "reference model path (default: the initial policy)"})
    ppo_epochs: int = field(default=1, metadata={"help": "passes over each rollout batch"})
    mini_batches: int = field(default=1, metadata={"help": "optimizer steps per epoch (the rollout batch is split)"})
    micro_batch_size: int = field(default=0, metadata={"help": "sequences per forward pass (0: a whole mini-batch)"})
    loss_agg: str | None = field(default=None, metadata={"help": "loss aggregation (unset: the --loss preset's): token-mean (sum / tokens in the mini-batch) | sequence-mean (mean per sequence, then over sequences) | constant (sum / (sequences x loss_constant), Dr. GRPO) | winner-constant (constant, counting G sequences per group with a positive advantage only, WAPO)"})
    loss_constant: float | None = field(default=None, metadata={"help": "normaliser of loss_agg constant / winner-constant (unset: max_completion_len); an error with any other aggregation"})
    # --- distributed -----------------------------------------------------------------------
    fsdp: bool = field(default=False, metadata={"help": "shard the model with FSDP2 instead of DDP (under torchrun)"})
    # --- logging ---------------------------------------------------------------------------
    tensorboard: bool = field(default=False, metadata={"help": "also write TensorBoard events"})
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})
    log_every: int = field(default=1, metadata={"help": "console line every N steps"})

    # -------------------------------------------------------------------------------------
    def validate(self) -> Config:
        """Raise ConfigError naming the first field whose value cannot work; return self."""

        def need(ok: bool, name: str, why: str) -> None:
            if not ok:
                raise ConfigError(f"{name}={getattr(self, name)!r}: {why}")

        need(self.advantage in ADVANTAGE_METHODS, "advantage", f"choose one of {', '.join(ADVANTAGE_METHODS)}")
        need(self.placebo in PLACEBOS, "placebo", "choose rewards or steps (or leave it empty)")
        need(self.placebo != "steps" or self.advantage in PRM_METHODS, "placebo",
             f"steps permutes PRM step scores; advantage={self.advantage} uses none")
        need(self.loss in LOSS_PRESETS, "loss", f"choose one of {', '.join(LOSS_PRESETS)}")
        need(self.loss_agg is None or self.loss_agg in LOSS_AGGREGATIONS, "loss_agg",
             f"choose one of {', '.join(LOSS_AGGREGATIONS)}")
        need(self.rollout in ("hf", "vllm"), "rollout", "choose hf or vllm")
        need(self.old_logprobs in ("trainer", "engine"), "old_logprobs", "choose trainer or engine")
        need(not (self.old_logprobs == "engine" and self.rollout == "hf"), "old_logprobs",
             "the hf engine reports no log-probs; use trainer (or rollout=vllm)")
        need(self.gate in ("all_wrong", "any_collapsed"), "gate", "choose all_wrong or any_collapsed")
        need(self.adv_std in ("sample", "population"), "adv_std", "choose sample or population")
        need(self.credit in CREDITS, "credit", f"choose one of {', '.join(CREDITS)}")
        need(not (self.centre_scores and self.credit != "suffix"), "centre_scores",
             f"applies to credit=suffix only (credit={self.credit})")
        need(self.prm_agg in ("min", "prod", "mean", "last"), "prm_agg", "choose min, prod, mean or last")
        need(self.avspo_virtual in ("opposite", "fixed", "random"), "avspo_virtual", "choose opposite, fixed or random")
        need(self.lr_schedule in ("constant", "linear", "cosine"), "lr_schedule", "choose constant, linear or cosine")
        need(self.dtype in ("auto", "float32", "bfloat16", "float16"), "dtype", "choose auto, float32, bfloat16 or float16")
        need(self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:"), "device", "choose auto, cpu or cuda")
        need(self.steps >= 1, "steps", "must be >= 1")
        need(self.group_size >= 2, "group_size", "GRPO needs >= 2 completions per prompt")
        need(self.prompts_per_step >= 1, "prompts_per_step", "must be >= 1")
        need(self.max_completion_len >= 1, "max_completion_len", "must be >= 1")
        need(self.max_prompt_len >= 1, "max_prompt_len", "must be >= 1")
        need(self.temperature > 0, "temperature", "must be > 0 (sampling is required for groups to differ)")
        need(0 < self.top_p <= 1, "top_p", "must be in (0, 1]")
        need(self.lr > 0, "lr", "must be > 0")
        need(self.eps_low is None or 0 <= self.eps_low < 1, "eps_low", "must be in [0, 1)")
        need(self.eps_high is None or self.eps_high >= 0, "eps_high", "must be >= 0")
        need(self.kl_coef >= 0, "kl_coef", "must be >= 0")
        need(self.ppo_epochs >= 1, "ppo_epochs", "must be >= 1")
        need(self.mini_batches >= 1, "mini_batches", "must be >= 1")
        need(self.rollout_batch_prompts >= 0, "rollout_batch_prompts", "must be >= 0")
        need(self.micro_batch_size >= 0, "micro_batch_size", "must be >= 0")
        need(self.max_grad_norm >= 0, "max_grad_norm", "must be >= 0")
        need(self.tau >= 0, "tau", "must be >= 0")
        need(self.adv_eps >= 0, "adv_eps", "must be >= 0")
        need(self.eval_size >= 0 and self.eval_interval >= 0, "eval_interval", "must be >= 0")
        need(self.eval_samples >= 0, "eval_samples", "must be >= 0")
        need(self.checkpoint_interval >= 0, "checkpoint_interval", "must be >= 0")
        need(self.keep_checkpoints >= 1, "keep_checkpoints", "must be >= 1")
        need(0 < self.difficulty_ema <= 1, "difficulty_ema", "must be in (0, 1]")
        need(self.dynamic_sampling_rounds >= 0, "dynamic_sampling_rounds", "must be >= 0")
        need(0 <= self.overlong_cache_len < self.max_completion_len or self.overlong_cache_len == 0,
             "overlong_cache_len", "must be smaller than max_completion_len")
        need(self.loss_constant is None or self.loss_constant > 0, "loss_constant", "must be > 0")
        agg = self.loss_settings().agg
        need(self.loss_constant is None or agg in CONSTANT_AGGREGATIONS, "loss_constant",
             f"only the constant aggregations use it, and this run's loss_agg is {agg} "
             f"(loss={self.loss}); drop it or set loss_agg")
        need(0 < self.vllm_gpu_memory_utilization <= 1, "vllm_gpu_memory_utilization", "must be in (0, 1]")
        need(not (self.advantage in PRM_METHODS and not self.prm), "prm",
             f"advantage={self.advantage} needs a PRM scorer spec (e.g. 'rule')")
        kinds = self.verifier_kinds()
        need(len(kinds) >= 1, "verifier", "name at least one verifier kind")
        if self.verifier_weights is not None:
            try:
                weights = [float(w) for w in self.verifier_weights.split(",")]
            except ValueError:
                raise ConfigError(f"verifier_weights={self.verifier_weights!r}: not a comma separated list of numbers") from None
            need(len(weights) == len(kinds), "verifier_weights", f"give one weight per verifier ({len(kinds)})")
        need(self.mini_batches <= self.prompts_per_step * self.group_size, "mini_batches",
             "cannot exceed the number of sequences per step")
        need(self.reward_low < self.reward_high(), "reward_low",
             f"must be below the correct reward {self.reward_high():g} (the sum of verifier_weights)")
        if self.rollout == "vllm":
            need(self.dtype != "float16" or self.device != "cpu", "dtype", "vllm on CPU needs float32 or bfloat16")
        return self

    def loss_settings(self) -> LossSettings:
        """The objective of this run: the `loss` preset, overridden by explicit fields."""
        preset = LOSS_PRESETS[self.loss]
        return LossSettings(
            preset=self.loss,
            eps_low=float(preset["eps_low"] if self.eps_low is None else self.eps_low),
            eps_high=float(preset["eps_high"] if self.eps_high is None else self.eps_high),
            agg=preset["loss_agg"] if self.loss_agg is None else self.loss_agg,
            constant=float(self.loss_constant or self.max_completion_len),
        )

    def reward_high(self) -> float:
        """The reward of a fully correct completion: the sum of the verifier weights."""
        return float(sum(self.verifier_weight_list()))

    def verifier_kinds(self) -> list[str]:
        """The verifier kinds, in order."""
        return [k.strip() for k in self.verifier.split(",") if k.strip()]

    def verifier_weight_list(self) -> list[float]:
        """One weight per verifier kind; equal weights summing to 1 by default."""
        kinds = self.verifier_kinds()
        if self.verifier_weights is None:
            return [1.0 / len(kinds)] * len(kinds)
        return [float(w) for w in self.verifier_weights.split(",")]

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (for YAML/JSON)."""
        return dataclasses.asdict(self)


# ----------------------------------------------------------------------------------------------
# Command line and YAML


def _field_type(f: dataclasses.Field) -> type:
    """The scalar type behind a field annotation such as `int | None`."""
    hints = typing.get_type_hints(Config)
    tp = hints[f.name]
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return tp


def add_config_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add one flag per Config field; unset flags stay absent so YAML values survive."""
    for f in dataclasses.fields(Config):
        tp = _field_type(f)
        flags = [f"--{f.name.replace('_', '-')}"]
        help_text = f.metadata.get("help", "")
        # a None default is explained by the help text itself ("default: the model's")
        default_text = "" if f.default is None or "default" in help_text else f" (default: {f.default})"
        if tp is bool:
            parser.add_argument(*flags, dest=f.name, action=argparse.BooleanOptionalAction,
                                default=argparse.SUPPRESS, help=help_text + default_text)
        else:
            parser.add_argument(*flags, dest=f.name, type=tp, default=argparse.SUPPRESS,
                                metavar=tp.__name__.upper(), help=help_text + default_text)
    return parser


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping of Config fields; unknown keys raise ConfigError."""
    import yaml

    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"config={str(path)!r}: the YAML file must hold a mapping of field: value")
    names = {f.name for f in dataclasses.fields(Config)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"config={str(path)!r}: unknown field(s) {_unknown_fields(unknown)}")
    return {k.replace("-", "_"): v for k, v in data.items()}


def config_from_namespace(args: argparse.Namespace) -> Config:
    """Build a validated Config from parsed flags, applying the YAML file first."""
    explicit = {f.name: getattr(args, f.name) for f in dataclasses.fields(Config) if hasattr(args, f.name)}
    values: dict[str, Any] = {}
    if explicit.get("config"):
        values.update(load_yaml(explicit["config"]))
    values.update(explicit)
    return make_config(**values)


def make_config(**values: Any) -> Config:
    """Build and validate a Config from keyword values (unknown names raise ConfigError)."""
    names = {f.name for f in dataclasses.fields(Config)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ConfigError(f"unknown config field(s): {_unknown_fields(unknown)}")
    return Config(**values).validate()


def parse_args(argv: list[str] | None = None) -> Config:
    """Parse the command line of `python train/gated_grpo.py` into a validated Config."""
    parser = argparse.ArgumentParser(
        prog="gated_grpo.py",
        description="GRPO with VeriGate advantage gating (defaults: tiny built-in task on CPU).",
    )
    add_config_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return config_from_namespace(args)
    except ConfigError as err:
        parser.error(str(err))
        raise  # unreachable: parser.error exits

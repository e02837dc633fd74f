"""`load_scorer(spec)`: one string names any scorer, for the CLI, the trainer and the benchmark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .base import StepScorer

#: Spec prefixes and what they load.
SCORER_KINDS = {
    "rule": "model-free arithmetic checker (veristep.prm.rule.RuleScorer)",
    "hf": "Qwen2.5-Math-PRM style: <extra_0> separators, 2-class head (hf:PATH)",
    "token-cls": "AutoModelForTokenClassification in TRL PRMTrainer layout (token-cls:PATH)",
    "shepherd": "Math-Shepherd causal LM, P(+) vs P(-) at the ' ки' tag (shepherd:PATH)",
    "scores": "precomputed step scores from a JSONL file (scores:FILE)",
    "oracle": "built-in task only: 1 iff a step is the reference solution's step "
              "(oracle, oracle:eps=0.2[,seed=N] flips each label with probability eps)",
    "mc": "Monte-Carlo step values from policy rollouts (mc:k=4); built by the trainer, which "
          "owns the policy and the verifier",
    "trained": "a PRM written by `veristep prm train` (trained:DIR; refuses an unfinished folder)",
    "implicit": "PRIME implicit PRM: beta*log(pi_phi/pi_ref) summed per step (implicit:DIR[,beta=B,lr=L,"
                "mode=q|step,batch_size=N,max_length=N], DIR a causal LM to start from or a saved "
                "implicit PRM)",
}

_MODEL_KWARGS = ("separator", "regex", "batch_size", "max_length", "neutral")
_IMPLICIT_KWARGS = ("separator", "regex", "batch_size", "max_length", "beta", "lr", "mode", "dtype",
                    "low", "high")


def load_scorer(spec: str, device: str | None = None, **kw: Any) -> StepScorer:
    """Build the scorer named by `spec`: rule, oracle[:eps=E,seed=N], hf:PATH, token-cls:PATH, shepherd:PATH, scores:FILE, trained:DIR, implicit:DIR.

    Keyword options go to the scorer (separator, regex, neutral, batch_size, max_length,
    step_separator, step_token, step_tag, system_prompt, ...); `trust_remote_code=True` lets a
    checkpoint that ships its own model class load (Qwen2.5-Math-PRM does). A PATH that is not
    a local folder is treated as a hub name, the only case in which anything is downloaded.
    """
    kind, _, target = spec.partition(":")
    kind = kind.strip().lower()
    if kind == "rule":
        from .rule import RuleScorer

        if target:
            raise ValueError(f"the rule scorer takes no path, got {spec!r}")
        return RuleScorer(**_only(kw, ("neutral", "separator", "regex")))
    if kind == "oracle":
        from .options import parse_options
        from .oracle import OracleScorer

        return OracleScorer(**parse_options(target, {"eps": float, "seed": int}),
                            **_only(kw, ("separator", "regex")))
    if kind == "mc":
        raise ValueError(f"{spec!r}: Monte-Carlo step values sample continuations with a policy; use "
                         "it as the trainer's --prm, or `veristep prm calibrate --scorer mc:k=K --policy DIR` "
                         "(veristep.prm.mc_values)")
    if kind not in SCORER_KINDS:
        known = ", ".join(f"{k}{'' if k in ('rule', 'oracle', 'mc') else ':PATH'}" for k in SCORER_KINDS)
        raise ValueError(f"unknown scorer spec {spec!r}; use one of {known}")
    if not target:
        raise ValueError(f"scorer spec {spec!r} needs a path: {kind}:PATH")
    if kind == "scores":
        from .precomputed import PrecomputedScorer

        return PrecomputedScorer(target, **_only(kw, ("separator", "regex")))
    if kind == "trained":
        return _load_trained(target, device, **kw)
    if kind == "implicit":
        from .implicit import load_implicit, parse_implicit_target

        path, options = parse_implicit_target(target)  # the spec's options win over keywords
        return load_implicit(path, device=device, **{**_only(kw, _IMPLICIT_KWARGS), **options})
    return _load_model_scorer(kind, target, device, **kw)


def _only(kw: dict[str, Any], allowed: tuple[str, ...]) -> dict[str, Any]:
    extra = sorted(set(kw) - set(allowed))
    if extra:
        raise ValueError(f"unexpected scorer options {extra}; this scorer accepts {list(allowed)}")
    return dict(kw)


def _load_trained(path: str, device: str | None, **kw: Any) -> StepScorer:
    """A `veristep prm train` folder: checked finished, then read as token-cls with its own separators."""
    from .train import FORMAT, read_meta

    meta = read_meta(path, "trained")
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path}: unknown trained-PRM format {meta.get('format')!r}")
    options = {"separator": meta["separator"], "step_separator": meta["step_separator"],
               "max_length": meta.get("max_length"), **kw}
    scorer = _load_model_scorer("token-cls", path, device, **options)
    scorer.veristep_meta = meta  # label and training cost, for reports
    return scorer


def _load_model_scorer(kind: str, path: str, device: str | None, **kw: Any) -> StepScorer:
    from transformers import (
        AutoConfig,
        AutoModel,
        AutoModelForCausalLM,
        AutoModelForTokenClassification,
        AutoTokenizer,
    )

    from .hf import (
        QwenPRMScorer,
        ShepherdScorer,
        TokenClassificationScorer,
        pick_device,
        pick_dtype,
    )

    trust = bool(kw.pop("trust_remote_code", False))
    dtype = kw.pop("dtype", None)
    device = pick_device(device)
    dtype = dtype or pick_dtype(device)
    extra_keys = {"hf": ("step_token", "system_prompt"), "token-cls": ("step_separator",),
                  "shepherd": ("step_tag", "good_token", "bad_token")}[kind]
    options = _only(kw, _MODEL_KWARGS + extra_keys)
    if Path(path).exists() and not Path(path).is_dir():
        raise ValueError(f"{path} is a file; a {kind}: scorer needs a checkpoint folder")
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust)
    if kind == "shepherd":
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, trust_remote_code=trust)
        cls = ShepherdScorer
    else:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust)
        auto_map = getattr(config, "auto_map", None) or {}
        if kind == "hf" and "AutoModel" in auto_map:
            # Qwen2.5-Math-PRM ships its own head; the built-in token-classification class
            # would load with a different, randomly initialised head.
            if not trust:
                raise ValueError(
                    f"{path} ships its own model code ({auto_map['AutoModel']}); pass "
                    "trust_remote_code=True (CLI: --trust-remote-code) if you trust it"
                )
            model = AutoModel.from_pretrained(path, dtype=dtype, trust_remote_code=True)
        else:
            model = AutoModelForTokenClassification.from_pretrained(
                path, dtype=dtype, trust_remote_code=trust
            )
        cls = QwenPRMScorer if kind == "hf" else TokenClassificationScorer
    model.to(device)
    return cls(model, tokenizer, **options)

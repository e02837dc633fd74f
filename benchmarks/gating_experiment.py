"""Does step supervision help? Arms against GRPO at equal rollout budgets, paired by seed.

Trains the built-in warm start on the built-in step-wise arithmetic task with the trainer
(`veristep.train.gated_grpo.train`, its default recipe: medium level, G = 4 x 16 prompts, lr 3e-5,
150 steps), once per arm and seed. Arms (`--arms`; `--probe-credit` is the credit form of the
placebo and oracle arms):

    grpo            outcome GRPO (the positive control: it must gain >= 5 points)
    suffix          VeriGate, rule PRM, suffix-sum credit (VeriGate as specified)
    min             VeriGate, rule PRM, PURE min-form credit
    progress        VeriGate, rule PRM, progress credit (drop of the running minimum)
    placebo         VeriGate, rule PRM, probe credit, step scores permuted within each gated group
    mc              VeriGate, Monte-Carlo step values (mc:k=4), delta credit (change in value)
    mc_steps        the same for GRPO's number of optimizer steps, its continuations not charged:
                    a mechanism check (is the signal worth anything per step?), not an equal budget
    oracle          VeriGate, exact oracle step labels, probe credit
    oracle_eps0.2   the same with 20 % of the labels flipped (and oracle_eps0.4: 40 %)
    avspo, sign, dapo   outcome-only alternatives

Equal budgets: every arm may use steps x prompts x G rollouts; arms that spend extra rollouts
(DAPO's resampling, the Monte-Carlo continuations) train in chunks (`--resume`) until the budget
is spent, so they take fewer optimizer steps. Seeds pair the arms: seed s gives every arm the same
warm start, data order, sampling seeds and held-out evaluation (common random numbers).

Statistics per arm against GRPO, over seeds: the paired mean difference of the final held-out
pass@1 (T = 1) and greedy accuracy, its 95 % CI (t over seeds), and the exact two-sided sign-flip
permutation p-value; the eval-noise SE (prompts as the unit, within seeds) beside it. The reading
rule is fixed in docs/experiment.md before the runs.

Writes benchmarks/results/gating_experiment.json and .png (learning curves of held-out pass@1
against rollouts consumed, with 95 % CIs; paired differences; the credit diagnostic).

    python benchmarks/gating_experiment.py                       # the full design (hours on a CPU)
    python benchmarks/gating_experiment.py --arms grpo,suffix,progress,placebo,oracle --seeds 2 \\
        --eval-size 500 --eval-interval 75                     # a reduced run
    python benchmarks/gating_experiment.py --quick               # smoke run, seconds a run
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import shutil
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_RESULTS = REPO / "benchmarks" / "results" / "gating_experiment"

#: Arm name -> trainer fields. PROBE_ARMS also take the probe credit form.
ARMS: dict[str, dict[str, Any]] = {
    "grpo": {"advantage": "grpo"},
    "suffix": {"advantage": "verigate", "prm": "rule", "credit": "suffix"},
    "min": {"advantage": "verigate", "prm": "rule", "credit": "min"},
    "progress": {"advantage": "verigate", "prm": "rule", "credit": "progress"},
    "placebo": {"advantage": "verigate", "prm": "rule", "placebo": "steps"},
    # Monte-Carlo values are values, not local correctness: their credit is the change in value.
    "mc": {"advantage": "verigate", "prm": "mc:k=4", "credit": "delta"},
    "mc_steps": {"advantage": "verigate", "prm": "mc:k=4", "credit": "delta"},
    "oracle": {"advantage": "verigate", "prm": "oracle"},
    "oracle_eps0.2": {"advantage": "verigate", "prm": "oracle:eps=0.2"},
    "oracle_eps0.4": {"advantage": "verigate", "prm": "oracle:eps=0.4"},
    "avspo": {"advantage": "avspo"},
    "sign": {"advantage": "sign"},
    "dapo": {"advantage": "dapo"},
    # The step-credit condition's arms (chain8): exact labels with the verified prefix rewarded
    # (the positive control of step supervision), the same labels as negative-only blame, the
    # same labels permuted within each gated group (same |A| mass, no information), GRPO at the
    # learning rate that matches that mass, and the practical scorers.
    "oracle_prefix": {"advantage": "verigate", "prm": "oracle", "credit": "prefix"},
    "oracle_blame": {"advantage": "verigate", "prm": "oracle", "credit": "progress"},
    "placebo_prefix": {"advantage": "verigate", "prm": "oracle", "credit": "prefix", "placebo": "steps"},
    "grpo_lr": {"advantage": "grpo"},
    "rule_prefix": {"advantage": "verigate", "prm": "rule", "credit": "prefix"},
    # PRIME's implicit PRM started from the run's own warm start (pi_phi = pi_ref: every score 0.5
    # at first) and updated online from each step's outcomes; lr as in prm_builtin_calibration.py.
    "implicit_prefix": {"advantage": "verigate", "prm": "implicit:{warmstart},lr=5e-4", "credit": "prefix"},
}
PROBE_ARMS = ("placebo", "oracle", "oracle_eps0.2", "oracle_eps0.4")
#: Arms that spend rollouts beyond the batch (they train in chunks up to the budget).
COSTLY_ARMS = ("mc", "dapo")
#: Datasets of the conditions: the default recipe's level, a harder mix, and the step-credit
#: condition (8-step +/- chains on a warm start of its own, docs/experiment.md).
CONDITIONS = {
    "medium": "builtin:arith:level=medium",
    # 3-4 steps, operands up to 14 and factors up to 7: between the medium and hard presets.
    "stress": "builtin:arith:min_steps=3,max_steps=4,max_operand=14,max_factor=7",
    "chain8": "builtin:arith:level=chain8",
}
#: What a condition changes beyond its dataset: its warm start (a CONDITION_RECIPES name of
#: veristep.train.demo.warmstart and its cache folder), trainer fields, and the arms its reading
#: compares (the baseline, the placebo, and the ceiling that practical scorers are a share of).
CONDITION_SETUP: dict[str, dict[str, Any]] = {
    "chain8": {"warmstart": "chain8", "warmstart_dir": "runs/warmstart-chain8",
               "overrides": {"max_completion_len": 180},
               "placebo_arm": "placebo_prefix", "ceiling_arm": "oracle_prefix", "equivalence_margin": 0.02,
               "full_eval_size": 400,
               "arms": "grpo,oracle_prefix,placebo_prefix,rule_prefix",
               "extra_arms": "oracle_blame,grpo_lr,mc",
               # (arm, against) at equal lr x |A| mass: the follow-ups of docs/experiment.md
               "matched_pairs": [("oracle_prefix@lr0.62", "grpo"), ("oracle_prefix", "grpo_lr"),
                                 ("oracle_prefix@lr1.62", "grpo@lr2.62"), ("oracle_prefix@lr2.62", "grpo@lr4.24")]},
}
#: The committed results of a condition's full experiment, which `--brief` prints beside a run.
REFERENCE_RESULTS = {"chain8": REPO / "benchmarks" / "results" / "gating_experiment_chain8.json"}
#: Step metrics averaged over a run: the credit diagnostic and the advantage coverage.
DIAGNOSTIC_KEYS = ("gate/first_error_blamed", "credit/adv_on_track", "credit/adv_first_error",
                   "credit/adv_after_error", "credit/adv_answer", "adv/nonzero_frac")
READING_RULE_CHAIN8 = (
    "Step supervision can help in this condition if the positive control, oracle_prefix, beats GRPO "
    "(final held-out pass@1 at T = 1, paired over seeds: 95 % CI above 0) and beats placebo_prefix "
    "(CI above 0). A practical scorer helps if its CI against GRPO is above 0 and it beats the placebo "
    "by >= 1.5 points; it is equivalent to GRPO if its CI lies within +-2 points (the equivalence "
    "margin); otherwise it is a null, reported with its CI. Each practical scorer's gain over GRPO is "
    "also given as a share of oracle_prefix's gain, with a bootstrap CI over seeds. GRPO itself must "
    "learn (gain CI above 0), or the condition is void.")
READING_RULE = ("An arm helps if its paired difference to GRPO (final held-out pass@1 at T = 1, "
                "over seeds) has a 95 % CI above 0 and it beats the step placebo by >= 1.5 points; "
                "it hurts if the CI is below 0; otherwise the result is a null, reported with the "
                "CI as the size of effect it excludes. The experiment counts only if GRPO's own gain "
                "(positive control) is >= 5 points.")
#: Two-sided 97.5 % quantiles of Student's t for 1..30 degrees of freedom (scipy is not a dependency).
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042)


@dataclass
class Settings:
    """What every run shares; None keeps the trainer's default (its recipe)."""

    dataset: str = CONDITIONS["medium"]
    steps: int = 150
    group_size: int = 4
    prompts_per_step: int = 16
    eval_size: int = 1000
    eval_samples: int = 4
    eval_interval: int = 50
    probe_credit: str = "progress"
    warmstart_dir: str = "runs/warmstart"
    device: str = "cpu"
    overrides: dict[str, Any] = field(default_factory=dict)
    #: learning rate of the grpo_lr arm as a multiple of the others' (matches their |A| mass)
    grpo_lr_scale: float = 1.0
    #: held-out prompts of the per-step diagnosis of each final model (0: none)
    mechanism_prompts: int = 0

    @property
    def rollout_budget(self) -> int:
        """Training rollouts each run may use (MC continuations and DAPO resamples included)."""
        return self.steps * self.prompts_per_step * self.group_size


# ------------------------------------------------------------------------------------------
# Statistics (pure functions; tested in tests/gating/test_experiment_stats.py)


def t975(df: int) -> float:
    """Student's t 97.5 % quantile (df >= 1; the normal 1.96 beyond the table)."""
    if df < 1:
        return math.nan
    return T975[df - 1] if df <= len(T975) else 1.96


def mean_ci95(values: list[float]) -> dict[str, Any]:
    """Mean, sample sd, n and the 95 % t-interval of the mean (None bounds for n < 2)."""
    n = len(values)
    if not n:
        return {"mean": None, "sd": None, "n": 0, "ci95": [None, None]}
    mean = statistics.fmean(values)
    if n < 2:
        return {"mean": mean, "sd": None, "n": 1, "ci95": [None, None]}
    sd = statistics.stdev(values)
    half = t975(n - 1) * sd / math.sqrt(n)
    return {"mean": mean, "sd": sd, "n": n, "ci95": [mean - half, mean + half]}


def sign_flip_p(diffs: list[float]) -> float | None:
    """Exact two-sided sign-flip permutation p-value of mean(diffs) = 0 (all 2^n sign vectors).

    With n pairs the smallest possible value is 2 / 2^n (0.5 for 2 seeds, 1/32 for 6).
    """
    n = len(diffs)
    if not n or n > 20:
        return None
    observed = abs(sum(diffs))
    hits = sum(abs(sum(s * d for s, d in zip(signs, diffs, strict=True))) >= observed - 1e-12
               for signs in itertools.product((1, -1), repeat=n))
    return hits / 2**n


def eval_noise_se(per_seed_diffs: list[list[float]]) -> float | None:
    """SE of the mean paired difference from the evaluation alone (prompts as the unit, per seed)."""
    parts = []
    for diffs in per_seed_diffs:
        if len(diffs) > 1:
            parts.append(statistics.variance(diffs) / len(diffs))
    if not parts:
        return None
    return math.sqrt(sum(parts)) / len(parts)


def paired(runs_a: dict[int, dict[str, Any]], runs_b: dict[int, dict[str, Any]], key: str) -> dict[str, Any]:
    """Arm a minus arm b on `key` ("pass@1" or "greedy"), paired by seed."""
    seeds = sorted(set(runs_a) & set(runs_b))
    diffs, per_prompt = [], []
    for s in seeds:
        a, b = runs_a[s]["final"], runs_b[s]["final"]
        if a.get(key) is None or b.get(key) is None:
            continue
        diffs.append(a[key] - b[key])
        pa, pb = a.get(f"{key}_per_prompt"), b.get(f"{key}_per_prompt")
        if pa and pb and len(pa) == len(pb):
            per_prompt.append([x - y for x, y in zip(pa, pb, strict=True)])
    out = mean_ci95(diffs)
    out.update({"seeds": seeds, "diffs": diffs, "p_sign_flip": sign_flip_p(diffs),
                "eval_noise_se": eval_noise_se(per_prompt)})
    return out


def share_of_ceiling(runs: dict[int, dict[str, Any]], grpo: dict[int, dict[str, Any]],
                     ceiling: dict[int, dict[str, Any]], resamples: int = 4000) -> dict[str, Any]:
    """An arm's gain over GRPO as a share of the ceiling arm's, with a bootstrap 95 % CI over seeds.

    Seeds are resampled as units (each keeps its paired arm, GRPO and ceiling runs); a resample
    whose ceiling gain is not positive has no share and is left out (their count is reported).
    """
    import random

    seeds = sorted(set(runs) & set(grpo) & set(ceiling))
    arm_d = [runs[s]["final"]["pass@1"] - grpo[s]["final"]["pass@1"] for s in seeds]
    ceil_d = [ceiling[s]["final"]["pass@1"] - grpo[s]["final"]["pass@1"] for s in seeds]
    if not seeds or statistics.fmean(ceil_d) <= 0:
        return {"share": None, "ci95": [None, None], "seeds": seeds, "undefined_resamples": None}
    share = statistics.fmean(arm_d) / statistics.fmean(ceil_d)
    rng, shares, undefined = random.Random(0), [], 0
    for _ in range(resamples):
        pick = [rng.randrange(len(seeds)) for _ in seeds]
        den = statistics.fmean(ceil_d[i] for i in pick)
        if den <= 0:
            undefined += 1
            continue
        shares.append(statistics.fmean(arm_d[i] for i in pick) / den)
    shares.sort()
    ci = [shares[int(0.025 * len(shares))], shares[min(len(shares) - 1, int(0.975 * len(shares)))]] if shares else [None, None]
    return {"share": share, "ci95": ci, "seeds": seeds, "undefined_resamples": undefined}


def verdict(vs_grpo: dict[str, Any], vs_placebo: dict[str, Any] | None, margin: float | None = None) -> str:
    """The reading rule applied to one arm; with a `margin`, a CI inside +-margin reads as equivalence."""
    lo, hi = vs_grpo["ci95"]
    if lo is None:
        return "too few seeds for a CI"
    if margin is not None and -margin < lo and hi < margin:
        return f"equivalent to GRPO within +-{100 * margin:.0f} points: CI [{100 * lo:+.1f}, {100 * hi:+.1f}]"
    if lo > 0 and vs_placebo is not None and (vs_placebo["mean"] or 0) >= 0.015:
        return "helps"
    if lo > 0:
        return "above GRPO, but not >= 1.5 points over the placebo"
    if hi < 0:
        return "hurts"
    return f"null: CI [{100 * lo:+.1f}, {100 * hi:+.1f}] points"


# ------------------------------------------------------------------------------------------
# Runs


def split_arm(arm: str) -> tuple[str, float]:
    """An arm name's base arm and learning-rate multiple: `ARM@lrS` is ARM at S times the lr."""
    base, sep, suffix = arm.partition("@")
    if base not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; choose from {', '.join(ARMS)} (optionally ARM@lrS, e.g. grpo@lr2)")
    if not sep:
        return base, 1.0
    try:
        scale = float(suffix[2:]) if suffix.startswith("lr") else float("nan")
    except ValueError:
        scale = float("nan")
    if not scale > 0:
        raise ValueError(f"arm {arm!r}: expected ARM@lrS with S a positive learning-rate multiple")
    return base, scale


def trainer_values(settings: Settings, arm: str, seed: int, out: Path, steps: int, resume: bool) -> dict[str, Any]:
    """Trainer fields of one run (or one chunk of a costly arm)."""
    arm, lr_scale = split_arm(arm)
    values = dict(seed=seed, steps=steps, resume=resume, output_dir=str(out), dataset=settings.dataset,
                  group_size=settings.group_size, prompts_per_step=settings.prompts_per_step,
                  eval_size=settings.eval_size, eval_samples=settings.eval_samples,
                  eval_interval=settings.eval_interval, warmstart_dir=settings.warmstart_dir,
                  device=settings.device, checkpoint_interval=0, keep_checkpoints=1, progress=False,
                  log_every=10**9)
    values.update(ARMS[arm])
    if values.get("prm"):
        values["prm"] = values["prm"].replace("{warmstart}", settings.warmstart_dir)
    if arm in PROBE_ARMS:
        values["credit"] = settings.probe_credit
    values.update(settings.overrides)
    if arm == "grpo_lr":
        lr_scale *= settings.grpo_lr_scale
    if lr_scale != 1.0:
        from veristep.train.config import Config

        values["lr"] = float(values.get("lr", Config.lr)) * lr_scale
    return values


def next_chunk(done: int, used: int, budget: int, per_step: int) -> int:
    """Steps of a costly arm's next training call (0: stop), so its rollouts stay within budget.

    A step costs one batch or many (Monte-Carlo continuations: 20x on chain8), unknown until one
    has run: the first call is one step; later ones are sized by the mean cost so far, and the
    run stops when the next step would not fit.
    """
    if not done:
        return 1 if budget >= per_step else 0
    rate, left = used / done, budget - used
    if left < rate or left < per_step:
        return 0
    return max(1, int(0.8 * left / rate))


def run_arm(settings: Settings, arm: str, seed: int, out_root: Path) -> dict[str, Any]:
    """Train one arm with one seed within the rollout budget; return its record."""
    from veristep.train.config import make_config
    from veristep.train.gated_grpo import train

    out = out_root / f"{arm}-seed{seed}"
    shutil.rmtree(out, ignore_errors=True)
    budget, per_step = settings.rollout_budget, settings.prompts_per_step * settings.group_size
    t0 = time.perf_counter()
    if split_arm(arm)[0] not in COSTLY_ARMS:
        summary = train(make_config(**trainer_values(settings, arm, seed, out, settings.steps, False)))
        calls = 1
    else:
        done, used, calls, summary = 0, 0, 0, {}
        while chunk := next_chunk(done, used, budget, per_step):
            summary = train(make_config(**trainer_values(settings, arm, seed, out, done + chunk, done > 0)))
            calls += 1
            done, used = int(summary["steps"]), int(summary["rollouts"])
    record = collect(arm, seed, summary, out, time.perf_counter() - t0, calls)
    if settings.mechanism_prompts > 0:
        record["mechanism"] = mechanism(out, settings, seed)
    return record


def mechanism(out: Path, settings: Settings, seed: int) -> dict[str, Any] | None:
    """Per-step accuracy and first-error kinds of the run's final model (the mechanism endpoint)."""
    import importlib.util

    from veristep.train.checkpoint import latest_checkpoint

    ckpt = latest_checkpoint(out)
    if ckpt is None or not (ckpt / "model").is_dir():
        return None
    path = Path(__file__).resolve().parent / "step_condition_gate.py"
    spec = importlib.util.spec_from_file_location("step_condition_gate", path)
    gate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gate)
    level = settings.dataset.rpartition("level=")[2] if "level=" in settings.dataset else "chain8"
    rep = gate.measure(ckpt / "model", settings.mechanism_prompts, settings.group_size, seed=seed,
                       max_new_tokens=int(settings.overrides.get("max_completion_len", 180)), level=level,
                       greedy=False)
    keep = ("pass@1", "all_wrong_groups", "step_accuracy_by_position", "step_accuracy_mean",
            "first_error_kinds", "p_correct_at_first_error_median", "seconds")
    return {k: rep.get(k) for k in keep}


def _final_eval(out: Path) -> dict[str, Any]:
    """Per-prompt results of the run's last evaluation, read from its checkpoint."""
    import torch
    from veristep.train.checkpoint import latest_checkpoint
    from veristep.train.evaluate import EvalResult

    ckpt = latest_checkpoint(out)
    state = torch.load(ckpt / "trainer.pt", weights_only=False) if ckpt else {}
    res = {}
    for name in ("eval_before", "last_eval"):
        s = state.get(name)
        if isinstance(s, dict) and "correct" in s:
            ev = EvalResult.from_state(s)
            res[name] = {"prompts": ev.prompts, "samples": ev.samples,
                         "pass@1_per_prompt": [c / ev.samples for c in ev.correct],
                         "greedy_per_prompt": list(ev.greedy) if ev.greedy is not None else None}
    return res


def collect(arm: str, seed: int, summary: dict[str, Any], out: Path, wall: float, calls: int) -> dict[str, Any]:
    """One run's record: final accuracies (with per-prompt results), curve, diagnostic, cost."""
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    curve = [{"step": 0, "rollouts": 0, "pass@1": summary.get("accuracy_before"),
              "pass@1_se": summary.get("accuracy_before_se")}]
    curve += [{"step": r["step"], "rollouts": r.get("train/rollouts_total"), "pass@1": r["eval/pass@1"],
               "pass@1_se": r.get("eval/pass@1_se")} for r in rows if r.get("eval/pass@1") is not None]

    def mean_of(key: str) -> float | None:
        vals = [r[key] for r in rows if r.get(key) is not None]
        return statistics.fmean(vals) if vals else None

    lengths = [r["completion/len_mean"] for r in rows if r.get("completion/len_mean") is not None]
    evals = _final_eval(out)
    after, before = evals.get("last_eval", {}), evals.get("eval_before", {})
    final = {"pass@1": summary.get("accuracy_after"), "greedy": summary.get("greedy_after"),
             "pass@1_before": summary.get("accuracy_before"), "greedy_before": summary.get("greedy_before"),
             "prompts": summary.get("eval_prompts"), "samples": summary.get("eval_samples"),
             "pass@1_per_prompt": after.get("pass@1_per_prompt"),
             "greedy_per_prompt": after.get("greedy_per_prompt"),
             "pass@1_before_per_prompt": before.get("pass@1_per_prompt")}
    return {
        "arm": arm, "seed": seed, "advantage": summary.get("advantage"), "prm": summary.get("prm"),
        "credit": summary.get("credit"), "placebo": summary.get("placebo"),
        "optimizer_steps": int(summary.get("steps", 0)), "rollouts": int(summary.get("rollouts", 0)),
        "mc_rollouts": int(summary.get("mc_rollouts", 0)), "prm_completions": int(summary.get("prm_completions", 0)),
        "completion_tokens": int(summary.get("completion_tokens", 0)),
        "wall_s": round(wall, 1), "trainer_calls": calls,
        "train_s": round(sum((r.get("time/step_s") or 0.0) - (r.get("time/eval_s") or 0.0) for r in rows), 1),
        "prm_s": round(sum(r.get("time/prm_s") or 0.0 for r in rows), 1),
        "acr_mean": summary.get("acr_mean"), "final": final, "curve": curve,
        "diagnostic": {k: mean_of(k) for k in DIAGNOSTIC_KEYS},
        # a credit form that pays for dropping steps shows here first (tokens per completion)
        "completion_len": {"first10": statistics.fmean(lengths[:10]) if lengths else None,
                           "last10": statistics.fmean(lengths[-10:]) if lengths else None},
        "output_dir": str(out),
    }


def recollect(record_file: Path) -> dict[str, Any]:
    """A finished run's record rebuilt from its folder (metrics, summary, checkpoint) where they remain."""
    rec = json.loads(record_file.read_text())
    out = record_file.parent
    if not ((out / "summary.json").exists() and (out / "metrics.jsonl").exists()):
        return rec
    summary = json.loads((out / "summary.json").read_text())
    fresh = collect(rec["arm"], rec["seed"], summary, out, rec["wall_s"], rec["trainer_calls"])
    if rec.get("mechanism"):  # measured on the final model when the run ended; not rebuilt here
        fresh["mechanism"] = rec["mechanism"]
    return fresh


def _run_job(job: tuple[Settings, str, int, str]) -> dict[str, Any]:
    """Worker entry point: one run on one torch thread."""
    settings, arm, seed, out_root = job
    import torch

    torch.set_num_threads(1)
    rec = run_arm(settings, arm, seed, Path(out_root))
    # Each record is kept beside its run, so a stopped experiment can still be aggregated (--from-runs).
    (Path(rec["output_dir"]) / "record.json").write_text(json.dumps(rec))
    f = rec["final"]
    print(f"  done {arm:14s} seed {seed}: pass@1 {_pct(f['pass@1_before'])} -> {_pct(f['pass@1'])}, greedy "
          f"{_pct(f['greedy_before'])} -> {_pct(f['greedy'])}, {rec['rollouts']} rollouts, {rec['wall_s']:.0f} s",
          flush=True)
    return rec


# ------------------------------------------------------------------------------------------
# Aggregation


def _p(paired_row: dict[str, Any] | None) -> str:
    p = (paired_row or {}).get("p_sign_flip")
    return "-" if p is None else f"{p:.2g}"


def _pct(v: float | None, digits: int = 1, sign: bool = False) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{100 * v:+.{digits}f}" if sign else f"{100 * v:.{digits}f}"


def learning_curve(runs: list[dict[str, Any]], grid: list[float]) -> dict[str, list[float | None]]:
    """Mean pass@1 on a grid of rollouts with a 95 % CI: t over seeds (n >= 3), else eval noise."""
    import numpy as np

    ys, ses = [], []
    for r in runs:
        pts = [c for c in r["curve"] if c["pass@1"] is not None and c["rollouts"] is not None]
        xs = [float(c["rollouts"]) for c in pts]
        ys.append(np.interp(grid, xs, [c["pass@1"] for c in pts], right=np.nan))
        ses.append(np.interp(grid, xs, [c["pass@1_se"] or 0.0 for c in pts], right=np.nan))
    y, se = np.array(ys), np.array(ses)
    n = len(runs)
    # A grid point past some seed's last rollout (an arm that stopped short of the budget) is
    # NaN, so None in the output: a mean over the seeds that got there would mix populations.
    mean = y.mean(0)
    if n >= 3:
        half = t975(n - 1) * y.std(0, ddof=1) / math.sqrt(n)
        kind = "t over seeds"
    else:
        half = 1.96 * np.sqrt((se**2).mean(0) / n)
        kind = "evaluation noise only (fewer than 3 seeds)"
    clean = lambda a: [None if not np.isfinite(v) else float(v) for v in a]  # noqa: E731
    return {"rollouts": list(grid), "mean": clean(mean), "lo": clean(mean - half), "hi": clean(mean + half),
            "ci": kind}


def summarise(records: list[dict[str, Any]], arms: list[str], budget: int, placebo_arm: str = "placebo",
              ceiling_arm: str | None = None, margin: float | None = None,
              matched_pairs: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    """Per-arm table, paired statistics against GRPO and the placebo, positive control, curves.

    With a `ceiling_arm` each other arm's gain over GRPO is also a share of the ceiling's;
    `matched_pairs` (arm, against) are the pre-registered lr x |A| mass-matched comparisons.
    """
    by_arm = {a: {r["seed"]: r for r in records if r["arm"] == a} for a in arms}
    grid = [budget * i / 30 for i in range(31)]
    curves = {a: learning_curve(list(runs.values()), grid) for a, runs in by_arm.items() if runs}
    grpo = by_arm.get("grpo", {})
    grpo_final = statistics.fmean([r["final"]["pass@1"] for r in grpo.values()]) if grpo else None
    gains = [r["final"]["pass@1"] - r["final"]["pass@1_before"] for r in grpo.values()]
    greedy_gains = [r["final"]["greedy"] - r["final"]["greedy_before"] for r in grpo.values()
                    if r["final"]["greedy"] is not None]
    control = {**mean_ci95(gains), "p_sign_flip": sign_flip_p(gains), "greedy": mean_ci95(greedy_gains),
               "required": 0.05, "passed": bool(gains) and statistics.fmean(gains) >= 0.05}
    if ceiling_arm:  # the step-credit condition: GRPO must learn (CI above 0), not clear 5 points
        lo = control["ci95"][0]
        control.update({"required": "gain CI above 0", "passed": lo is not None and lo > 0})
    rows = []
    for arm in arms:
        runs = by_arm[arm]
        if not runs:
            continue
        rs = list(runs.values())
        row: dict[str, Any] = {"arm": arm, "seeds": sorted(runs), **{k: rs[0][k] for k in ("advantage", "prm", "credit", "placebo")}}
        for key in ("pass@1", "greedy"):
            row[f"{key}_after"] = mean_ci95([r["final"][key] for r in rs if r["final"][key] is not None])
            row[f"{key}_gain"] = mean_ci95([r["final"][key] - r["final"][f"{key}_before"] for r in rs
                                           if r["final"][key] is not None])
            if grpo and arm != "grpo":
                row[f"{key}_vs_grpo"] = paired(runs, grpo, key)
            if by_arm.get(placebo_arm) and arm not in (placebo_arm, "grpo"):
                row[f"{key}_vs_placebo"] = paired(runs, by_arm[placebo_arm], key)
            if by_arm.get("grpo_lr") and arm not in ("grpo", "grpo_lr"):  # GRPO at the matched step size
                row[f"{key}_vs_grpo_lr"] = paired(runs, by_arm["grpo_lr"], key)
        if "pass@1_vs_grpo" in row:
            row["verdict"] = verdict(row["pass@1_vs_grpo"], row.get("pass@1_vs_placebo"), margin)
        for key in ("rollouts", "mc_rollouts", "prm_completions", "optimizer_steps", "train_s", "prm_s", "wall_s"):
            row[key] = statistics.fmean([r[key] for r in rs])
        row["diagnostic"] = {k: _mean_none([r["diagnostic"].get(k) for r in rs]) for k in DIAGNOSTIC_KEYS}
        row["completion_len"] = {k: _mean_none([r.get("completion_len", {}).get(k) for r in rs])
                                 for k in ("first10", "last10")}
        if ceiling_arm and grpo and by_arm.get(ceiling_arm) and arm not in ("grpo", ceiling_arm):
            row["share_of_ceiling"] = share_of_ceiling(runs, grpo, by_arm[ceiling_arm])
        rate = arm.partition("@")[2]
        same_rate = (f"grpo@{rate}", f"{ceiling_arm}@{rate}")
        if ceiling_arm and rate and arm not in same_rate and all(by_arm.get(a) for a in same_rate):
            row["share_of_ceiling_same_rate"] = {**share_of_ceiling(runs, *(by_arm[a] for a in same_rate)),
                                                 "against": list(same_rate)}
        mech = [r["mechanism"] for r in rs if r.get("mechanism")]
        if mech:
            row["step_accuracy"] = mean_ci95([m["step_accuracy_mean"] for m in mech])
            row["step_accuracy_by_position"] = [_mean_none([m["step_accuracy_by_position"][k] for m in mech])
                                                for k in range(len(mech[0]["step_accuracy_by_position"]))]
        if grpo_final is not None and arm in curves:
            c = curves[arm]
            hit = next((x for x, m in zip(c["rollouts"], c["mean"], strict=True)
                        if m is not None and m >= grpo_final - 1e-9), None)  # numpy and fmean round apart
            row["rollouts_to_grpo_final"] = hit
        rows.append(row)
    out = {"rows": rows, "positive_control": control, "curves": curves, "grpo_final_pass@1": grpo_final,
           "placebo_arm": placebo_arm, "ceiling_arm": ceiling_arm}
    if ceiling_arm and by_arm.get(ceiling_arm) and grpo:
        ceiling = next(r for r in rows if r["arm"] == ceiling_arm)
        out["step_control"] = {"arm": ceiling_arm, "vs_grpo": ceiling.get("pass@1_vs_grpo"),
                               "vs_placebo": ceiling.get("pass@1_vs_placebo")}
    best_rates = _best_rates(by_arm, margin)
    if best_rates:
        out["best_rates"] = best_rates
    matched = [{"arm": a, "against": b, "pass@1": paired(by_arm[a], by_arm[b], "pass@1")}
               for a, b in matched_pairs or () if by_arm.get(a) and by_arm.get(b)]
    for m in matched:
        m["reading"] = _pair_reading(m["pass@1"]["ci95"], margin)
    if matched:
        # Step labels carry information beyond step size only if every mass-matched pair says so.
        readings = {m["reading"] for m in matched}
        out["matched_pairs"] = matched
        out["matched_reading"] = {frozenset({"above 0"}): "step information",
                                  frozenset({"within the margin"}): "step size"}.get(frozenset(readings),
                                                                                    "inconclusive")
    return out


def _family(arm: str) -> str:
    """The method an arm runs, whatever its learning rate (`grpo_lr` is GRPO at another rate)."""
    base = arm.partition("@")[0]
    return "grpo" if base == "grpo_lr" else base


def _best_rates(by_arm: dict[str, dict[int, dict[str, Any]]], margin: float | None) -> dict[str, Any] | None:
    """Each method run at several learning rates, at its best one, against GRPO at its best.

    Choosing GRPO's best rate by its mean favours GRPO; the comparison is only made when GRPO
    itself was run at more than one rate.
    """
    families: dict[str, list[str]] = {}
    for arm, runs in by_arm.items():
        if runs:
            families.setdefault(_family(arm), []).append(arm)
    families = {f: m for f, m in families.items() if any("@lr" in a or a == "grpo_lr" for a in m)}
    if len(families.get("grpo", [])) < 2:
        return None

    def mean(arm: str) -> float:
        return statistics.fmean(r["final"]["pass@1"] for r in by_arm[arm].values())

    best = {f: max(members, key=mean) for f, members in families.items()}
    rows = []
    for family, arm in best.items():
        if family == "grpo":
            continue
        d = paired(by_arm[arm], by_arm[best["grpo"]], "pass@1")
        rows.append({"arm": arm, "against": best["grpo"], "rates": len(families[family]),
                     "grpo_rates": len(families["grpo"]), "pass@1": d, "reading": _pair_reading(d["ci95"], margin)})
    return {"best": best, "vs_grpo_best": rows}


def _pair_reading(ci95: list[float | None], margin: float | None) -> str:
    lo, hi = ci95
    if lo is None:
        return "too few seeds"
    if lo > 0:
        return "above 0"
    if margin is not None and -margin < lo and hi < margin:
        return "within the margin"
    return "below 0" if hi < 0 else "inconclusive"


def _mean_none(vals: list[float | None]) -> float | None:
    xs = [v for v in vals if v is not None]
    return statistics.fmean(xs) if xs else None


def _ci(d: dict[str, Any] | None) -> str:
    """`+m [+lo, +hi]` in points from a mean_ci95 dict; the mean alone without bounds; '-' without one."""
    if not d or d.get("mean") is None:
        return "-"
    lo, hi = d["ci95"]
    band = f" [{_pct(lo, sign=True)}, {_pct(hi, sign=True)}]" if lo is not None else ""
    return f"{_pct(d['mean'], sign=True)}{band}"


def format_tables(summary: dict[str, Any]) -> str:
    """Markdown: results with CIs and p-values, mechanism, cost."""
    lines = ["| arm | seeds | pass@1 after | gain | vs GRPO, 95% CI | p (sign flip) | eval-noise SE "
             "| greedy vs GRPO | vs placebo | verdict |", "|---" * 10 + "|"]
    for r in summary["rows"]:
        vg = r.get("pass@1_vs_grpo")
        lines.append(
            f"| {r['arm']} | {len(r['seeds'])} | {_pct(r['pass@1_after']['mean'])} | {_ci(r['pass@1_gain'])} "
            f"| {_ci(vg)} | {_p(vg)} "
            f"| {_pct(vg['eval_noise_se']) if vg else '-'} | {_ci(r.get('greedy_vs_grpo'))} "
            f"| {_ci(r.get('pass@1_vs_placebo'))} | {r.get('verdict', 'reference')} |")
    lr_rows = [r for r in summary["rows"] if r.get("pass@1_vs_grpo_lr")]
    if lr_rows:
        lines += ["", "| arm | vs grpo_lr (GRPO at the matched learning rate), 95% CI | p (sign flip) | seeds |",
                  "|---" * 4 + "|"]
        for r in lr_rows:
            d = r["pass@1_vs_grpo_lr"]
            lines.append(f"| {r['arm']} | {_ci(d)} | {_p(d)} | {len(d['seeds'])} |")
    if summary.get("matched_pairs"):
        lines += ["", "| pair (lr x \\|A\\| mass matched) | pass@1 difference, 95% CI | p (sign flip) | seeds | reading |",
                  "|---" * 5 + "|"]
        for m in summary["matched_pairs"]:
            d = m["pass@1"]
            lines.append(f"| {m['arm']} - {m['against']} | {_ci(d)} | {_p(d)} | {len(d['seeds'])} | {m['reading']} |")
        lines.append(f"\nmass-matched reading: {summary['matched_reading']}")
    if summary.get("best_rates"):
        lines += ["", "| at its best learning rate - GRPO at its best | pass@1 difference, 95% CI | p (sign flip) "
                  "| seeds | reading |", "|---" * 5 + "|"]
        for m in summary["best_rates"]["vs_grpo_best"]:
            d = m["pass@1"]
            lines.append(f"| {m['arm']} (best of {m['rates']} rates) - {m['against']} (best of {m['grpo_rates']}) "
                         f"| {_ci(d)} | {_p(d)} | {len(d['seeds'])} | {m['reading']} |")
    if any("share_of_ceiling" in r or "step_accuracy" in r for r in summary["rows"]):
        ceiling = summary.get("ceiling_arm") or "the ceiling"
        lines += ["", f"| arm | gain over grpo as a share of {ceiling}'s (bootstrap 95% CI) | the same at the "
                  f"arm's own rate (grpo@lrS, {ceiling}@lrS) | per-step accuracy after | by position |",
                  "|---" * 5 + "|"]

        def share_txt(sh: dict[str, Any] | None) -> str:
            if not sh or sh.get("share") is None:
                return "-"
            lo, hi = sh["ci95"]
            return f"{_pct(sh['share'], 0)} %" + ("" if lo is None else f" [{_pct(lo, 0)}, {_pct(hi, 0)}]")

        for r in summary["rows"]:
            acc = r.get("step_accuracy") or {}
            pos = ", ".join("-" if a is None else f"{a:.2f}" for a in r.get("step_accuracy_by_position", []))
            acc_txt = "-" if acc.get("mean") is None else f"{acc['mean']:.3f}"
            lines.append(f"| {r['arm']} | {share_txt(r.get('share_of_ceiling'))} | "
                         f"{share_txt(r.get('share_of_ceiling_same_rate'))} | {acc_txt} | {pos or '-'} |")
    lines += ["", "| arm | first error blamed | adv. on track | first error | after error | answer line "
              "| non-zero adv. | tokens per completion, first -> last 10 steps |", "|---" * 8 + "|"]
    f = lambda v: "-" if v is None else f"{v:+.2f}"  # noqa: E731
    n = lambda v: "-" if v is None else f"{v:.0f}"  # noqa: E731
    share = lambda v: "-" if v is None else f"{_pct(v, 0)} %"  # noqa: E731
    for r in summary["rows"]:
        d = {k: r["diagnostic"].get(k) for k in DIAGNOSTIC_KEYS}
        length = r.get("completion_len") or {}
        lines.append(f"| {r['arm']} | {share(d['gate/first_error_blamed'])} | {f(d['credit/adv_on_track'])} "
                     f"| {f(d['credit/adv_first_error'])} | {f(d['credit/adv_after_error'])} "
                     f"| {f(d['credit/adv_answer'])} | {share(d['adv/nonzero_frac'])} "
                     f"| {n(length.get('first10'))} -> {n(length.get('last10'))} |")
    lines += ["", "| arm | rollouts (MC) | PRM-scored | opt. steps | train s | PRM s | s / 1k rollouts "
              "| rollouts to GRPO's final pass@1 |", "|---" * 8 + "|"]
    for r in summary["rows"]:
        per_k = 1000 * r["train_s"] / max(r["rollouts"], 1)
        hit = r.get("rollouts_to_grpo_final")
        lines.append(f"| {r['arm']} | {r['rollouts']:.0f} ({r['mc_rollouts']:.0f}) | {r['prm_completions']:.0f} "
                     f"| {r['optimizer_steps']:.0f} | {r['train_s']:.0f} | {r['prm_s']:.0f} | {per_k:.1f} "
                     f"| {'not reached' if hit is None else f'{hit:.0f}'} |")
    return "\n".join(lines)


def _prompt_se(values: list[float] | None) -> str:
    if not values or len(values) < 2:
        return ""
    return f" ± {100 * statistics.stdev(values) / math.sqrt(len(values)):.1f}"


def brief_summary(records: list[dict[str, Any]], reference: dict[str, Any] | None) -> str:
    """The main job's tables: this run's arms, each step-credit arm minus each GRPO arm, and the
    committed experiment's numbers for the same arms beside them (read from its JSON, not rerun)."""
    by_arm: dict[str, dict[int, dict[str, Any]]] = {}
    for r in records:
        by_arm.setdefault(r["arm"], {})[r["seed"]] = r
    ref_by_arm: dict[str, dict[int, dict[str, Any]]] = {}
    for r in (reference or {}).get("runs", []):
        if r["arm"] in by_arm:
            ref_by_arm.setdefault(r["arm"], {})[r["seed"]] = r
    n_seeds = max(len(runs) for runs in by_arm.values())
    unit = ("one seed: ± is the standard error over the held-out prompts, evaluation noise only"
            if n_seeds == 1 else f"± is the standard error over {n_seeds} seeds")
    lines = [f"this run ({unit})", "",
             "| arm | pass@1 before | after | gain |", "|---|---|---|---|"]
    for arm, runs in by_arm.items():
        finals = [r["final"] for r in runs.values()]
        before = statistics.fmean(f["pass@1_before"] for f in finals)
        after = statistics.fmean(f["pass@1"] for f in finals)
        se = (_prompt_se(finals[0].get("pass@1_per_prompt")) if len(finals) == 1
              else _prompt_se([f["pass@1"] for f in finals]))
        lines.append(f"| {arm} | {_pct(before)} | {_pct(after)}{se} | {_pct(after - before, sign=True)} |")
    grpo = [a for a in by_arm if _family(a) == "grpo"]
    lines += ["", "| pass@1 difference | this run | committed experiment, 95% CI over seeds |", "|---|---|---|"]
    for arm in (a for a in by_arm if a not in grpo):
        for base in grpo:
            here = paired(by_arm[arm], by_arm[base], "pass@1")
            se = here["eval_noise_se"] if n_seeds == 1 else (here["sd"] or 0) / math.sqrt(here["n"])
            there = paired(ref_by_arm.get(arm, {}), ref_by_arm.get(base, {}), "pass@1")
            ref_cell = "-" if there["ci95"][0] is None else f"{_ci(there)}, {there['n']} seeds"
            lines.append(f"| {arm} - {base} | {_pct(here['mean'], sign=True)}"
                         f"{'' if se is None else f' ± {100 * se:.1f}'} | {ref_cell} |")
    if ref_by_arm:
        lines += ["", "the committed experiment's runs of these arms (pass@1 after: mean (sd over seeds))", "",
                  "| arm | seeds | pass@1 after |", "|---|---|---|"]
        for arm, runs in ref_by_arm.items():
            stats = mean_ci95([r["final"]["pass@1"] for r in runs.values()])
            sd = "" if stats["sd"] is None else f" ({_pct(stats['sd'])})"
            lines.append(f"| {arm} | {stats['n']} | {_pct(stats['mean'])}{sd} |")
    for row in ((reference or {}).get("best_rates") or {}).get("vs_grpo_best", []):
        if row["arm"] in by_arm:
            lines.append(f"\ncommitted experiment, each method at its best learning rate: {row['arm']} - "
                         f"{row['against']} (GRPO's best of {row['grpo_rates']} rates): "
                         f"{_ci(row['pass@1'])}, {row['pass@1']['n']} seeds")
    return "\n".join(lines)


def plot_lr_sweep(records: list[dict[str, Any]], path: Path, title: str, grpo_lr_scale: float) -> bool:
    """Final pass@1 against the learning-rate multiple, one line per method, every seed a dot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_method: dict[str, dict[float, list[float]]] = {}
    for r in records:
        base, scale = split_arm(r["arm"])
        if base == "grpo_lr":
            base, scale = "grpo", scale * grpo_lr_scale
        by_method.setdefault(base, {}).setdefault(scale, []).append(100 * r["final"]["pass@1"])
    swept = {m: rates for m, rates in by_method.items() if len(rates) >= 2}
    if not swept:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (method, rates) in enumerate(sorted(swept.items())):
        colour = plt.get_cmap("tab10")(i)
        xs = sorted(rates)
        ax.plot(xs, [statistics.fmean(rates[x]) for x in xs], "-o", color=colour, label=method)
        for x in xs:
            ax.scatter([x] * len(rates[x]), rates[x], color=colour, s=10, alpha=0.5)
    ax.set_xscale("log")
    ax.set_xticks(sorted({x for rates in swept.values() for x in rates}))
    ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%gx"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("learning rate, multiple of the recipe's 3e-5")
    ax.set_ylabel("held-out pass@1 after training (%)")
    ax.set_title(title, fontsize=9)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def plot(summary: dict[str, Any], path: Path, title: str) -> None:
    """Learning curves with 95 % CI bands, paired differences to GRPO, first-error blame."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))
    colour = {arm: plt.get_cmap("tab20")(i % 20) for i, arm in enumerate(r["arm"] for r in summary["rows"])}
    for arm, c in summary["curves"].items():
        keep = [k for k, m in enumerate(c["mean"]) if m is not None]
        xs, mean, lo, hi = ([c[key][k] for k in keep] for key in ("rollouts", "mean", "lo", "hi"))
        axes[0].plot(xs, mean, color=colour[arm], lw=2 if arm in ("grpo", "suffix") else 1.3, label=arm)
        axes[0].fill_between(xs, lo, hi, color=colour[arm], alpha=0.12)
    ci_kind = next(iter(summary["curves"].values()))["ci"] if summary["curves"] else ""
    axes[0].set(xlabel="training rollouts consumed", ylabel="held-out pass@1 (T=1)",
                title=f"learning curves (95% CI: {ci_kind})")
    axes[0].set_ylim(bottom=max(0.0, axes[0].get_ylim()[0]))
    axes[0].legend(fontsize=7, ncol=2)
    rows = [r for r in summary["rows"] if r.get("pass@1_vs_grpo")]
    for j, r in enumerate(rows):
        d = r["pass@1_vs_grpo"]
        lo, hi = d["ci95"]
        mean = 100 * d["mean"]
        if lo is not None:
            axes[1].errorbar(j, mean, yerr=[[mean - 100 * lo], [100 * hi - mean]], fmt="o", capsize=4, color="k",
                             label="95% CI, t over seeds" if j == 0 else None)
        if d["eval_noise_se"] is not None:  # the evaluation's share of the noise alone (prompts as the unit)
            axes[1].errorbar(j + 0.15, mean, yerr=196 * d["eval_noise_se"], fmt="s", capsize=3, color="C0",
                             label="95% CI, evaluation noise only" if j == 0 else None)
        axes[1].plot([j] * len(d["diffs"]), [100 * x for x in d["diffs"]], "x", color="C3", alpha=0.7)
    axes[1].axhline(0, color="grey", lw=1)
    axes[1].set_xticks(range(len(rows)), [r["arm"] for r in rows], rotation=30, fontsize=8)
    # symlog: differences of a point or two stay readable beside an arm that collapsed
    axes[1].set_yscale("symlog", linthresh=2.0)
    axes[1].set(ylabel="points (linear within +-2)", title="final pass@1 minus GRPO (paired by seed; x = single seeds)")
    if rows:
        axes[1].legend(fontsize=7)
    names = [r["arm"] for r in summary["rows"]]
    blamed = [100 * (r["diagnostic"]["gate/first_error_blamed"] or 0.0) for r in summary["rows"]]
    axes[2].bar(range(len(names)), blamed, color=[colour[n] for n in names])
    axes[2].set_xticks(range(len(names)), names, rotation=30, fontsize=8)
    axes[2].set(ylabel="% of all-wrong responses", ylim=(0, 100),
                title="first wrong step gets a negative advantage")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command line of the experiment."""
    d = Settings()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--arms", default=None,
                   help=f"core arms (all seeds), comma separated from: {', '.join(ARMS)} (default: the "
                   "condition's: grpo,suffix,min,progress,placebo,mc; chain8: " + CONDITION_SETUP["chain8"]["arms"] + ")")
    p.add_argument("--extra-arms", default=None,
                   help="further arms, run with --extra-seeds seeds (default: oracle,oracle_eps0.2,oracle_eps0.4,"
                   "avspo,sign,dapo; chain8: " + CONDITION_SETUP["chain8"]["extra_arms"] + ")")
    p.add_argument("--seeds", type=int, default=6, help="paired seeds 0..N-1 of the core arms")
    p.add_argument("--first-seed", type=int, default=0,
                   help="run core seeds FIRST..FIRST+SEEDS-1 (more seeds for an earlier run; aggregate with --from-runs)")
    p.add_argument("--extra-seeds", type=int, default=3, help="seeds of the extra arms")
    p.add_argument("--condition", choices=sorted(CONDITIONS), default="medium",
                   help="medium (the recipe's level), stress (a medium/hard mix: " + CONDITIONS["stress"] + ") or "
                   "chain8 (the step-credit condition: 8-step +/- chains on a warm start of their own)")
    p.add_argument("--grpo-lr-scale", type=float, default=d.grpo_lr_scale,
                   help="learning rate of the grpo_lr arm as a multiple of the others' (fixed before the run)")
    p.add_argument("--mechanism-prompts", type=int, default=None,
                   help="held-out prompts x G of the per-step diagnosis of each final model (default: 0; chain8: 100)")
    p.add_argument("--probe-credit", default=d.probe_credit, choices=("suffix", "min", "progress", "prefix"),
                   help="credit form of the placebo, mc and oracle arms (chosen before the run)")
    p.add_argument("--steps", type=int, default=d.steps, help="optimizer steps; budget = steps x prompts x G")
    p.add_argument("--prompts-per-step", type=int, default=d.prompts_per_step)
    p.add_argument("--group-size", type=int, default=d.group_size)
    p.add_argument("--eval-size", type=int, default=d.eval_size, help="held-out prompts of the final evaluation")
    p.add_argument("--eval-samples", type=int, default=d.eval_samples)
    p.add_argument("--eval-interval", type=int, default=d.eval_interval, help="steps between curve points")
    p.add_argument("--warmstart-dir", default=None, help="warm-start cache (default: runs/warmstart; chain8: "
                   "runs/warmstart-chain8)")
    p.add_argument("--warmstart-recipe", default=None, help="JSON of warm-start recipe fields (a larger model)")
    p.add_argument("--device", default=d.device)
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="extra trainer field for every run (repeatable)")
    p.add_argument("--jobs", type=int, default=2, help="runs in parallel (processes, 1 torch thread each)")
    p.add_argument("--runs-dir", default="runs/gating_experiment")
    p.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help="path prefix of the .json / .png")
    p.add_argument("--from-json", type=Path, default=None, help="re-aggregate the runs of an earlier results JSON")
    p.add_argument("--from-runs", action="store_true",
                   help="skip training: aggregate the record.json of every finished run under --runs-dir")
    p.add_argument("--add-json", type=Path, action="append", default=[],
                   help="merge the runs of another results JSON (e.g. seeds run apart)")
    p.add_argument("--quick", action="store_true", help="smoke run: 2 arms, 1 seed, 3 steps, tiny eval")
    p.add_argument("--brief", action="store_true",
                   help="print only this run's arms and each step-credit arm minus each GRPO arm, beside the "
                        "committed experiment's numbers for the same arms (what `make run` prints)")
    return p.parse_args(argv)


def _overrides(items: list[str]) -> dict[str, Any]:
    import yaml

    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item!r}: expected FIELD=VALUE")
        out[name.strip().replace("-", "_")] = yaml.safe_load(value)
    return out


def _prepare_warm_start(settings: Settings, recipe_json: str | None) -> None:
    """Build the warm start once, before the parallel runs (a larger recipe becomes the model)."""
    from veristep.train.demo import warmstart

    if recipe_json:
        path = warmstart.ensure_warm_start(settings.warmstart_dir, seed=0, **json.loads(recipe_json))
        settings.overrides.setdefault("model", str(path))
    elif settings.overrides.get("model", "builtin:warmstart") == "builtin:warmstart":
        warmstart.ensure_warm_start(settings.warmstart_dir, seed=0)


def main(argv: list[str] | None = None) -> int:
    """Run the arms, aggregate, write JSON and PNG, print the tables."""
    args = parse_args(argv)
    setup = CONDITION_SETUP.get(args.condition, {})
    arms_spec = args.arms or setup.get("arms", "grpo,suffix,min,progress,placebo,mc")
    extra_spec = args.extra_arms if args.extra_arms is not None else setup.get(
        "extra_arms", "oracle,oracle_eps0.2,oracle_eps0.4,avspo,sign,dapo")
    core = [a.strip() for a in arms_spec.split(",") if a.strip()]
    extra = [a.strip() for a in extra_spec.split(",") if a.strip() and a.strip() not in core]
    mech = args.mechanism_prompts if args.mechanism_prompts is not None else (100 if args.condition == "chain8" else 0)
    settings = Settings(dataset=CONDITIONS[args.condition], steps=args.steps, eval_size=args.eval_size,
                        prompts_per_step=args.prompts_per_step, group_size=args.group_size,
                        eval_samples=args.eval_samples, eval_interval=args.eval_interval,
                        probe_credit=args.probe_credit,
                        warmstart_dir=args.warmstart_dir or setup.get("warmstart_dir", Settings.warmstart_dir),
                        device=args.device, overrides={**setup.get("overrides", {}), **_overrides(args.set)},
                        grpo_lr_scale=args.grpo_lr_scale, mechanism_prompts=mech)
    recipe_json = args.warmstart_recipe
    if recipe_json is None and setup.get("warmstart"):
        from veristep.train.demo.warmstart import CONDITION_RECIPES

        recipe_json = json.dumps(CONDITION_RECIPES[setup["warmstart"]])
    reading_rule = READING_RULE_CHAIN8 if args.condition == "chain8" else READING_RULE
    seeds, extra_seeds, prefix = args.seeds, args.extra_seeds, args.results
    if args.quick:
        core, extra, seeds, extra_seeds = core[:2] or ["grpo"], [], 1, 0
        settings.steps, settings.eval_size, settings.eval_samples, settings.eval_interval = 3, 8, 2, 2
        settings.prompts_per_step = 4
        settings.mechanism_prompts = min(settings.mechanism_prompts, 2)
        if prefix == DEFAULT_RESULTS:
            prefix = Path(args.runs_dir) / "quick"
    from veristep.train.config import make_config

    for arm in core + extra:  # a bad arm or field fails now, not after hours
        make_config(**trainer_values(settings, arm, 0, Path(args.runs_dir) / "check", 1, False))
    if not (args.from_json or args.from_runs):  # only training needs the warm start
        _prepare_warm_start(settings, recipe_json)
    arms = core + extra
    jobs = [(settings, a, s, args.runs_dir) for s in range(args.first_seed, args.first_seed + seeds) for a in core]
    jobs += [(settings, a, s, args.runs_dir) for s in range(extra_seeds) for a in extra]
    t0 = time.perf_counter()
    if args.from_json:
        records = [r for r in json.loads(args.from_json.read_text())["runs"] if r["arm"] in arms]
    elif args.from_runs:
        found = [recollect(f) for f in sorted(Path(args.runs_dir).glob("*/record.json"))]
        records = [r for r in found if r["arm"] in arms]
        print(f"aggregating {len(records)} finished runs from {args.runs_dir}", flush=True)
    else:
        print(f"gating experiment: {len(jobs)} runs ({len(core)} core arms x {seeds} seeds, {len(extra)} extra "
              f"x {extra_seeds}), budget {settings.rollout_budget} rollouts per run, {args.jobs} parallel",
              flush=True)
        with ProcessPoolExecutor(max(1, args.jobs), mp_context=get_context("spawn")) as pool:
            records = list(pool.map(_run_job, jobs))
    for extra_json in args.add_json:
        records += [r for r in json.loads(extra_json.read_text())["runs"] if r["arm"] in arms]
    summary = summarise(records, arms, settings.rollout_budget, setup.get("placebo_arm", "placebo"),
                        setup.get("ceiling_arm"), setup.get("equivalence_margin"), setup.get("matched_pairs"))
    tables = format_tables(summary)
    n_seeds = max((len(r["seeds"]) for r in summary["rows"]), default=0)
    full = n_seeds >= 6 and settings.eval_size >= setup.get("full_eval_size", 1000)
    title = (f"{settings.dataset}, G={settings.group_size} x {settings.prompts_per_step}, budget "
             f"{settings.rollout_budget} rollouts, eval {settings.eval_size} prompts x {settings.eval_samples}"
             + ("" if full else f" -- REDUCED RUN ({n_seeds} seeds)"))
    try:
        plot(summary, prefix.with_suffix(".png"), title)
        lr_path = prefix.with_name(prefix.name + "_lr.png")
        if plot_lr_sweep(records, lr_path, f"{settings.dataset}: learning-rate sweep, {n_seeds} seeds at most",
                         settings.grpo_lr_scale):
            print(f"wrote {lr_path}", flush=True)
    except ImportError:  # `make run` installs the package alone, without the plot extra
        print("matplotlib is not installed (pip install 'veristep[plot]'): no plot written", flush=True)
    report = {
        "reduced": not full, "reading_rule": reading_rule, "condition": args.condition,
        "settings": {**asdict(settings), "rollout_budget": settings.rollout_budget},
        "arms": arms, "core_arms": core, "seeds": seeds, "extra_seeds": extra_seeds,
        "arm_fields": {a: {k: v for k, v in trainer_values(settings, a, 0, Path("."), settings.steps, False).items()
                           if k not in ("output_dir", "resume", "seed")} for a in arms},
        "final_eval": {"prompts": settings.eval_size, "samples_t1": settings.eval_samples, "greedy": True,
                       "source": "the trainer's held-out evaluation (disjoint from training and the warm "
                                 "start's demonstrations; the same seeds before and after and across arms)"},
        "positive_control": summary["positive_control"], "table": summary["rows"],
        "matched_pairs": summary.get("matched_pairs"), "matched_reading": summary.get("matched_reading"),
        "best_rates": summary.get("best_rates"),
        "curves": summary["curves"], "markdown": tables,
        # run folders are machine-local scratch: the records keep the run's name only
        "runs": [{**{k: v for k, v in r.items() if k != "output_dir"}, "run": Path(r.get("output_dir", r.get("run", ""))).name}
                 for r in records],
        "total_seconds": round(time.perf_counter() - t0, 1), "jobs": args.jobs,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": sys.version.split()[0],
                    "load_average_at_end": list(os.getloadavg())},
        "command": " ".join(["benchmarks/gating_experiment.py", *(argv if argv is not None else sys.argv[1:])]),
    }
    prefix.with_suffix(".json").write_text(json.dumps(report, indent=1))
    if args.brief:
        ref_path = REFERENCE_RESULTS.get(args.condition)
        reference = json.loads(ref_path.read_text()) if ref_path and ref_path.exists() else None
        print(f"\n{settings.dataset}: {settings.rollout_budget} rollouts a run, held-out pass@1 at T = 1 on "
              f"{settings.eval_size} prompts x {settings.eval_samples}; committed experiment: "
              f"{ref_path if reference else 'none'}\n\n{brief_summary(records, reference)}\n\n"
              f"wrote {prefix.with_suffix('.json')} (every table of the experiment; docs/experiment.md reads them)")
        return 0
    pc = summary["positive_control"]
    need = "needs >= +5.0" if pc["required"] == 0.05 else f"needs: {pc['required']}"
    print(f"\npositive control (GRPO gain, pass@1 T=1): {_pct(pc['mean'], sign=True)} points over {pc['n']} seeds "
          f"({need}): {'passed' if pc['passed'] else 'FAILED'}\n")
    print(tables)
    if summary.get("step_control"):
        sc = summary["step_control"]
        print(f"step-supervision control ({sc['arm']}) vs GRPO: {_pct((sc['vs_grpo'] or {}).get('mean'), sign=True)} points")
    print(f"\n{reading_rule}\nwrote {prefix.with_suffix('.json')} and {prefix.with_suffix('.png')}"
          + ("" if full else f"\nREDUCED RUN: {n_seeds} seeds, {settings.eval_size} eval prompts"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

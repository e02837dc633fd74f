"""Built-in experiment: does VeriGate recover learning signal where GRPO groups collapse?

Runs the trainer (`veristep.train.gated_grpo.train`) on the built-in step-wise arithmetic
task from the shared warm start, once per advantage method and seed, with the same budget of
training rollouts for every method:

    verigate  outcome GRPO on mixed groups, rule-PRM step advantages on all-wrong groups
    grpo      group-normalised outcome advantage (collapsed groups give no gradient)
    dr_grpo   mean-centred outcome advantage, constant loss normaliser (loss dr-grpo)
    dapo      dynamic sampling: resample until the batch has mixed groups (costs rollouts)
    avspo     a virtual opposite-label sample in collapsed groups
    sign      A = 2r - 1, no group statistics

Every method optimises the clip-higher objective (eps 0.2/0.28); all but dr_grpo (and wapo,
when asked for) aggregate by token-mean (loss dapo-clip-higher). Each run records its
advantage estimator and its loss apart.

DAPO spends extra rollouts per optimizer step, so for an equal budget it takes fewer steps:
it runs in chunks (the trainer's `--resume`) until its rollouts reach the budget.

Writes benchmarks/results/gating_experiment.json (every run's summary and curves, plus the
table) and gating_experiment.png (held-out accuracy against rollouts, ACR and non-zero
advantage fraction per step; mean and min-max band over seeds), and prints the table.

    python benchmarks/gating_experiment.py                # the full comparison (see --help)
    python benchmarks/gating_experiment.py --quick        # a smoke run of a few seconds a run
"""

from __future__ import annotations

import argparse
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

METHODS: tuple[str, ...] = ("verigate", "grpo", "dr_grpo", "dapo", "avspo", "sign")
#: Named variants: a trainer advantage method plus fields that differ from the defaults
#: (any other name runs that advantage with the default loss, dapo-clip-higher).
VARIANTS: dict[str, dict[str, Any]] = {
    # Step scores mapped to 2p-1, so a neutral step (the "Answer:" line) adds nothing to the
    # suffix sums instead of always ranking last (see the gating spec's note on suffix sums).
    "verigate_centred": {"advantage": "verigate", "centre_scores": True},
    # Dr. GRPO's constant normaliser, with the clip range all methods here share.
    "dr_grpo": {"advantage": "dr_grpo", "loss": "dr-grpo", "eps_high": 0.28},
    # WAPO's divisor (groups with a winner); its preset keeps the shared clip range.
    "wapo": {"advantage": "wapo", "loss": "wapo"},
}
REPO = Path(__file__).resolve().parent.parent
DEFAULT_RESULTS = REPO / "benchmarks" / "results" / "gating_experiment"


@dataclass
class ExperimentSettings:
    """What every run of the comparison shares (all methods, all seeds)."""

    steps: int = 24
    group_size: int = 8
    prompts_per_step: int = 8
    dataset: str = "builtin:arith"
    train_size: int = 2000
    eval_size: int = 64
    eval_samples: int = 4
    eval_interval: int = 6
    max_completion_len: int = 100
    lr: float = 1e-4
    temperature: float = 1.0
    warmstart_dir: str = "runs/warmstart"
    #: extra trainer fields (name -> value) applied to every run
    overrides: dict[str, Any] = field(default_factory=dict)

    @property
    def rollout_budget(self) -> int:
        """Training rollouts (completions) each run may use."""
        return self.steps * self.prompts_per_step * self.group_size


@dataclass
class RunResult:
    """One (method, seed) run: the trainer's summary, its curves and the compute it used."""

    method: str
    seed: int
    accuracy_before: float | None
    accuracy_after: float | None
    pass_g_after: float | None
    acr_mean: float | None
    nonzero_frac_mean: float | None
    optimizer_steps: int
    rollouts: int
    completion_tokens: int
    prm_completions: int
    wall_s: float
    train_s: float
    trainer_calls: int
    #: per step: step, rollouts (cumulative), acr, nonzero_frac, reward_mean, pass@1 (eval steps)
    curve: list[dict[str, Any]]
    output_dir: str
    #: larger held-out check of the final model (see `final_eval`), filled in after training
    final_eval: dict[str, float] | None = None
    #: the estimator and the objective of the run, apart (None in records from before the split)
    advantage: str | None = None
    loss: str | None = None
    #: the objective as resolved by the trainer: eps_low, eps_high, loss_agg, loss_constant
    loss_settings: dict[str, Any] | None = None


def _trainer_config(settings: ExperimentSettings, method: str, seed: int, out: Path, steps: int, resume: bool):
    """The trainer Config of one run (or one DAPO chunk)."""
    from veristep.train.config import make_config

    variant = VARIANTS.get(method, {"advantage": method})
    values = dict(
        seed=seed, steps=steps, resume=resume, output_dir=str(out),
        group_size=settings.group_size, prompts_per_step=settings.prompts_per_step,
        dataset=settings.dataset, train_size=settings.train_size, eval_size=settings.eval_size,
        eval_samples=settings.eval_samples, eval_interval=settings.eval_interval,
        max_completion_len=settings.max_completion_len, lr=settings.lr,
        temperature=settings.temperature, warmstart_dir=settings.warmstart_dir,
        checkpoint_interval=0, keep_checkpoints=1, progress=False, log_every=10**9,
        device="cpu",
    )
    values.update(variant)
    values.update(settings.overrides)
    return make_config(**values)


def _fill_objective(run: RunResult, settings: ExperimentSettings, runs_dir: Path) -> None:
    """Name the advantage and loss of a run recorded without them, from its method's variant.

    Exact for runs of this script: each variant reproduces the loss its method ran with
    before the trainer named estimator and loss apart.
    """
    cfg = _trainer_config(settings, run.method, run.seed, runs_dir / "check", 1, False)
    run.advantage, run.loss = cfg.advantage, cfg.loss
    run.loss_settings = cfg.loss_settings().to_dict()


def run_method(settings: ExperimentSettings, method: str, seed: int, out_root: Path) -> RunResult:
    """Train one method with one seed within the rollout budget; return its result."""
    from veristep.train.gated_grpo import train

    out = out_root / f"{method}-seed{seed}"
    shutil.rmtree(out, ignore_errors=True)
    budget, per_step = settings.rollout_budget, settings.prompts_per_step * settings.group_size
    t0 = time.perf_counter()
    calls = 0
    if VARIANTS.get(method, {}).get("advantage", method) != "dapo":
        summary = train(_trainer_config(settings, method, seed, out, settings.steps, resume=False))
        calls = 1
    else:
        # Dynamic sampling makes a step cost between 1x and (1 + rounds)x a batch: train in
        # chunks sized by the cost seen so far, stopping when the next step would not fit.
        steps_done, used, summary = 0, 0, {}
        while True:
            rate = used / steps_done if steps_done else 2.0 * per_step
            remaining = budget - used
            if remaining < rate or remaining < per_step:
                break
            chunk = max(1, int(0.8 * remaining / rate))
            summary = train(_trainer_config(
                settings, method, seed, out, steps_done + chunk, resume=steps_done > 0))
            calls += 1
            steps_done, used = int(summary["steps"]), int(summary["rollouts"])
    wall = time.perf_counter() - t0
    return _collect(method, seed, summary, out, wall, calls)


def _collect(method: str, seed: int, summary: dict[str, Any], out: Path, wall: float, calls: int) -> RunResult:
    """Read the run's metrics.jsonl into curves and totals."""
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    curve = [
        {
            "step": r.get("step"),
            "rollouts": r.get("train/rollouts_total"),
            "acr": r.get("gate/acr"),
            "nonzero_frac": r.get("adv/nonzero_frac"),
            "reward_mean": r.get("reward/mean"),
            "gated_groups": r.get("gate/gated_groups"),
            "pass@1": r.get("eval/pass@1"),
        }
        for r in rows
    ]
    nonzero = [c["nonzero_frac"] for c in curve if c["nonzero_frac"] is not None]
    train_s = sum((r.get("time/step_s") or 0.0) - (r.get("time/eval_s") or 0.0) for r in rows)
    return RunResult(
        method=method, seed=seed,
        accuracy_before=summary.get("accuracy_before"), accuracy_after=summary.get("accuracy_after"),
        pass_g_after=summary.get("pass@G_after"), acr_mean=summary.get("acr_mean"),
        nonzero_frac_mean=statistics.fmean(nonzero) if nonzero else None,
        optimizer_steps=int(summary.get("steps", 0)), rollouts=int(summary.get("rollouts", 0)),
        completion_tokens=int(summary.get("completion_tokens", 0)),
        prm_completions=int(summary.get("prm_completions", 0)),
        wall_s=round(wall, 1), train_s=round(train_s, 1), trainer_calls=calls,
        curve=curve, output_dir=str(out), advantage=summary.get("advantage"),
        loss=summary.get("loss"), loss_settings=summary.get("loss_settings"),
    )


def final_model_dir(output_dir: str | Path) -> Path | None:
    """The model folder of a run's last complete checkpoint."""
    ckpts = sorted(Path(output_dir).glob("checkpoints/step-*/model"))
    return ckpts[-1] if ckpts else None


def final_eval(model_dir: str | Path, tokenizer_dir: str | Path, n: int, seed: int = 777,
               samples: int = 2, max_new_tokens: int = 100) -> dict[str, float]:
    """Exact-answer accuracy of a model on `n` fresh problems: greedy, and at temperature 1.

    Independent of the trainer's own evaluation: other prompts, more of them, the task's
    exact checker, and the same sampling seeds for every model.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from veristep.train.demo.task import check_completion, make_problems
    from veristep.train.demo.warmstart import generate_completions

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    problems = make_problems(n, seed=seed)
    prompts = [p["prompt"] for p in problems]
    out = {}
    for name, temperature, reps in (("greedy", 0.0, 1), ("t1", 1.0, samples)):
        hits = []
        for rep in range(reps):
            completions = generate_completions(model, tokenizer, prompts, temperature, max_new_tokens, seed=rep)
            hits += [check_completion(c, p["answer"]).correct
                     for c, p in zip(completions, problems, strict=True)]
        out[name] = sum(hits) / len(hits)
    return out


def _final_eval_job(job: tuple[str, str, int]) -> dict[str, float]:
    """Worker entry point for `final_eval` with one torch thread."""
    import torch

    torch.set_num_threads(1)
    model_dir, tokenizer_dir, n = job
    return final_eval(model_dir, tokenizer_dir, n)


def _run_job(job: tuple[ExperimentSettings, str, int, str, int]) -> RunResult:
    """Worker entry point: one run, with its own torch thread count."""
    settings, method, seed, out_root, threads = job
    import torch

    torch.set_num_threads(threads)
    result = run_method(settings, method, seed, Path(out_root))
    print(f"  done {method:9s} seed {seed}: held-out pass@1 {_fmt(result.accuracy_before)} -> "
          f"{_fmt(result.accuracy_after)}, ACR {_fmt(result.acr_mean)}, {result.rollouts} rollouts, "
          f"{result.wall_s:.0f} s", flush=True)
    return result


# ------------------------------------------------------------------------------------------
# Aggregation, table, plot


def _mean_std(values: list[float | None]) -> tuple[float | None, float | None]:
    """Mean and sample std (ddof=1) of the non-missing values."""
    xs = [v for v in values if v is not None]
    if not xs:
        return None, None
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def summarise(results: list[RunResult], methods: list[str]) -> list[dict[str, Any]]:
    """One row per method: mean and spread over seeds of accuracy, ACR, and compute used."""
    rows = []
    grpo = {r.seed: r for r in results if r.method == "grpo"}
    for method in methods:
        runs = [r for r in results if r.method == method]
        if not runs:
            continue
        row: dict[str, Any] = {"method": method, "advantage": runs[0].advantage,
                               "loss": runs[0].loss, "seeds": len(runs)}
        for key in ("accuracy_before", "accuracy_after", "pass_g_after", "acr_mean",
                    "nonzero_frac_mean", "rollouts", "completion_tokens", "prm_completions",
                    "optimizer_steps", "wall_s", "train_s"):
            row[f"{key}_mean"], row[f"{key}_std"] = _mean_std([getattr(r, key) for r in runs])
        gains = [r.accuracy_after - r.accuracy_before for r in runs
                 if r.accuracy_after is not None and r.accuracy_before is not None]
        for mode in ("greedy", "t1"):
            row[f"final_{mode}_mean"], row[f"final_{mode}_std"] = _mean_std(
                [r.final_eval[mode] if r.final_eval else None for r in runs])
        row["gain_mean"], row["gain_std"] = _mean_std(gains)
        row["gain_min"], row["gain_max"] = (min(gains), max(gains)) if gains else (None, None)
        # Paired with GRPO on the same seed (same warm start, data order and eval prompts).
        paired = [r.accuracy_after - grpo[r.seed].accuracy_after for r in runs
                  if r.seed in grpo and r.accuracy_after is not None
                  and grpo[r.seed].accuracy_after is not None]
        row["vs_grpo_mean"], row["vs_grpo_std"] = _mean_std(paired)
        rows.append(row)
    return rows


def _fmt(value: float | None, pct: bool = True, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{100 * value:.{digits}f}" if pct else f"{value:.{digits}f}"


def format_final_table(rows: list[dict[str, Any]], base: dict[str, float] | None, n: int) -> str:
    """Markdown table of the larger exact-answer check of the final models."""
    lines = [f"| method | greedy acc. (n={n}) | T=1 acc. |", "|---|---|---|"]
    if base:
        lines.append(f"| warm start (before RL) | {_fmt(base['greedy'])} | {_fmt(base['t1'])} |")
    for r in rows:
        lines.append(f"| {r['method']} | {_fmt(r['final_greedy_mean'])} ± {_fmt(r['final_greedy_std'])} "
                     f"| {_fmt(r['final_t1_mean'])} ± {_fmt(r['final_t1_std'])} |")
    return "\n".join(lines)


def format_table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table: accuracy (%) mean ± std over seeds, collapse monitors, compute."""
    head = ("| method | advantage | loss | held-out pass@1 before | after | gain (min..max) "
            "| after − GRPO (paired) | ACR | non-zero adv. | opt. steps | rollouts | tokens | PRM-scored "
            "| seconds |")
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for r in rows:
        lines.append(
            f"| {r['method']} | {r.get('advantage') or '?'} | {r.get('loss') or '?'} "
            f"| {_fmt(r['accuracy_before_mean'])} "
            f"| {_fmt(r['accuracy_after_mean'])} ± {_fmt(r['accuracy_after_std'])} "
            f"| {_fmt(r['gain_mean'])} ({_fmt(r['gain_min'])}..{_fmt(r['gain_max'])}) "
            f"| {_fmt(r['vs_grpo_mean'])} ± {_fmt(r['vs_grpo_std'])} "
            f"| {_fmt(r['acr_mean_mean'])} | {_fmt(r['nonzero_frac_mean_mean'])} "
            f"| {_fmt(r['optimizer_steps_mean'], pct=False, digits=1)} "
            f"| {_fmt(r['rollouts_mean'], pct=False, digits=0)} "
            f"| {_fmt(r['completion_tokens_mean'], pct=False, digits=0)} "
            f"| {_fmt(r['prm_completions_mean'], pct=False, digits=0)} "
            f"| {_fmt(r['wall_s_mean'], pct=False, digits=0)} ± {_fmt(r['wall_s_std'], pct=False, digits=0)} |"
        )
    return "\n".join(lines)


def _eval_points(run: RunResult) -> tuple[list[float], list[float]]:
    """(rollouts, pass@1) of a run's evaluations, starting with the one before training."""
    xs, ys = [0.0], [run.accuracy_before if run.accuracy_before is not None else float("nan")]
    for c in run.curve:
        if c["pass@1"] is not None:
            xs.append(float(c["rollouts"]))
            ys.append(float(c["pass@1"]))
    return xs, ys


def plot(results: list[RunResult], methods: list[str], budget: int, path: Path, title: str) -> None:
    """Three panels over seeds (mean line, min-max band): held-out pass@1, ACR, non-zero adv."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    grid = np.linspace(0, budget, 41)
    for i, method in enumerate(methods):
        runs = [r for r in results if r.method == method]
        if not runs:
            continue
        color = f"C{i}"
        # Accuracy is interpolated between evaluation points onto a common rollout grid.
        acc = np.array([np.interp(grid, *_eval_points(r)) for r in runs])
        lw = 2.4 if method == "verigate" else 1.4
        axes[0].plot(grid, acc.mean(0), color=color, lw=lw, label=method)
        axes[0].fill_between(grid, acc.min(0), acc.max(0), color=color, alpha=0.12)
        for ax, key in ((axes[1], "acr"), (axes[2], "nonzero_frac")):
            n = min(len(r.curve) for r in runs)
            vals = np.array([[r.curve[k][key] if r.curve[k][key] is not None else np.nan
                              for k in range(n)] for r in runs], dtype=float)
            steps = np.arange(1, n + 1)
            ax.plot(steps, np.nanmean(vals, 0), color=color, lw=lw, label=method)
            ax.fill_between(steps, np.nanmin(vals, 0), np.nanmax(vals, 0), color=color, alpha=0.12)
    axes[0].set(xlabel="training rollouts", ylabel="held-out pass@1", title="held-out accuracy")
    axes[1].set(xlabel="optimizer step", ylabel="ACR", title="advantage collapse rate", ylim=(-0.02, 1.02))
    axes[2].set(xlabel="optimizer step", ylabel="fraction of tokens with |A| > 0",
                title="non-zero advantage fraction", ylim=(-0.02, 1.02))
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command line of the experiment."""
    d = ExperimentSettings()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--methods", default=",".join(METHODS),
                   help=f"comma separated advantage methods or variants ({', '.join(VARIANTS)})")
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 per method")
    p.add_argument("--steps", type=int, default=d.steps, help="optimizer steps of the non-DAPO methods; "
                   "the rollout budget is steps x prompts-per-step x group-size")
    p.add_argument("--group-size", type=int, default=d.group_size)
    p.add_argument("--prompts-per-step", type=int, default=d.prompts_per_step)
    p.add_argument("--dataset", default=d.dataset, help="trainer dataset (builtin:arith[:key=value,...])")
    p.add_argument("--eval-size", type=int, default=d.eval_size)
    p.add_argument("--eval-samples", type=int, default=d.eval_samples)
    p.add_argument("--eval-interval", type=int, default=d.eval_interval)
    p.add_argument("--max-completion-len", type=int, default=d.max_completion_len)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--warmstart-dir", default=d.warmstart_dir)
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="extra trainer field for every run (repeatable), e.g. --set gate=any_collapsed")
    p.add_argument("--jobs", type=int, default=2, help="runs in parallel (processes)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per run; on a loaded CPU more "
                   "threads than free cores makes a tiny model many times slower (0: cores / jobs)")
    p.add_argument("--runs-dir", default="runs/gating_experiment", help="trainer output folders")
    p.add_argument("--results", type=Path, default=DEFAULT_RESULTS,
                   help="path prefix of the .json and .png written")
    p.add_argument("--final-eval", type=int, default=300, metavar="N",
                   help="after training, check every final model (and the warm start) on N fresh problems, "
                        "greedy and 2 samples at T=1, with the task's exact checker (0: skip)")
    p.add_argument("--from-json", type=Path, default=None,
                   help="skip training: re-aggregate the runs recorded in this JSON (their run folders must "
                        "still exist for --final-eval)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 1 seed, 2 steps, tiny eval (does not overwrite the committed results "
                        "unless --results is given)")
    return p.parse_args(argv)


def _parse_overrides(items: list[str]) -> dict[str, Any]:
    """FIELD=VALUE pairs, values read as YAML scalars (numbers, booleans, strings)."""
    import yaml

    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item!r}: expected FIELD=VALUE")
        out[name.strip().replace("-", "_")] = yaml.safe_load(value)
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the comparison, write JSON and PNG, print the table."""
    args = parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    seeds = list(range(args.seeds))
    settings = ExperimentSettings(
        steps=args.steps, group_size=args.group_size, prompts_per_step=args.prompts_per_step,
        dataset=args.dataset, eval_size=args.eval_size, eval_samples=args.eval_samples,
        eval_interval=args.eval_interval, max_completion_len=args.max_completion_len, lr=args.lr,
        warmstart_dir=args.warmstart_dir, overrides=_parse_overrides(args.set),
    )
    results_prefix = args.results
    if args.quick:
        seeds = [0]
        settings.steps, settings.eval_size, settings.eval_samples, settings.eval_interval = 2, 8, 2, 1
        settings.prompts_per_step = min(settings.prompts_per_step, 4)
        if args.results == DEFAULT_RESULTS:
            results_prefix = Path(args.runs_dir) / "quick"
    # Fail on a bad method or field now, not after the first runs.
    for method in methods:
        _trainer_config(settings, method, 0, Path(args.runs_dir) / "check", 1, False)

    from veristep.train.demo import warmstart

    t0 = time.perf_counter()
    model = settings.overrides.get("model", "builtin:warmstart")
    if model == "builtin:warmstart":
        # Built once here, so parallel runs find it cached instead of each training it.
        ws_path = warmstart.ensure_warm_start(settings.warmstart_dir, seed=0)
    else:
        ws_path = Path(model)
    ws_seconds = time.perf_counter() - t0
    try:
        ws_meta = warmstart.load_meta(ws_path)
    except OSError:
        ws_meta = {}
    threads = args.threads or max(1, (os.cpu_count() or 1) // max(1, args.jobs))
    jobs = [(settings, m, s, args.runs_dir, threads) for s in seeds for m in methods]
    print(f"gating experiment: {len(methods)} methods x {len(seeds)} seeds, budget "
          f"{settings.rollout_budget} rollouts per run, {args.jobs} parallel job(s) x {threads} thread(s); "
          f"warm start {ws_path} ({ws_seconds:.0f} s this call)", flush=True)
    t_all = time.perf_counter()
    if args.from_json:
        previous = json.loads(args.from_json.read_text())
        results = [RunResult(**{**r, "final_eval": r.get("final_eval")}) for r in previous["runs"]]
        results = [r for r in results if r.method in methods and r.seed in seeds]
        for r in results:
            if r.advantage is None:  # recorded before estimator and loss were split
                _fill_objective(r, settings, Path(args.runs_dir))
        total_s = previous.get("total_seconds", 0.0)
    else:
        with ProcessPoolExecutor(max(1, args.jobs), mp_context=get_context("spawn")) as pool:
            results = list(pool.map(_run_job, jobs))
        total_s = time.perf_counter() - t_all
    n_final = 16 if args.quick else args.final_eval
    base_eval = None
    if n_final:
        t_eval = time.perf_counter()
        dirs = [ws_path] + [final_model_dir(r.output_dir) for r in results]
        todo = [(str(d), str(ws_path), n_final) for d in dirs if d is not None]
        with ProcessPoolExecutor(max(1, args.jobs), mp_context=get_context("spawn")) as pool:
            evals = iter(pool.map(_final_eval_job, todo))
        base_eval = next(evals)
        for r, d in zip(results, dirs[1:], strict=True):
            r.final_eval = next(evals) if d is not None else None
        print(f"final-model check on {n_final} fresh problems: {time.perf_counter() - t_eval:.0f} s")

    rows = summarise(results, methods)
    table = format_table(rows)
    final_table = format_final_table(rows, base_eval, n_final) if n_final else ""
    png = results_prefix.with_suffix(".png")
    title = (f"veristep built-in task ({settings.dataset}), G={settings.group_size}, "
             f"{settings.prompts_per_step} prompts/step, budget {settings.rollout_budget} rollouts, "
             f"{len(seeds)} seeds: mean (line) and min-max (band)")
    plot(results, methods, settings.rollout_budget, png, title)
    report = {
        "settings": {**asdict(settings), "rollout_budget": settings.rollout_budget},
        "methods": methods, "seeds": seeds,
        "warm_start": {"path": str(ws_path), **{k: v for k, v in ws_meta.items()}},
        "table": rows, "runs": [asdict(r) for r in results],
        "final_eval": {"problems": n_final, "seed": 777, "t1_samples": 2, "warm_start": base_eval},
        "markdown": {"table": table, "final_table": final_table},
        "total_seconds": round(total_s, 1), "jobs": args.jobs, "threads_per_job": threads,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": sys.version.split()[0],
                    "load_average_at_end": list(os.getloadavg())},
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
    }
    json_path = results_prefix.with_suffix(".json")
    json_path.write_text(json.dumps(report, indent=2))
    print()
    print(table)
    if final_table:
        print()
        print(final_table)
    print(f"\nheld-out pass@1 in %, mean ± sample std over {len(seeds)} seeds; ACR and non-zero "
          f"advantage fraction are means over steps; compute columns are per run.")
    print(f"total {total_s / 60:.1f} min; wrote {json_path} and {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

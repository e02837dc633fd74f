"""Every PRM against exact step labels of the built-in task, with what each cost to make.

Held-out traces are sampled from a warm-started policy on "rl"-part prompts it never saw and
labelled exactly (`veristep prm traces`' labels: ProcessBench convention against the reference
solution). Then, on other prompts of the same level, the policy's own traces are labelled by
Monte-Carlo continuations (`veristep prm label`) and two PRMs are made from them: a trained
token-classification PRM (soft and hard labels, `veristep prm train`) and PRIME's implicit PRM
(outcome labels only). Each scorer, beside the rule checker, Monte-Carlo values on the held-out
traces themselves and the exact oracle (the ceiling), is calibrated with `veristep.prm.calibrate`:
trace AUROC with bootstrap CI beside the length baseline, step AUROC, earliest-error F1
(ProcessBench's harmonic mean), step ECE / Brier, and each one's label / training / scoring cost.

    python benchmarks/prm_builtin_calibration.py --policy runs/warmstart-chain8 --level chain8
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--policy", default="runs/warmstart-chain8", help="warm-started policy folder")
    p.add_argument("--level", default="chain8", help="built-in task level of every prompt")
    p.add_argument("--train-prompts", type=int, default=32)
    p.add_argument("--train-samples", type=int, default=4)
    p.add_argument("--eval-prompts", type=int, default=64)
    p.add_argument("--eval-samples", type=int, default=2)
    p.add_argument("--k", type=int, default=4, help="Monte-Carlo continuations per step prefix")
    p.add_argument("--max-new-tokens", type=int, default=180)
    p.add_argument("--prm-steps", type=int, default=300)
    p.add_argument("--prm-lr", type=float, default=3e-4)
    p.add_argument("--implicit-steps", type=int, default=60)
    p.add_argument("--implicit-lr", type=float, default=5e-4)
    p.add_argument("--implicit-beta", type=float, default=0.1)
    p.add_argument("--bootstrap", type=int, default=1000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--work", default="runs/prm-bench", help="folder for traces, labels and models")
    p.add_argument("--out", default=str(RESULTS / "prm_builtin_calibration.json"))
    p.add_argument("--plot", default=str(RESULTS / "prm_builtin_calibration.png"))
    p.add_argument("--reuse", action="store_true",
                   help="reuse the traces, labels and models already in --work (costs from their files)")
    p.add_argument("--skip-mc", action="store_true", help="leave out Monte-Carlo values on the held-out traces")
    p.add_argument("--exact-control", action="store_true",
                   help="also train the same PRM on the exact labels of the training traces (a control: "
                   "what the training recipe reaches with perfect labels)")
    p.add_argument("--mc-traces", type=int, default=0,
                   help="score Monte-Carlo values on only the first N held-out traces (0: all)")
    return p.parse_args(argv)


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Run the whole comparison and write the JSON and the figure."""
    args = _args(argv)
    import torch

    torch.set_num_threads(args.threads)
    from veristep.prm.builtin_traces import sample_exact_traces
    from veristep.prm.calibrate import calibrate, load_jsonl
    from veristep.prm.implicit import load_implicit, train_implicit
    from veristep.prm.loader import load_scorer
    from veristep.prm.mc_labels import (
        LabelBudget,
        PolicyMCScorer,
        mc_label,
        parse_label_row,
        sample_traces,
    )
    from veristep.prm.train import PRMTrainConfig, train_prm
    from veristep.train.data import load_records
    from veristep.train.mc_values import load_policy

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    policy = load_policy(args.policy, max_new_tokens=args.max_new_tokens)
    source = f"builtin:arith:level={args.level}"
    train_problems = load_records(source, limit=args.train_prompts, seed=0)
    seen = {p["prompt"] for p in train_problems}
    candidates = load_records(source, limit=args.eval_prompts * 3 + 50, seed=1_000_003)
    eval_problems = [p for p in {c["prompt"]: c for c in candidates if c["prompt"] not in seen}.values()]
    eval_problems = eval_problems[:args.eval_prompts]
    costs: dict[str, dict[str, Any]] = {}

    held_path = work / "held_out.jsonl"
    stages = work / "stages.json"
    reuse = args.reuse and stages.is_file()
    if reuse:
        saved = json.loads(stages.read_text())
        sample_s, budget = saved["sampling_seconds"], LabelBudget(**saved["label_budget"])
        rows = [json.loads(line) for line in (work / "labels.jsonl").read_text().splitlines()]
        _say(f"reusing {work}: traces, labels ({budget.as_dict()}) and models")
    else:
        _say(f"held-out traces: {len(eval_problems)} prompts x {args.eval_samples}")
        t0 = time.perf_counter()
        held = sample_exact_traces(policy, eval_problems, args.eval_samples, seed=1)
        _write_jsonl(held_path, held)
        sample_s = time.perf_counter() - t0
        _say(f"MC labels: {len(train_problems)} prompts x {args.train_samples}, k={args.k}")
        pairs = sample_traces(policy, train_problems, args.train_samples, seed=0)
        rows, budget = mc_label(policy, pairs, args.k, seed=0)
        _write_jsonl(work / "labels.jsonl", rows)
        _say(f"label budget {budget.as_dict()}")

    for which in ("soft", "hard"):
        if reuse:
            meta = json.loads((work / f"prm-{which}" / "veristep_prm.json").read_text())
        else:
            examples = [parse_label_row(r, f"{which}_labels", "\n") for r in rows]
            cfg = PRMTrainConfig(base=args.policy, labels=which, steps=args.prm_steps, lr=args.prm_lr,
                                 checkpoint_every=100)
            _say(f"train token-cls PRM on {which} labels, {args.prm_steps} steps")
            meta = train_prm(examples, cfg, work / f"prm-{which}", restart=True)
        costs[f"trained-{which}"] = {
            "label_rollouts": budget.rollouts, "label_traces": budget.traces,
            "label_continuations": budget.continuations, "label_seconds": round(budget.seconds, 1),
            "train_steps": meta["train_steps"], "train_seconds": meta["train_seconds"],
            "train_loss_first_last": [meta["loss_first"], meta["loss_last"]],
            "scoring": "1 forward pass of the PRM per trace"}

    if reuse:
        implicit = load_implicit(str(work / "implicit"))
        summary = saved["implicit"]
    else:
        _say(f"implicit PRM: {args.implicit_steps} updates on the outcomes of the same traces")
        implicit = load_implicit(args.policy, beta=args.implicit_beta, lr=args.implicit_lr, batch_size=32)
        outcome_rows = [{"prompt": r["prompt"], "completion": r["completion"], "correct": r["correct"]}
                        for r in rows]
        summary = train_implicit(implicit, outcome_rows, args.implicit_steps, 32, seed=0,
                                 output=work / "implicit")
        stages.write_text(json.dumps({"sampling_seconds": sample_s, "implicit": summary,
                                      "label_budget": {k: getattr(budget, k) for k in (
                                          "traces", "continuations", "continuation_tokens",
                                          "trace_tokens", "seconds", "k")}}, default=_nan))
    st = implicit.stats
    costs["implicit"] = {
        "label_rollouts": budget.traces, "label_continuations": 0,
        "updates": summary["updates"], "update_seqs": st["update_seqs"], "update_tokens": st["update_tokens"],
        "update_forward_s": round(st["update_forward_s"], 2), "update_backward_s": round(st["update_backward_s"], 2),
        "per_update_s": round((st["update_forward_s"] + st["update_backward_s"]) / max(1, st["updates"]), 3),
        "loss_first_last": [summary["loss_first"], summary["loss_last"]],
        "scoring": "1 forward pass of pi_phi and 1 of pi_ref per trace"}

    traces = load_jsonl(held_path)
    scorers = {
        "rule": (load_scorer("rule"), {"label_rollouts": 0, "scoring": "arithmetic checks, no model"}),
        "oracle (ceiling)": (load_scorer("oracle"), {"label_rollouts": 0,
                                                     "scoring": "the reference solution (not available in practice)"}),
        f"mc:k={args.k}": (PolicyMCScorer(policy, args.k, {t.prompt: t.answer for t in traces}, seed=1), {}),
        "trained-soft": (load_scorer(f"trained:{work / 'prm-soft'}"), costs["trained-soft"]),
        "trained-hard": (load_scorer(f"trained:{work / 'prm-hard'}"), costs["trained-hard"]),
        "implicit": (load_scorer(f"implicit:{work / 'implicit'}"), costs["implicit"]),
    }
    if args.exact_control:
        from veristep.prm.builtin_traces import exact_record
        from veristep.prm.mc_labels import LabelledExample

        examples = []
        for r in rows:  # ProcessBench convention: the steps up to the first error, labelled
            labels = [float(v) for v in exact_record(r["prompt"], r["completion"], r["answer"], "")["step_labels"]
                      if v is not None]
            examples.append(LabelledExample(r["prompt"], r["steps"][:len(labels)], labels))
        _say(f"control: train token-cls PRM on exact labels, {args.prm_steps} steps")
        meta = train_prm(examples, PRMTrainConfig(base=args.policy, labels="given", steps=args.prm_steps,
                                                  lr=args.prm_lr, checkpoint_every=100),
                         work / "prm-exact", restart=True)
        scorers["trained, exact labels (control)"] = (load_scorer(f"trained:{work / 'prm-exact'}"), {
            "label_rollouts": budget.traces, "labels": "exact (not available in practice)",
            "train_steps": meta["train_steps"], "train_seconds": meta["train_seconds"],
            "train_loss_first_last": [meta["loss_first"], meta["loss_last"]],
            "scoring": "1 forward pass of the PRM per trace"})
    if args.skip_mc:
        scorers = {k: v for k, v in scorers.items() if not k.startswith("mc:")}
    results: dict[str, Any] = {}
    scored_all = {}
    for name, (scorer, cost) in scorers.items():
        _say(f"calibrate {name}")
        subset = traces[:args.mc_traces] if name.startswith("mc:") and args.mc_traces else traces
        report, scored = calibrate(scorer, subset, scorer_name=name, data_names=["builtin:arith"],
                                   n_bootstrap=args.bootstrap, seed=0)
        overall = report.subsets["held_out/overall"]
        if name.startswith("mc:"):
            cost = {"label_rollouts": 0, "scoring_rollouts": scorer.rollouts,
                    "scoring_rollouts_per_trace": round(scorer.rollouts / len(subset), 2),
                    "scored_traces": len(subset),
                    "scoring": f"k={args.k} continuations of every step prefix of every scored trace"}
        results[name] = _summary(overall, report.scoring_seconds, len(subset), cost)
        scored_all[name] = scored
    policy.close()
    n_wrong_steps = sum(lab == 0 for t in traces for lab in t.step_labels)
    out = {
        "benchmark": "prm_builtin_calibration",
        "command": "python benchmarks/prm_builtin_calibration.py " + " ".join(argv or sys.argv[1:]),
        "policy": Path(args.policy).name, "level": args.level,
        "held_out": {"traces": len(traces), "correct": sum(t.correct for t in traces),
                     "with_wrong_step": sum(t.first_error is not None and t.first_error >= 0 for t in traces),
                     "labelled_steps": sum(lab is not None for t in traces for lab in t.step_labels),
                     "wrong_steps": n_wrong_steps, "sampling_seconds": round(sample_s, 1)},
        "label_budget": budget.as_dict(),
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "plot", "work")},
        "machine": {"cpu": platform.processor() or platform.machine(), "torch_threads": args.threads,
                    "note": "shared 2-core machine; seconds are indicative only"},
        "scorers": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2, default=_nan) + "\n", encoding="utf-8")
    _say(f"wrote {args.out}")
    print(format_table(out))
    if args.plot:
        plot(out, scored_all, args.plot)
        _say(f"wrote {args.plot}")
    return 0


def _nan(x: Any) -> Any:
    return None if isinstance(x, float) and math.isnan(x) else str(x)


def _est(e: Any) -> dict[str, float | None]:
    return {k: (None if v is None or math.isnan(v) else round(v, 4)) for k, v in
            (("value", e.value), ("low", e.low), ("high", e.high))}


def _summary(r: Any, seconds: float, n: int, cost: dict[str, Any]) -> dict[str, Any]:
    ee = r.earliest_error
    return {
        "trace_auroc": {agg: _est(e) for agg, e in r.auroc.items()},
        "length_baseline_auroc": _est(r.baseline_auroc["length_chars"]),
        "step_auroc": _est(r.step_auroc) if r.step_auroc is not None else None,
        "first_error_f1_at_0.5": None if ee is None else _clean(ee.all_at_half.f1),
        "first_error_f1_tuned": None if ee is None else _clean(ee.test_at_tuned.f1),
        "tuned_threshold": None if ee is None else ee.tuned_threshold,
        "step_ece": _clean(r.step_ece), "step_brier": _clean(r.step_brier),
        "trace_ece_min": _clean(r.trace_ece["min"]),
        "n_labelled_steps": r.n_labelled_steps,
        "scoring_seconds_per_trace": round(seconds / max(1, n), 4),
        "cost": cost,
    }


def _clean(x: float) -> float | None:
    return None if x is None or math.isnan(x) else round(float(x), 4)


def format_table(out: dict[str, Any]) -> str:
    """A markdown table of the summary, as docs/prm.md shows it."""
    head = ("| PRM | trace AUROC min [95 % CI] | step AUROC [95 % CI] | first-error F1 @0.5 / tuned | "
            "step ECE | label rollouts | training | scoring rollouts / trace |")
    lines = [head, "|" + "---|" * 8]
    base = next(iter(out["scorers"].values()))["length_baseline_auroc"]
    for name, s in out["scorers"].items():
        a, st, c = s["trace_auroc"]["min"], s["step_auroc"] or {}, s["cost"]
        train = (f"{c['train_steps']} steps, {c['train_seconds']:.0f} s" if "train_steps" in c else
                 f"{c['updates']} updates, {c['per_update_s']:.2f} s each" if "updates" in c else "-")
        lines.append(
            f"| {name} | {_f(a['value'])} [{_f(a['low'])}, {_f(a['high'])}] | {_f(st.get('value'))} "
            f"[{_f(st.get('low'))}, {_f(st.get('high'))}] | {_f(s['first_error_f1_at_0.5'])} / "
            f"{_f(s['first_error_f1_tuned'])} | {_f(s['step_ece'])} | {c.get('label_rollouts', 0)} | {train} | "
            f"{c.get('scoring_rollouts_per_trace', 0)} |")
    lines.append(f"| length baseline (shorter = correct) | {_f(base['value'])} [{_f(base['low'])}, "
                 f"{_f(base['high'])}] | - | - | - | 0 | - | 0 |")
    return "\n".join(lines)


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def plot(out: dict[str, Any], scored_all: dict[str, Any], path: str) -> None:
    """Reliability diagram of step scores per PRM, and trace / step AUROC with CIs beside the baseline."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from veristep.prm.metrics import reliability_bins

    names = list(out["scorers"])
    colours = ["#1b9e77", "#999999", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))
    ax1.plot([0, 1], [0, 1], ls=":", color="black", lw=1)
    for name, colour in zip(names, colours, strict=False):
        scored = scored_all[name]
        p = [s for t, ss in zip(scored.traces, scored.step_scores, strict=True)
             for s, lab in zip(ss, t.step_labels, strict=True) if lab is not None]
        y = [lab for t in scored.traces for lab in t.step_labels if lab is not None]
        bins = [b for b in reliability_bins(p, y, 10) if b.count]
        ece = out["scorers"][name]["step_ece"]
        ax1.plot([b.mean_prob for b in bins], [b.observed for b in bins], marker="o", color=colour,
                 label=f"{name} (ECE {_f(ece)})", ms=4)
    ax1.set(xlabel="step score (bin mean)", ylabel="share of steps exactly right",
            title="Reliability of step scores (labelled steps)", xlim=(0, 1), ylim=(0, 1.02))
    ax1.legend(fontsize=8, loc="upper left")
    xs = range(len(names))
    for k, (key, dx, marker) in enumerate((("trace_auroc", -0.15, "o"), ("step_auroc", 0.15, "s"))):
        vals, lo, hi = [], [], []
        for name in names:
            e = out["scorers"][name][key]
            e = e["min"] if key == "trace_auroc" else (e or {"value": None, "low": None, "high": None})
            v = e["value"] if e["value"] is not None else math.nan
            vals.append(v)
            lo.append(v - e["low"] if e["low"] is not None else 0)
            hi.append(e["high"] - v if e["high"] is not None else 0)
        ax2.errorbar([x + dx for x in xs], vals, yerr=[lo, hi], fmt=marker, capsize=3,
                     color=["#1f78b4", "#33a02c"][k],
                     label="trace AUROC (min step score)" if k == 0 else "step AUROC (exact labels)")
    base = out["scorers"][names[0]]["length_baseline_auroc"]
    if base["value"] is not None:
        ax2.axhspan(base["low"] or base["value"], base["high"] or base["value"], color="#7570b3",
                    alpha=0.2, label=f"length baseline {_f(base['value'])}")
    ax2.axhline(0.5, color="black", lw=0.8, ls=":")
    ax2.set_xticks(list(xs), names, rotation=20, fontsize=8)
    ax2.set(ylim=(0.3, 1.02), ylabel="AUROC (95 % bootstrap CI)", title="Separation, beside the length baseline")
    ax2.legend(fontsize=8, loc="lower right")
    held = out["held_out"]
    fig.suptitle(f"PRMs on held-out {out['level']} traces of {out['policy']}: {held['traces']} traces, "
                 f"{held['labelled_steps']} exactly labelled steps ({held['wrong_steps']} wrong)", fontsize=10)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())

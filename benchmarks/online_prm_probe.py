"""What an implicit PRM learned online during a training run, against exact step labels.

A run with `--prm implicit:DIR` updates PRIME's implicit PRM every step and keeps its state in
each checkpoint (`online_prm` in trainer.pt). This script loads that state from each run's last
checkpoint, scores held-out traces of the built-in task sampled from the run's starting policy
and labelled exactly (`veristep prm traces`' labels), and reports, per run: step AUROC (correct
above wrong) with a bootstrap CI, the mean implicit reward of correct and of wrong steps, the
step at which sigmoid(Q) first falls below 0.5 (where prefix credit puts the first error)
against the true first error, and the PRM's training loss at its first and last updates.

    python benchmarks/online_prm_probe.py runs/gating_experiment_chain8/implicit_prefix@lr2.62-seed*
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def first_below_half(scores: list[float]) -> int | None:
    """Index of the first step whose score is below 0.5 (prefix credit's first error), or None."""
    return next((j for j, v in enumerate(scores) if v < 0.5), None)


def run_prm_spec(run: Path) -> str:
    """The `prm` field of a finished run's config.yaml (an implicit spec)."""
    import yaml

    spec = str(yaml.safe_load((run / "config.yaml").read_text()).get("prm") or "")
    if not spec.startswith("implicit:"):
        raise SystemExit(f"{run}: its prm is {spec!r}, not an online implicit PRM")
    return spec


def load_online_prm(run: Path) -> Any:
    """The implicit PRM of `run` as its last checkpoint left it."""
    import torch
    from veristep.prm.implicit import load_implicit, parse_implicit_target
    from veristep.train.checkpoint import latest_checkpoint

    base, options = parse_implicit_target(run_prm_spec(run).partition(":")[2])
    ckpt = latest_checkpoint(run)
    if ckpt is None:
        raise SystemExit(f"{run}: no complete checkpoint")
    state = torch.load(ckpt / "trainer.pt", map_location="cpu", weights_only=False).get("online_prm")
    if not isinstance(state, dict):
        raise SystemExit(f"{ckpt}: no online_prm state in trainer.pt")
    prm = load_implicit(base, **options)
    prm.load_state_dict(state)
    return prm


def probe(prm: Any, traces: list[dict[str, Any]], bootstrap: int = 1000) -> dict[str, Any]:
    """Score `traces` (exactly labelled rows) with `prm`; the numbers of the module docstring."""
    from veristep.prm.metrics import auroc
    from veristep.prm.metrics import bootstrap as bootstrap_ci

    prompts, completions = [t["prompt"] for t in traces], [t["completion"] for t in traces]
    scores = [s.scores for s in prm.score_batch(prompts, completions)]
    rewards = prm.step_rewards(prompts, completions)
    p, y, ok_r, bad_r, declared, true_first = [], [], [], [], [], []
    for t, sc, rw in zip(traces, scores, rewards, strict=True):
        for lab, v, r in zip(t["step_labels"], sc, rw, strict=False):
            if lab is None:
                continue
            p.append(v)
            y.append(int(lab))
            (ok_r if lab == 1 else bad_r).append(r)
        declared.append(first_below_half(sc))
        true_first.append(t["label"] if t["label"] >= 0 else None)
    est = bootstrap_ci(auroc, p, y, bootstrap, seed=0)
    at_first_step = sum(d == 0 for d in declared) / len(declared)
    agree = [d == f for d, f in zip(declared, true_first, strict=True) if f is not None]
    stats = prm.stats
    return {"traces": len(traces), "labelled_steps": len(y), "wrong_steps": y.count(0),
            "step_auroc": {"value": est.value, "low": est.low, "high": est.high},
            "mean_step_reward": {"correct": statistics.fmean(ok_r) if ok_r else None,
                                 "wrong": statistics.fmean(bad_r) if bad_r else None},
            "declared_first_error_at_step_1": at_first_step,
            "declared_first_error_is_the_true_one": sum(agree) / len(agree) if agree else None,
            "updates": stats.get("updates"), "update_seqs": stats.get("update_seqs")}


def held_out_traces(policy_dir: str, level: str, prompts: int, samples: int) -> list[dict[str, Any]]:
    """Traces of held-out prompts sampled from `policy_dir` and labelled exactly."""
    from veristep.prm.builtin_traces import sample_exact_traces
    from veristep.train.data import load_records
    from veristep.train.mc_values import load_policy

    policy = load_policy(policy_dir, max_new_tokens=180)
    try:
        problems = load_records(f"builtin:arith:level={level}", limit=prompts, seed=1_000_003)
        return sample_exact_traces(policy, problems, samples, seed=1)
    finally:
        policy.close()


def main(argv: list[str] | None = None) -> int:
    """Probe each run; print a table and write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path, help="run folders of a trainer with --prm implicit:...")
    p.add_argument("--level", default="chain8")
    p.add_argument("--prompts", type=int, default=96)
    p.add_argument("--samples", type=int, default=2)
    p.add_argument("--out", type=Path, default=RESULTS / "online_prm_probe.json")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    base = {str(r): run_prm_spec(r).partition(":")[2].split(",")[0] for r in args.runs}
    if len(set(base.values())) != 1:
        raise SystemExit(f"the runs started from different PRMs: {sorted(set(base.values()))}")
    traces = held_out_traces(next(iter(base.values())), args.level, args.prompts, args.samples)
    rows = {}
    for run in args.runs:
        rows[run.name] = probe(load_online_prm(run), traces)
        r = rows[run.name]
        a, m = r["step_auroc"], r["mean_step_reward"]
        print(f"{run.name}: step AUROC {a['value']:.3f} [{a['low']:.3f}, {a['high']:.3f}], step reward correct "
              f"{m['correct']:+.3f} / wrong {m['wrong']:+.3f}, first error declared at step 1 in "
              f"{100 * r['declared_first_error_at_step_1']:.0f} % of traces", flush=True)
    out = {"benchmark": "online_prm_probe", "command": " ".join(["benchmarks/online_prm_probe.py", *(argv or sys.argv[1:])]),
           "start": next(iter(base.values())), "level": args.level, "held_out_traces": len(traces),
           "held_out_correct": sum(bool(t["correct"]) for t in traces), "runs": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

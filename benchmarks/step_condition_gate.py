"""Feasibility gate of the step-credit condition: is this a place where step labels could help?

Before any RL, samples G completions at T = 1 for held-out prompts of the condition (prompts of
the task's "rl" part, never shown to the warm start) and checks the gate fixed in
docs/experiment.md:

    pass@1 <= 10 %                                  outcome signal is scarce
    >= 70 % of groups all-wrong                     most groups give GRPO nothing
    conditional per-step accuracy >= 0.6, flat      every step is learnable on its own
      (max - min over positions <= 0.15)
    median P(correct character) at the first error  the fix is within the model's reach
      >= 0.3

It also reports greedy accuracy and the kinds of first error (a wrong result of a right
operation, a mis-read operand, a broken line, a wrong answer line, a chain stopped early).
The same measurement on a trained model is the experiment's mechanism endpoint
(`measure`, imported by benchmarks/gating_experiment.py).

    python benchmarks/step_condition_gate.py                      # builds the chain8 warm start if needed
    python benchmarks/step_condition_gate.py --model runs/warmstart-chain8 --prompts 400
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "benchmarks" / "results" / "step_condition_gate.json"
#: The gate's thresholds (docs/experiment.md, fixed before any RL run).
GATE = {"pass@1_max": 0.10, "all_wrong_min": 0.70, "step_accuracy_min": 0.6, "step_accuracy_spread_max": 0.15,
        "p_correct_at_first_error_min": 0.3}
#: Seed of the gate's prompts: drawn from the "rl" part like the trainer's, but from their own seed.
PROMPT_SEED = 20_261_202


def _sample(model: Any, tokenizer: Any, prompts: list[str], group_size: int, temperature: float,
            max_new_tokens: int, seed: int, chunk: int = 256) -> list[str]:
    """G completions per prompt (group-major), in chunks, each chunk under its own seed."""
    from veristep.train.demo.warmstart import generate_completions

    rows = [p for p in prompts for _ in range(group_size)]
    out: list[str] = []
    for i in range(0, len(rows), chunk):
        out += generate_completions(model, tokenizer, rows[i:i + chunk], temperature, max_new_tokens,
                                    seed=seed + i)
    return out


def _p_expected(model: Any, tokenizer: Any, contexts: list[str], expected: list[str], chunk: int = 128) -> list[float]:
    """P(next character = expected) after each context, from one forward pass per chunk."""
    import torch

    probs: list[float] = []
    for i in range(0, len(contexts), chunk):
        batch = tokenizer(contexts[i:i + chunk], return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            logits = model(**batch).logits[:, -1, :].float()
        p = logits.softmax(-1)
        ids = [tokenizer.convert_tokens_to_ids(c) for c in expected[i:i + chunk]]
        probs += [float(p[j, t]) for j, t in enumerate(ids)]
    return probs


def measure(model_dir: str | Path, prompts: int = 200, group_size: int = 4, seed: int = 0,
            max_new_tokens: int = 180, level: str = "chain8", greedy: bool = True) -> dict[str, Any]:
    """Sample and diagnose a model on held-out prompts of `level`: the gate's numbers."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from veristep.train.demo.step_diagnosis import diagnose, summarise_traces
    from veristep.train.demo.task import make_problems

    t0 = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    problems = make_problems(prompts, seed=PROMPT_SEED + seed, part="rl", level=level)
    texts = [p["prompt"] for p in problems]
    completions = _sample(model, tokenizer, texts, group_size, 1.0, max_new_tokens, seed=seed)
    rows = [p for p in texts for _ in range(group_size)]
    diags = [diagnose(p, c) for p, c in zip(rows, completions, strict=True)]
    n_steps = max(p["num_steps"] for p in problems)
    report = summarise_traces(diags, group_size, n_steps)
    at_error = [(p + c[:d.char_index], d.expected_char) for p, c, d in zip(rows, completions, diags, strict=True)
                if not d.correct and d.char_index is not None and d.expected_char is not None]
    probs = _p_expected(model, tokenizer, [a for a, _ in at_error], [e for _, e in at_error]) if at_error else []
    report["p_correct_at_first_error_median"] = statistics.median(probs) if probs else None
    report["p_correct_at_first_error_n"] = len(probs)
    if greedy:
        g = _sample(model, tokenizer, texts, 1, 0.0, max_new_tokens, seed=seed)
        report["greedy"] = sum(diagnose(p, c).correct for p, c in zip(texts, g, strict=True)) / len(texts)
    report["examples"] = completions[:3]
    report["seconds"] = round(time.perf_counter() - t0, 1)
    return report


def check_gate(report: dict[str, Any]) -> dict[str, bool]:
    """Each gate condition: met or not."""
    acc = report["step_accuracy_by_position"]
    known = [a for a in acc if a is not None]
    p_err = report.get("p_correct_at_first_error_median")
    return {
        "pass@1 <= 10 %": report["pass@1"] <= GATE["pass@1_max"],
        ">= 70 % all-wrong groups": report["all_wrong_groups"] >= GATE["all_wrong_min"],
        "step accuracy >= 0.6 at every position": bool(known) and min(known) >= GATE["step_accuracy_min"],
        "step accuracy flat (spread <= 0.15)": bool(known) and max(known) - min(known) <= GATE["step_accuracy_spread_max"],
        "median P(correct char) at first error >= 0.3": p_err is not None and p_err >= GATE["p_correct_at_first_error_min"],
    }


def main(argv: list[str] | None = None) -> int:
    """Measure the warm start of the condition, print the gate, write JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help="model directory (default: build/reuse the chain8 warm start)")
    p.add_argument("--warmstart-dir", default="runs/warmstart-chain8")
    p.add_argument("--prompts", type=int, default=200)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    model = args.model
    if model is None:
        from veristep.train.demo.warmstart import CONDITION_RECIPES, ensure_warm_start

        model = str(ensure_warm_start(args.warmstart_dir, seed=0, **CONDITION_RECIPES["chain8"]))
    report = measure(model, args.prompts, args.group_size, args.seed)
    gate = check_gate(report)
    report["gate"] = gate
    report["gate_passed"] = all(gate.values())
    report["thresholds"] = GATE
    report["model"] = str(model)
    report["command"] = " ".join(["benchmarks/step_condition_gate.py", *(argv if argv is not None else sys.argv[1:])])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    acc = ", ".join("-" if a is None else f"{a:.2f}" for a in report["step_accuracy_by_position"])
    print(f"{report['prompts']} prompts x {args.group_size} at T=1: pass@1 {100 * report['pass@1']:.1f} %, "
          f"all-wrong groups {100 * report['all_wrong_groups']:.0f} %, greedy {100 * report.get('greedy', 0):.1f} %")
    print(f"conditional step accuracy by position: {acc}")
    print(f"median P(correct char) at the first error: {report['p_correct_at_first_error_median']:.2f} "
          f"(n={report['p_correct_at_first_error_n']})")
    print("first-error kinds: " + ", ".join(f"{k} {100 * v:.0f} %" for k, v in report["first_error_kinds"].items()))
    for name, ok in gate.items():
        print(f"  {'met ' if ok else 'MISS'} {name}")
    print(f"gate {'PASSED' if report['gate_passed'] else 'FAILED'}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The end of a run: its configuration file, the console's evaluation line, the final summary
(accuracy before and after with SEs and paired differences, collapse rate, compute used) and its
printout."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from .checkpoint import latest_checkpoint
from .config import PRM_METHODS, Config
from .distributed import DistInfo
from .evaluate import EvalResult, compare
from .run import Run


def eval_state(state: dict[str, Any] | None) -> EvalResult | None:
    """An evaluation stored in a checkpoint (None if there is none, or it predates per-prompt results)."""
    if not isinstance(state, dict) or "correct" not in state:
        return None
    return EvalResult.from_state(state)


def eval_line(metrics: dict[str, Any]) -> str:
    """`pass@1 34.2% +- 1.5 | greedy 60.4% +- 2.2` for the console."""
    line = f"pass@1 {100 * metrics['eval/pass@1']:.1f}% +- {100 * metrics['eval/pass@1_se']:.1f}"
    if metrics.get("eval/greedy") is not None:
        line += f" | greedy {100 * metrics['eval/greedy']:.1f}% +- {100 * metrics['eval/greedy_se']:.1f}"
    if metrics.get("eval/unjudged_frac"):
        line += f" | unjudged {100 * metrics['eval/unjudged_frac']:.1f}%"
    return line


def header_line(cfg: Config, run: Run, info: DistInfo) -> str:
    """The console's first line: objective, model, data and scale of the run (and where it resumed)."""
    return (f"veristep train: advantage {cfg.advantage} | loss {run.loss.describe()} | "
            f"model {run.model_path} | {len(run.train_set)} prompts, "
            f"{len(run.eval_set)} held out | G={cfg.group_size} x {cfg.prompts_per_step} prompts/step | "
            f"{cfg.steps} steps on {info.device} x{info.world_size}"
            + (f" | resumed at step {run.start_step} from {run.checkpoint}" if run.checkpoint else ""))


def write_config(cfg: Config, out: Path) -> None:
    """The run's fields as given (reloadable with --config), headed by the resolved objective."""
    import yaml

    out.mkdir(parents=True, exist_ok=True)
    resolved = " ".join(f"{k}={v}" for k, v in cfg.loss_settings().to_dict().items())
    header = f"# objective as run (loss preset + explicit fields): {resolved}\n"
    (out / "config.yaml").write_text(header + yaml.safe_dump(cfg.to_dict(), sort_keys=False))


def summarise(cfg: Config, out: Path, before: EvalResult | None, after_at: tuple[EvalResult | None, int],
              totals: dict, step: int, stopped: str | None, t_start: float, info: DistInfo) -> dict[str, Any]:
    """The run's final summary: accuracy before/after with SEs, collapse rate, compute used, paths."""
    after, after_step = after_at
    metrics_path = out / "metrics.jsonl"
    acr = []
    if info.is_main and metrics_path.exists():
        for line in metrics_path.read_text().splitlines():
            v = json.loads(line).get("gate/acr")
            if v is not None:
                acr.append(v)
    ckpt = latest_checkpoint(out)
    ev: dict[str, Any] = {}
    for name, result in (("before", before), ("after", after)):
        m = result.metrics(cfg.group_size) if result else {}
        ev[f"accuracy_{name}"] = m.get("eval/pass@1")
        ev[f"accuracy_{name}_se"] = m.get("eval/pass@1_se")
        ev[f"pass@k_{name}"] = m.get("eval/pass@k")
        ev[f"unjudged_frac_{name}"] = m.get("eval/unjudged_frac")
        ev[f"greedy_{name}"] = m.get("eval/greedy")
        ev[f"greedy_{name}_se"] = m.get("eval/greedy_se")
    # The last evaluation is compared with the one before training only if it came after a
    # step (a run stopped before its first evaluation has nothing to compare).
    diff = compare(before, after) if before and after and after_step > 0 else {}
    summary = {
        "advantage": cfg.advantage, "loss": cfg.loss, "loss_settings": cfg.loss_settings().to_dict(),
        "placebo": cfg.placebo or None, "seed": cfg.seed, "steps": step, "stopped": stopped,
        "accuracy_before": ev["accuracy_before"], "accuracy_after": ev["accuracy_after"],
        "pass@k_before": ev["pass@k_before"], "pass@k_after": ev["pass@k_after"],
        "pass_k": min(cfg.group_size, before.samples) if before else None,
        # deprecated names of pass@k_* (they were always pass@min(G, eval_samples)), for one release
        "pass@G_before": ev["pass@k_before"], "pass@G_after": ev["pass@k_after"],
        "eval_unjudged_frac_before": ev["unjudged_frac_before"],
        "eval_unjudged_frac_after": ev["unjudged_frac_after"],
        "accuracy_after_step": after_step,
        "eval_prompts": before.prompts if before else 0,
        "eval_samples": before.samples if before else 0,
        "accuracy_before_se": ev["accuracy_before_se"], "accuracy_after_se": ev["accuracy_after_se"],
        "accuracy_diff": diff["pass@1"].mean if diff else None,
        "accuracy_diff_se": diff["pass@1"].se if diff else None,
        "greedy_before": ev["greedy_before"], "greedy_after": ev["greedy_after"],
        "greedy_before_se": ev["greedy_before_se"], "greedy_after_se": ev["greedy_after_se"],
        "greedy_diff": diff["greedy"].mean if diff and diff["greedy"] else None,
        "greedy_diff_se": diff["greedy"].se if diff and diff["greedy"] else None,
        "acr_mean": float(np.mean(acr)) if acr else None,
        "acr_first": acr[0] if acr else None, "acr_last": acr[-1] if acr else None,
        "rollouts": totals["rollouts"], "completion_tokens": totals["completion_tokens"],
        "prm_completions": totals["prm_completions"], "skipped_updates": totals["skipped_updates"],
        "mc_rollouts": totals["mc_rollouts"], "prm": cfg.prm if cfg.advantage in PRM_METHODS else None,
        "credit": cfg.credit if cfg.advantage == "verigate" else None,
        "wall_s": time.perf_counter() - t_start,
        "output_dir": str(out), "metrics_path": str(metrics_path),
        "final_model": str(ckpt / "model") if ckpt else None,
    }
    if info.is_main:
        (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def print_summary(summary: dict[str, Any]) -> None:
    """Print the end-of-run summary as a few lines: each accuracy with its SE, the paired differences."""
    def pct(v, se=None):
        if v is None:
            return "n/a"
        return f"{100 * v:.1f}%" + ("" if se is None else f" +- {100 * se:.1f}")

    def points(v, se):
        return "n/a" if v is None else f"{100 * v:+.1f} +- {100 * se:.1f} points"

    s = summary
    print("\n== veristep gated GRPO: summary ==")
    print(f"advantage {s['advantage']} | loss {s['loss']}" + (f" | placebo {s['placebo']}" if s.get("placebo") else "")
          + f" | {s['steps']} steps | {s['rollouts']} rollouts | {s['wall_s']:.0f} s"
          + (" | stopped by signal" if s["stopped"] else ""))
    if s["eval_prompts"]:
        print(f"held-out: {s['eval_prompts']} prompts x {s['eval_samples']} samples at T=1, plus greedy; "
              "the same seeds before and after; +- is one standard error")
        print(f"  pass@1 (T=1): {pct(s['accuracy_before'], s['accuracy_before_se'])} -> "
              f"{pct(s['accuracy_after'], s['accuracy_after_se'])} | paired difference "
              f"{points(s['accuracy_diff'], s['accuracy_diff_se'])}")
        if s["greedy_before"] is not None:
            print(f"  greedy:       {pct(s['greedy_before'], s['greedy_before_se'])} -> "
                  f"{pct(s['greedy_after'], s['greedy_after_se'])} | paired difference "
                  f"{points(s['greedy_diff'], s['greedy_diff_se'])}")
        print(f"  pass@{s.get('pass_k') or 'G'}: {pct(s['pass@k_before'])} -> {pct(s['pass@k_after'])}")
        if s.get("eval_unjudged_frac_before") or s.get("eval_unjudged_frac_after"):
            print(f"  unjudged (left out of the accuracies): {pct(s['eval_unjudged_frac_before'])} -> "
                  f"{pct(s['eval_unjudged_frac_after'])}")
    print(f"advantage collapse rate (ACR): mean {pct(s['acr_mean'])}, first step "
          f"{pct(s['acr_first'])}, last step {pct(s['acr_last'])}; PRM scored "
          f"{s['prm_completions']} completions")
    print(f"results: {s['output_dir']} (metrics.jsonl, summary.json); model: {s['final_model']}")



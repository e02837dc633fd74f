"""veristep's GRPO trainer against TRL's GRPOTrainer on CPU, same tiny model, data and settings.

Both run plain GRPO (group-normalised outcome advantage; veristep's loss preset dapo-clip-higher:
token-mean loss, clip 0.2/0.28, the same as TRL's loss_type="dapo" with epsilon_high; no KL,
one update per rollout batch, no gradient checkpointing) with HF `generate` rollouts on the same
random-init tiny Llama model (character tokenizer), the same prompts, G, lengths and steps, and
the same reward function, in this one process. The first step of each is a warm-up and is not
timed. Reported: completions/s and completion tokens/s over the timed steps, and the ratio.

    python benchmarks/trainer_cpu_bench.py                # defaults below
    python benchmarks/trainer_cpu_bench.py --steps 8 --group-size 8 --completion-len 64
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ALLOWED = "abcdefghijklmnopqrstuvwxyz0123456789 "


class FirstCharVerifier:
    """Reward 1 when a completion starts with an allowed character (the shared reward)."""

    kind = "first_char"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers

    def verify(self, completion, reference):
        """Judge one completion."""
        from veristep.verifiers.core.result import Status, VerifyResult

        ok = bool(completion) and completion[0] in str(reference)
        return VerifyResult(float(ok), ok, Status.CORRECT if ok else Status.WRONG)

    def verify_batch(self, completions, references):
        """Judge many completions."""
        return [self.verify(c, r) for c, r in zip(completions, references, strict=True)]

    def reference_from_record(self, record):
        """The allowed first characters."""
        return record["answer"]


def _prompts(n: int) -> list[dict]:
    return [{"prompt": f"Problem {i}: {i} + {2 * i} = ", "answer": ALLOWED} for i in range(n)]


def run_veristep(args, model_dir: Path, data_path: Path, out_dir: Path) -> dict:
    """Train with veristep and time the steps after the first."""
    from veristep.train.config import make_config
    from veristep.train.gated_grpo import train
    from veristep.train.tracking import read_metrics

    cfg = make_config(
        model=str(model_dir), dataset=str(data_path), verifier=f"{Path(__file__).resolve()}:FirstCharVerifier",
        advantage="grpo", prm="", steps=args.steps, group_size=args.group_size,
        prompts_per_step=args.prompts_per_step, max_completion_len=args.completion_len,
        max_prompt_len=64, lr=1e-5, loss="dapo-clip-higher", kl_coef=0.0,
        eval_size=0, eval_interval=0, checkpoint_interval=0, progress=False, seed=args.seed,
        output_dir=str(out_dir), adv_std="sample", adv_eps=1e-4,
    )
    summary = train(cfg)
    rows = read_metrics(summary["metrics_path"])[1:]
    seconds = sum(r["time/step_s"] for r in rows)
    tokens = sum(r["throughput/tokens_per_s"] * r["time/step_s"] for r in rows)
    samples = len(rows) * args.prompts_per_step * args.group_size
    return {"seconds": seconds, "samples": samples, "completion_tokens": tokens,
            "advantage": summary["advantage"], "loss": summary["loss_settings"],
            "breakdown_s": {k: sum(r[k] for r in rows) for k in ("time/rollout_s", "time/reward_s", "time/train_s")}}


def run_trl(args, model_dir: Path, out_dir: Path) -> dict:
    """Train with TRL's GRPOTrainer under the same settings and time the steps after the first."""
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    verifier = FirstCharVerifier()
    completion_tokens = []

    def reward(prompts, completions, **kwargs):
        completion_tokens.append(sum(len(tokenizer(c, add_special_tokens=False).input_ids) for c in completions))
        return [r.reward for r in verifier.verify_batch(completions, [ALLOWED] * len(completions))]

    stamps: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, *a, **k):
            stamps.append(time.perf_counter())

    n = args.prompts_per_step * args.group_size
    config = GRPOConfig(
        output_dir=str(out_dir), per_device_train_batch_size=n, num_generations=args.group_size,
        max_completion_length=args.completion_len, max_steps=args.steps, learning_rate=1e-5,
        beta=0.0, epsilon=0.2, epsilon_high=0.28, loss_type="dapo", num_iterations=1,
        temperature=1.0, top_p=1.0, top_k=0, gradient_checkpointing=False, use_cpu=True, bf16=False,
        report_to="none", save_strategy="no", logging_steps=1, seed=args.seed,
        lr_scheduler_type="constant", warmup_steps=0, disable_tqdm=True, shuffle_dataset=True,
    )
    ds = datasets.Dataset.from_list([{"prompt": p["prompt"]} for p in _prompts(256)])
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=ds,
                          processing_class=tokenizer, callbacks=[Clock()])
    start = time.perf_counter()
    trainer.train()
    timed = stamps[-1] - stamps[0] if len(stamps) > 1 else stamps[-1] - start
    steps_timed = len(stamps) - 1
    return {"seconds": timed, "samples": steps_timed * n,
            "completion_tokens": float(sum(completion_tokens[1:]))}


def main(argv: list[str] | None = None) -> int:
    """Run both trainers and print a table; write JSON to benchmarks/results/."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps (the first is warm-up)")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--prompts-per-step", type=int, default=4)
    parser.add_argument("--completion-len", type=int, default=48)
    parser.add_argument("--hidden-size", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads for both (1 avoids OpenMP contention on a shared CPU)")
    parser.add_argument("--repeats", type=int, default=2,
                        help="runs of each trainer, alternating which goes first; times are summed")
    parser.add_argument("--out", default=str(HERE / "results" / "trainer_cpu_bench.json"))
    args = parser.parse_args(argv)

    from veristep.train.demo.tiny import save_tiny_model

    torch.set_num_threads(args.threads)
    runs: dict[str, list[dict]] = {"veristep": [], "trl": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model_dir = save_tiny_model(tmp / "model", hidden_size=args.hidden_size, num_layers=args.layers)
        data = tmp / "prompts.jsonl"
        data.write_text("".join(json.dumps(p) + "\n" for p in _prompts(256)))
        for rep in range(args.repeats):
            # Alternate the order so neither trainer always runs on a warmer (or busier) machine.
            order = ("veristep", "trl") if rep % 2 == 0 else ("trl", "veristep")
            for name in order:
                torch.manual_seed(args.seed)
                if name == "veristep":
                    r = run_veristep(args, model_dir, data, tmp / f"veristep{rep}")
                else:
                    r = run_trl(args, model_dir, tmp / f"trl{rep}")
                r["threads"] = torch.get_num_threads()
                runs[name].append(r)
    results = {}
    for name, rs in runs.items():
        results[name] = {k: sum(r[k] for r in rs) for k in ("seconds", "samples", "completion_tokens")}
        results[name]["per_run_seconds"] = [r["seconds"] for r in rs]
        results[name]["threads"] = sorted({r["threads"] for r in rs})
        if "advantage" in rs[0]:  # the estimator and the objective, recorded apart
            results[name]["advantage"], results[name]["loss"] = rs[0]["advantage"], rs[0]["loss"]
        if "breakdown_s" in rs[0]:
            results[name]["breakdown_s"] = {k: sum(r["breakdown_s"][k] for r in rs) for k in rs[0]["breakdown_s"]}
    for r in results.values():
        r["samples_per_s"] = r["samples"] / r["seconds"]
        r["tokens_per_s"] = r["completion_tokens"] / r["seconds"]
    # On a shared machine the fastest run of each is the least disturbed: report that ratio too.
    best = {name: min(r["per_run_seconds"]) for name, r in results.items()}
    ratio_best = best["trl"] / best["veristep"]  # same work per run, so time ratio = speed ratio
    median = {name: statistics.median(r["per_run_seconds"]) for name, r in results.items()}
    ratio_median = median["trl"] / median["veristep"]
    ratio_samples = results["veristep"]["samples_per_s"] / results["trl"]["samples_per_s"]
    ratio_tokens = results["veristep"]["tokens_per_s"] / results["trl"]["tokens_per_s"]
    import transformers
    import trl

    report = {
        "benchmark": "trainer_cpu_bench", "settings": vars(args),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__,
                     "python": platform.python_version()},
        "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
        "results": results,
        "ratio_samples_per_s": ratio_samples, "ratio_tokens_per_s": ratio_tokens,
        "best_run_seconds": best, "ratio_best_run": ratio_best,
        "median_run_seconds": median, "ratio_median_run": ratio_median,
    }
    print(f"\n{'trainer':<10} {'timed steps':>11} {'seconds':>9} {'samples/s':>10} {'tokens/s':>10}")
    for name, r in results.items():
        print(f"{name:<10} {(args.steps - 1) * args.repeats:>11} {r['seconds']:>9.2f} {r['samples_per_s']:>10.2f} {r['tokens_per_s']:>10.1f}")
    print(f"ratio veristep/TRL: samples/s {ratio_samples:.2f}x, tokens/s {ratio_tokens:.2f}x "
          f"(fastest run of each: {ratio_best:.2f}x, median run: {ratio_median:.2f}x)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

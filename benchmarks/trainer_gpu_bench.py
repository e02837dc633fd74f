"""The trainer on one H100/H200 with nothing downloaded: a random-init model of Qwen2.5-1.5B shape
and a locally built tokenizer.

Measures, each phase in its own subprocess so GPU memory starts clean:
  raw       the rollout engine's own generation throughput (vLLM `LLM.generate`, or HF `generate`)
            against the same engine behind veristep's `RolloutEngine.generate` (tokens/s, ratio);
  train     `train()` for a few steps: rollout tokens/s, training tokens/s (prompt + completion
            tokens through forward + backward), model FLOPs utilisation (6 * params * tokens, plus
            attention, over the device's dense bf16 peak), and the step-time breakdown
            (rollout / reward / PRM / train) from metrics.jsonl;
  recipe    the main job's default recipe (`python train/gated_grpo.py`: built-in warm start and
            task, VeriGate, 500 held-out prompts x 4 samples + greedy) on the GPU with
            --device cuda, --dtype bfloat16 and the chosen rollout engine: held-out accuracy before
            and after with standard errors, and the run's wall time.

    python benchmarks/trainer_gpu_bench.py                       # vLLM rollouts, defaults below
    python benchmarks/trainer_gpu_bench.py --rollout hf --steps 4
    python benchmarks/trainer_gpu_bench.py --phase raw           # one phase only

Needs a CUDA GPU (and `vllm` for --rollout vllm). The random model emits EOS almost never, so
completions run to --completion-len: throughput is measured at full length. Writes
benchmarks/results/trainer_gpu_bench.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Dense bf16 tensor-core peak (no sparsity), FLOP/s, by device-name substring.
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "4090": 165e12}
QWEN25_15B = dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                  num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
                  rope_theta=1_000_000.0, tie_word_embeddings=True, rms_norm_eps=1e-6)


def build_assets(root: Path) -> tuple[Path, Path, Path]:
    """Write the random-init model, a word-level tokenizer covering its vocab, and prompts."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    model_dir, tok_dir, data = root / "model", root / "tokenizer", root / "prompts.jsonl"
    if not (model_dir / "config.json").exists():
        vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3}
        for ch in "abcdefghijklmnopqrstuvwxyz0123456789+-*/=.,:?":
            vocab.setdefault(ch, len(vocab))
        while len(vocab) < QWEN25_15B["vocab_size"]:
            vocab[f"<t{len(vocab)}>"] = len(vocab)
        core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
        core.pre_tokenizer = pre_tokenizers.Split(" ", behavior="removed")
        core.decoder = decoders.Fuse()
        tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>",
                                      bos_token="<bos>", unk_token="<unk>")
        tok.save_pretrained(tok_dir)
        config = Qwen2Config(**QWEN25_15B, pad_token_id=0, eos_token_id=1, bos_token_id=2)
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
        model.save_pretrained(model_dir)
    if not data.exists():
        # ~100-token prompts of space-separated symbols the tokenizer knows.
        rows = []
        for i in range(1024):
            body = " ".join(str((i * 7 + k) % 10) for k in range(96))
            rows.append({"prompt": f"{body} =", "answer": "abcdefghijklm"})
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return model_dir, tok_dir, data


def phase_raw(args, model_dir: Path, tok_dir: Path) -> dict:
    """Engine-native generation vs the same engine behind veristep's RolloutEngine."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from veristep.train.config import make_config
    from veristep.train.rollout import build_engine

    tok = AutoTokenizer.from_pretrained(tok_dir)
    cfg = make_config(model=str(model_dir), tokenizer=str(tok_dir), rollout=args.rollout,
                      max_completion_len=args.completion_len, group_size=args.group_size,
                      prompts_per_step=args.prompts, vllm_gpu_memory_utilization=args.vllm_mem)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).cuda()
    engine = build_engine(cfg, model, tok, str(model_dir), torch.device("cuda"), False)
    prompts = [[3 + (i + k) % 40 for k in range(100)] for i in range(args.prompts)]
    engine.generate(prompts[:2], 2)  # warm-up (CUDA graphs, allocator)
    n_tokens = args.prompts * args.group_size * args.completion_len
    if args.rollout == "vllm":
        from vllm import SamplingParams

        sp = SamplingParams(n=args.group_size, temperature=1.0, max_tokens=args.completion_len,
                            ignore_eos=True, seed=0)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        outs = engine.llm.generate([{"prompt_token_ids": p} for p in prompts], sp, use_tqdm=False)
        raw_s = time.perf_counter() - t0
        raw_tokens = sum(len(c.token_ids) for o in outs for c in o.outputs)
    else:
        ids = torch.tensor(prompts, device="cuda")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True, top_k=0,
                             max_new_tokens=args.completion_len, min_new_tokens=args.completion_len,
                             num_return_sequences=args.group_size, pad_token_id=0)
        torch.cuda.synchronize()
        raw_s = time.perf_counter() - t0
        raw_tokens = int((out.shape[1] - ids.shape[1]) * out.shape[0])
    t0 = time.perf_counter()
    ro = engine.generate(prompts, args.group_size)
    ours_s = time.perf_counter() - t0
    ours_tokens = ro.num_tokens()
    return {"raw_tokens_per_s": raw_tokens / raw_s, "veristep_tokens_per_s": ours_tokens / ours_s,
            "ratio": (ours_tokens / ours_s) / (raw_tokens / raw_s), "expected_tokens": n_tokens,
            "raw_tokens": raw_tokens, "veristep_tokens": ours_tokens}


def phase_train(args, model_dir: Path, tok_dir: Path, data: Path, out_dir: Path) -> dict:
    """A few trainer steps; throughput, MFU and the step-time breakdown from metrics.jsonl."""
    import torch
    from veristep.train.config import make_config
    from veristep.train.gated_grpo import train
    from veristep.train.tracking import read_metrics

    verifier = f"{HERE / 'trainer_cpu_bench.py'}:FirstCharVerifier"
    cfg = make_config(
        model=str(model_dir), tokenizer=str(tok_dir), dataset=str(data), verifier=verifier,
        advantage="grpo", loss="dapo-clip-higher", prm="", rollout=args.rollout, steps=args.steps, group_size=args.group_size,
        prompts_per_step=args.prompts, max_prompt_len=128, max_completion_len=args.completion_len,
        micro_batch_size=args.micro_batch, gradient_checkpointing=True, dtype="bfloat16", lr=1e-6,
        eval_size=0, eval_interval=0, checkpoint_interval=0, progress=False, output_dir=str(out_dir),
        vllm_gpu_memory_utilization=args.vllm_mem, vllm_sleep_mode=args.sleep_mode,
    )
    summary = train(cfg)
    rows = read_metrics(summary["metrics_path"])[1:]  # step 1 is warm-up
    n_params = sum(p.numel() for p in __import__("transformers").AutoModelForCausalLM
                   .from_pretrained(model_dir, dtype=torch.bfloat16).parameters())
    c = QWEN25_15B
    seq = 128 + args.completion_len
    tokens_per_step = args.prompts * args.group_size * seq
    # 6 N per token for forward + backward, plus causal attention 6 * layers * seq * hidden (halved).
    flops_per_token = 6 * n_params + 6 * c["num_hidden_layers"] * seq * c["hidden_size"]
    if cfg.gradient_checkpointing:
        flops_per_token += 2 * n_params  # one extra forward
    train_s = sum(r["time/train_s"] for r in rows) / len(rows)
    name = torch.cuda.get_device_name()
    peak = next((v for k, v in PEAK_BF16.items() if k in name), None)
    achieved = flops_per_token * tokens_per_step / train_s
    return {
        "device": name, "params": n_params, "steps_timed": len(rows),
        "advantage": summary["advantage"], "loss": summary["loss_settings"],
        "rollout_tokens_per_s": sum(r["throughput/tokens_per_s"] * r["time/step_s"] for r in rows)
        / sum(r["time/rollout_s"] for r in rows),
        "training_tokens_per_s": tokens_per_step / train_s,
        "achieved_tflops": achieved / 1e12, "mfu": achieved / peak if peak else None,
        "step_breakdown_s": {k: sum(r[k] for r in rows) / len(rows)
                             for k in ("time/rollout_s", "time/reward_s", "time/prm_s", "time/train_s", "time/step_s")},
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
    }


def phase_recipe(args, root: Path) -> dict:
    """The main job's default recipe on the GPU (bf16, the chosen rollout engine); its summary."""
    from veristep.train.config import make_config
    from veristep.train.gated_grpo import train

    cfg = make_config(device="cuda", dtype="bfloat16", rollout=args.rollout, output_dir=str(root / "recipe"),
                      warmstart_dir=str(root / "warmstart"), vllm_gpu_memory_utilization=args.vllm_mem,
                      progress=False, checkpoint_interval=0)
    t0 = time.perf_counter()
    summary = train(cfg)
    keys = ("advantage", "steps", "rollouts", "eval_prompts", "eval_samples", "accuracy_before",
            "accuracy_before_se", "accuracy_after", "accuracy_after_se", "accuracy_diff", "accuracy_diff_se",
            "greedy_before", "greedy_after", "greedy_diff", "greedy_diff_se", "wall_s")
    return {**{k: summary[k] for k in keys}, "wall_incl_warm_start_s": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    """Run the phases (each in a fresh subprocess) and print/write the results."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phase", choices=["all", "raw", "train", "recipe"], default="all")
    parser.add_argument("--rollout", choices=["vllm", "hf"], default="vllm")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--prompts", type=int, default=32, help="prompts per step")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--completion-len", type=int, default=512)
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--vllm-mem", type=float, default=0.35)
    parser.add_argument("--sleep-mode", action="store_true")
    parser.add_argument("--workdir", default="/tmp/veristep_gpu_bench")
    parser.add_argument("--out", default=str(HERE / "results" / "trainer_gpu_bench.json"))
    parser.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("trainer_gpu_bench: no CUDA device; run it on an H100/H200", file=sys.stderr)
        return 2
    root = Path(args.workdir)
    root.mkdir(parents=True, exist_ok=True)
    model_dir, tok_dir, data = build_assets(root)
    if args._child:  # inside a phase subprocess
        if args._child == "raw":
            result = phase_raw(args, model_dir, tok_dir)
        elif args._child == "train":
            result = phase_train(args, model_dir, tok_dir, data, root / "run")
        else:
            result = phase_recipe(args, root)
        (root / f"{args._child}.json").write_text(json.dumps(result))
        return 0
    results = {}
    for phase in (["raw", "train", "recipe"] if args.phase == "all" else [args.phase]):
        cmd = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:]), "--_child", phase]
        subprocess.run(cmd, check=True)
        results[phase] = json.loads((root / f"{phase}.json").read_text())
    report = {"benchmark": "trainer_gpu_bench", "settings": {k: v for k, v in vars(args).items() if k != "_child"},
              "results": results}
    for phase, r in results.items():
        print(f"\n[{phase}]")
        for k, v in r.items():
            print(f"  {k:<24} {v:.4g}" if isinstance(v, float) else f"  {k:<24} {v}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

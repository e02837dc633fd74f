"""Scorer throughput: batched `score_batch` vs one-by-one `score`, in the same process.

Scorers: the rule scorer and a tiny random model in each layout (Qwen PRM `hf`, TRL
`token-cls`, Math-Shepherd `shepherd`), built offline with veristep.train.demo.tiny's character
tokenizer. Traces come from ProcessBench (the shipped test sample by default). Each mode is
timed `--repeats` times and the best run is kept; the batched/one-by-one ratio is what carries
over to other machines, not the absolute numbers.

    python benchmarks/prm_bench.py -o benchmarks/results/prm_bench.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _tiny_scorers(batch_size: int, hidden: int, layers: int, max_length: int) -> dict:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaForTokenClassification
    from veristep.prm.hf import QwenPRMScorer, ShepherdScorer, TokenClassificationScorer
    from veristep.train.demo.tiny import build_char_tokenizer

    tok = build_char_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<extra_0>"]})
    tok.add_tokens(["ки"])
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
        num_hidden_layers=layers, num_attention_heads=max(hidden // 64, 1), num_key_value_heads=1,
        num_labels=2, pad_token_id=tok.pad_token_id, max_position_embeddings=max_length,
    )
    torch.manual_seed(0)
    cls_model = LlamaForTokenClassification(config).eval()
    lm_model = LlamaForCausalLM(config).eval()
    kw = {"batch_size": batch_size, "max_length": max_length}
    return {
        "hf (tiny)": QwenPRMScorer(cls_model, tok, **kw),
        "token-cls (tiny)": TokenClassificationScorer(cls_model, tok, **kw),
        "shepherd (tiny)": ShepherdScorer(lm_model, tok, **kw),
    }


def _time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    """Run the benchmark, print the table and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=f"processbench:{REPO / 'tests' / 'data' / 'processbench'}",
                        help="traces to score (processbench:DIR, prmbench:DIR or JSONL)")
    parser.add_argument("--traces", type=int, default=32, help="number of traces (default 32)")
    parser.add_argument("--batch-size", type=int, default=16, help="model batch size (default 16)")
    parser.add_argument("--hidden", type=int, default=128, help="tiny model hidden size")
    parser.add_argument("--layers", type=int, default=2, help="tiny model layers")
    parser.add_argument("--max-length", type=int, default=1024, help="model token limit")
    parser.add_argument("--repeats", type=int, default=1, help="timed runs per mode; best kept")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default torch's)")
    parser.add_argument("-o", "--output", "--out", dest="out", help="JSON output path (--out: the old name)")
    args = parser.parse_args()

    import torch
    from veristep.prm import RuleScorer
    from veristep.prm.calibrate import load_data

    if args.threads:
        torch.set_num_threads(args.threads)
    traces = load_data(args.data)[: args.traces]
    prompts = [t.prompt for t in traces]
    completions = [t.completion for t in traces]
    scorers = {"rule": RuleScorer(), **_tiny_scorers(args.batch_size, args.hidden, args.layers, args.max_length)}

    rows = []
    for name, scorer in scorers.items():
        batched_out = scorer.score_batch(prompts, completions)  # warm-up and equality check
        single_out = [scorer.score(p, c) for p, c in zip(prompts, completions, strict=True)]
        max_diff = max(
            (abs(a - b) for x, y in zip(batched_out, single_out, strict=True)
             for a, b in zip(x.scores, y.scores, strict=True)),
            default=0.0,
        )
        t_batch = _time(lambda s=scorer: s.score_batch(prompts, completions), args.repeats)
        t_single = _time(lambda s=scorer: [s.score(p, c) for p, c in zip(prompts, completions, strict=True)],
                         args.repeats)
        rows.append({
            "scorer": name,
            "traces": len(traces),
            "steps": sum(len(r.scores) for r in batched_out),
            "batched_traces_per_s": len(traces) / t_batch,
            "one_by_one_traces_per_s": len(traces) / t_single,
            "speedup": t_single / t_batch,
            "max_abs_diff_batched_vs_single": max_diff,
        })

    head = f"{'scorer':<18}{'traces':>7}{'steps':>7}{'batched/s':>11}{'single/s':>10}{'speedup':>9}{'max|diff|':>11}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['scorer']:<18}{r['traces']:>7}{r['steps']:>7}{r['batched_traces_per_s']:>11.1f}"
              f"{r['one_by_one_traces_per_s']:>10.1f}{r['speedup']:>8.2f}x{r['max_abs_diff_batched_vs_single']:>11.1e}")
    result = {
        "config": {k: v for k, v in vars(args).items() if k != "out"},
        "torch_threads": torch.get_num_threads(),
        "machine": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "rows": rows,
    }
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

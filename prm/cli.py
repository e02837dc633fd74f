"""`veristep prm score` and `veristep prm calibrate`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .loader import SCORER_KINDS, load_scorer
from .steps import DEFAULT_SEPARATOR

_SCORER_HELP = "rule | hf:PATH | token-cls:PATH | shepherd:PATH | scores:FILE"


def register(subparsers: Any) -> None:
    """Add the `prm` command with its `score` and `calibrate` sub-commands."""
    prm = subparsers.add_parser("prm", help="process reward models: score steps, calibrate")
    sub = prm.add_subparsers(dest="prm_command", metavar="SUBCOMMAND")
    prm.set_defaults(func=lambda args: (prm.print_help(), 2)[1])

    score = sub.add_parser("score", help="write step spans and scores of each JSONL line")
    score.add_argument("input", help="JSONL with a prompt and a completion per line ('-' = stdin)")
    score.add_argument("--out", "-o", default="-", help="output JSONL (default stdout)")
    score.add_argument("--prompt-key", default="prompt")
    score.add_argument("--completion-key", default="completion")
    _scorer_arguments(score)
    score.set_defaults(func=_score_command)

    cal = sub.add_parser("calibrate", help="AUROC / F1 / ECE of a scorer on labelled traces")
    cal.add_argument("--data", action="append", required=True,
                     help="processbench:DIR | prmbench:DIR | FILE.jsonl (repeatable)")
    cal.add_argument("--out", help="report JSON path")
    cal.add_argument("--plot", help="histogram PNG path")
    cal.add_argument("--plot-agg", default="min", help="aggregation shown in the plot (default min)")
    cal.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples (default 1000)")
    cal.add_argument("--dev-fraction", type=float, default=0.3,
                     help="share of each subset used to tune the F1 threshold (default 0.3)")
    cal.add_argument("--seed", type=int, default=0)
    cal.add_argument("--bins", type=int, default=10, help="ECE bins (default 10)")
    cal.add_argument("--limit", type=int, default=None,
                     help="use only the first N traces of each subset (quick runs)")
    cal.add_argument("--save-scores", help="also write every trace's step scores (reusable as scores:FILE)")
    _scorer_arguments(cal)
    cal.set_defaults(func=_calibrate_command)


def _scorer_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scorer", required=True, help=_SCORER_HELP)
    parser.add_argument("--separator", default=None,
                        help=f"step separator of completions (default {DEFAULT_SEPARATOR!r})")
    parser.add_argument("--regex", default=None, help="split steps on this regex instead")
    parser.add_argument("--neutral", type=float, default=None,
                        help="score of an uncheckable (rule) or truncated (model) step (default 0.5)")
    parser.add_argument("--batch-size", type=int, default=None, help="model scorers: traces per batch")
    parser.add_argument("--max-length", type=int, default=None, help="model scorers: token limit")
    parser.add_argument("--device", default=None, help="model scorers: cuda, cpu, ... (default auto)")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="allow a checkpoint's own model code (needed by Qwen2.5-Math-PRM)")


def _scorer_from_args(args: argparse.Namespace, for_benchmark: bool = False):
    kind = args.scorer.partition(":")[0].lower()
    if kind not in SCORER_KINDS:
        raise ValueError(f"unknown scorer {args.scorer!r}; use {_SCORER_HELP}")
    kw: dict[str, Any] = {}
    # Benchmark traces are stored as step lists joined with the default separator.
    if not for_benchmark:
        if args.separator is not None:
            kw["separator"] = args.separator
        if args.regex is not None:
            kw["regex"] = args.regex
    if args.neutral is not None and kind != "scores":
        kw["neutral"] = args.neutral
    if kind in ("hf", "token-cls", "shepherd"):
        if args.batch_size is not None:
            kw["batch_size"] = args.batch_size
        if args.max_length is not None:
            kw["max_length"] = args.max_length
        if args.trust_remote_code:
            kw["trust_remote_code"] = True
        return load_scorer(args.scorer, device=args.device, **kw)
    return load_scorer(args.scorer, **kw)


def _score_command(args: argparse.Namespace) -> int:
    try:
        scorer = _scorer_from_args(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    src = sys.stdin if args.input == "-" else open(args.input, encoding="utf-8")
    dst = sys.stdout if args.out == "-" else open(args.out, "w", encoding="utf-8")
    try:
        records = [json.loads(line) for line in src if line.strip()]
        batch = 64
        for b in range(0, len(records), batch):
            part = records[b : b + batch]
            prompts = [str(r.get(args.prompt_key, "")) for r in part]
            completions = [str(r.get(args.completion_key, "")) for r in part]
            for rec, res in zip(part, scorer.score_batch(prompts, completions), strict=True):
                rec.update({"steps": res.steps, "step_spans": [list(s) for s in res.spans],
                            "step_scores": res.scores})
                if res.truncated_steps:
                    rec["truncated_steps"] = res.truncated_steps
                dst.write(json.dumps(rec, ensure_ascii=False) + "\n")
    finally:
        if src is not sys.stdin:
            src.close()
        if dst is not sys.stdout:
            dst.close()
    return 0


def _calibrate_command(args: argparse.Namespace) -> int:
    from .calibrate import calibrate, format_table, load_data, plot_histograms
    from .metrics import AGGREGATIONS

    if args.plot_agg not in AGGREGATIONS:
        print(f"error: --plot-agg must be one of {AGGREGATIONS}", file=sys.stderr)
        return 2
    try:
        traces = []
        for spec in args.data:
            loaded = load_data(spec, args.separator or DEFAULT_SEPARATOR, args.regex)
            traces.extend(loaded if args.limit is None else _first_per_subset(loaded, args.limit))
        scorer = _scorer_from_args(args, for_benchmark=True)
        report, scored = calibrate(
            scorer, traces, scorer_name=args.scorer, data_names=args.data,
            n_bootstrap=args.bootstrap, dev_fraction=args.dev_fraction, seed=args.seed,
            n_bins=args.bins, progress=sys.stderr.isatty(),
        )
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(format_table(report))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(report.to_json() + "\n", encoding="utf-8")
        print(f"report: {args.out}")
    if args.plot:
        Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
        plot_histograms(report, scored, args.plot, args.plot_agg)
        print(f"plot: {args.plot}")
    if args.save_scores:
        with open(args.save_scores, "w", encoding="utf-8") as fh:
            for t, s in zip(scored.traces, scored.step_scores, strict=True):
                fh.write(json.dumps({"id": t.id, "step_scores": s}) + "\n")
        print(f"scores: {args.save_scores}")
    return 0


def _first_per_subset(traces: list, limit: int) -> list:
    """The first `limit` traces of each subset, in order."""
    counts: dict[str, int] = {}
    kept = []
    for t in traces:
        counts[t.subset] = counts.get(t.subset, 0) + 1
        if counts[t.subset] <= limit:
            kept.append(t)
    return kept

"""`veristep prm score` and `veristep prm calibrate`.

Both follow the command-line contract of `veristep` (docs/verifiers.md#command-line-conventions):
paths and optional extras are checked before any work, a bad input line is named on stderr
(`FILE:LINE: what`) and skipped while every other line is processed, and the exit code is 0,
1 (some lines skipped) or 2 (bad usage).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from veristep.common.jsonl_io import (
    EXIT_DATA,
    EXIT_OK,
    STDIO,
    JsonlWriter,
    LineMessages,
    OutputError,
    UsageError,
    check_input,
    check_output,
    is_terminal,
    iter_jsonl,
    missing_key,
    progress_bar,
    require_module,
)
from veristep.verifiers.cli.runner import count_lines

from veristep.cli import add_output_option, add_progress_option

from .base import StepScores
from .loader import SCORER_KINDS, load_scorer
from .shared_cli import (
    add_policy_options,
    add_step_model_options,
    check_model_folder,
    load_policy_for,
    looks_local,
)
from .steps import DEFAULT_SEPARATOR

_SCORER_HELP = ("rule | oracle | hf:PATH | token-cls:PATH | shepherd:PATH | scores:FILE | trained:DIR | "
                "implicit:DIR | mc:k=K (calibrate, with --policy)")
_MODEL_KINDS = ("hf", "token-cls", "shepherd")
#: The key a scored line adds to its input line (as `veristep verify` does).
RESULT_KEY = "veristep"


def register(subparsers: Any) -> None:
    """Add the `prm` command with its `score`, `calibrate`, `label`, `traces` and `train` sub-commands."""
    prm = subparsers.add_parser(
        "prm", help="process reward models: score steps, calibrate",
        description="Process reward models. Without a sub-command: this help (exit 0).",
    )
    sub = prm.add_subparsers(dest="prm_command", metavar="SUBCOMMAND")
    prm.set_defaults(func=lambda args: (prm.print_help(), EXIT_OK)[1])

    score = sub.add_parser(
        "score", help="write step spans and scores of each JSONL line",
        description="Score the steps of every line of INPUT ({prompt, completion}) and write the "
        "line unchanged plus a 'veristep' key holding scorer, steps, step_spans and "
        "step_scores (reusable as --scorer scores:FILE). A bad line is named on stderr and "
        "skipped. Exit codes: 0 done; 1 some lines skipped; 2 bad usage.",
    )
    score.add_argument("input", help="JSONL with a prompt and a completion per line ('-' = stdin)")
    add_output_option(score, "output JSONL ('-': stdout)", default=STDIO, aliases=("--out",))
    score.add_argument("--prompt-key", default="prompt", help="input key holding the prompt")
    score.add_argument("--completion-key", default="completion",
                       help="input key holding the completion")
    _scorer_arguments(score)
    add_progress_option(score)
    score.set_defaults(func=_score_command)

    cal = sub.add_parser(
        "calibrate", help="AUROC / F1 / ECE of a scorer on labelled traces",
        description="Score labelled traces (ProcessBench, PRMBench, or a JSONL of {prompt, "
        "steps|completion, correct, label?}) and report how far the scorer can be trusted: "
        "AUROC beside the length baseline, earliest-error F1, ECE/Brier, and a figure. "
        "Exit codes: 0 done; 1 some records skipped; 2 bad usage.",
    )
    cal.add_argument("--data", action="append", required=True,
                     help="processbench:DIR | prmbench:DIR | FILE.jsonl (repeatable)")
    add_output_option(cal, "report JSON (default: printed table only)", aliases=("--out",))
    cal.add_argument("--plot", help="calibration figure, PNG (needs pip install 'veristep[plot]')")
    cal.add_argument("--plot-agg", default="min", help="trace aggregation shown in the figure")
    cal.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the CIs")
    cal.add_argument("--dev-fraction", type=float, default=0.3,
                     help="share of each subset used to tune the F1 threshold")
    cal.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and the dev split")
    cal.add_argument("--bins", type=int, default=10, help="ECE and reliability-diagram bins")
    cal.add_argument("--limit", type=int, default=None,
                     help="use only the first N traces of each subset (quick runs)")
    cal.add_argument("--save-scores",
                     help="also write every trace's step scores (reusable as scores:FILE)")
    _scorer_arguments(cal)
    add_policy_options(cal, required=False, max_new_tokens=192,
                       policy_help="--scorer mc:k=K: the causal LM folder whose continuations value each step",
                       max_new_tokens_help="--scorer mc: length limit of a continuation")
    add_progress_option(cal)
    cal.set_defaults(func=_calibrate_command)

    from .train_cli import register_train_commands

    register_train_commands(sub)


def _scorer_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scorer", required=True, help=_SCORER_HELP)
    add_step_model_options(
        parser, separator=None, separator_help=f"step separator of completions (default {DEFAULT_SEPARATOR!r})",
        batch_size=None, batch_help="traces per scorer call (model scorers: their batch size; default 16, "
        "64 for the others)", max_length=None, max_length_help="model scorers: token limit",
        device_prefix="model scorers: ")
    parser.add_argument("--regex", default=None, help="split steps on this regex instead")
    parser.add_argument("--neutral", type=float, default=None,
                        help="score of an uncheckable (rule) or truncated (model) step (default 0.5)")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="allow a checkpoint's own model code (needed by Qwen2.5-Math-PRM)")


def _scorer_from_args(args: argparse.Namespace, for_benchmark: bool = False) -> Any:
    """Load the scorer; every way this can fail is a UsageError (nothing has run yet)."""
    kind, _, target = args.scorer.partition(":")
    kind = kind.lower()
    if kind not in SCORER_KINDS:
        raise UsageError(f"unknown scorer {args.scorer!r}; use {_SCORER_HELP}")
    if kind in _MODEL_KINDS and target and looks_local(target):
        if not Path(target).expanduser().is_dir():
            raise UsageError(f"--scorer {args.scorer}: no model folder {target}")
    kw: dict[str, Any] = {}
    # Benchmark traces are stored as step lists joined with the default separator.
    if not for_benchmark:
        if args.separator is not None:
            kw["separator"] = args.separator
        if args.regex is not None:
            kw["regex"] = args.regex
    if args.neutral is not None and kind != "scores":
        kw["neutral"] = args.neutral
    try:
        if kind in _MODEL_KINDS:
            if args.batch_size is not None:
                kw["batch_size"] = args.batch_size
            if args.max_length is not None:
                kw["max_length"] = args.max_length
            if args.trust_remote_code:
                kw["trust_remote_code"] = True
            return load_scorer(args.scorer, device=args.device, **kw)
        return load_scorer(args.scorer, **kw)
    except Exception as err:  # noqa: BLE001 - bad path, hub offline, bad config: one line
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UsageError(f"cannot load scorer {args.scorer!r}: {first}") from None


def scorer_name(spec: str) -> str:
    """The scorer spec as recorded in results: a local path is shortened to its last part."""
    kind, sep, target = spec.partition(":")
    if sep and target and looks_local(target):
        return f"{kind}:{Path(target).name}"
    return spec


# ---------------------------------------------------------------------------------------------
# prm score


def _safe_score(scorer: Any, prompts: list[str], completions: list[str]) -> list[StepScores | str]:
    """Scores per item, or the error message of an item the scorer raised on."""
    try:
        results = scorer.score_batch(prompts, completions)
        if len(results) == len(prompts):
            return list(results)
    except Exception:  # noqa: BLE001 - retried one by one to find the culprit
        pass
    out: list[StepScores | str] = []
    for prompt, completion in zip(prompts, completions, strict=True):
        try:
            out.append(scorer.score(prompt, completion))
        except Exception as err:  # noqa: BLE001 - reported for its line, the rest go on
            out.append(f"the scorer raised {type(err).__name__}: {err}"[:300])
    return out


def _scored_row(data: dict[str, Any], spec: str, res: StepScores) -> dict[str, Any]:
    row = {k: v for k, v in data.items() if k != RESULT_KEY}
    fields: dict[str, Any] = {
        "scorer": scorer_name(spec),
        "steps": res.steps,
        "step_spans": [list(s) for s in res.spans],
        "step_scores": res.scores,
    }
    if res.truncated_steps:
        fields["truncated_steps"] = res.truncated_steps
    row[RESULT_KEY] = fields
    return row


def _score_command(args: argparse.Namespace) -> int:
    check_input(args.input)
    check_output(args.output, inputs=[args.input])
    if args.batch_size is not None and args.batch_size < 1:
        raise UsageError("--batch-size must be >= 1")
    scorer = _scorer_from_args(args)
    messages = LineMessages("veristep prm score")
    writer = JsonlWriter(args.output)
    chunk = args.batch_size or 64
    show = not args.no_progress and is_terminal(sys.stderr)
    bar = progress_bar(count_lines(args.input) if show else None, enabled=show, unit="line",
                       desc="scoring")
    written = 0
    try:
        batch: list[tuple[int, dict[str, Any], str, str]] = []
        for record in iter_jsonl(args.input):
            problem = record.error
            if problem is None:
                for key in (args.prompt_key, args.completion_key):
                    if key not in record.data:
                        problem = missing_key(record, key)
                    elif not isinstance(record.data[key], str):
                        problem = f"key {key!r} must be a string, got {type(record.data[key]).__name__}"
                    if problem:
                        break
            if problem is not None:
                messages.add(args.input, record.line_no, problem)
                continue
            batch.append((record.line_no, record.data, record.data[args.prompt_key],
                          record.data[args.completion_key]))
            if len(batch) >= chunk:
                written += _score_and_write(scorer, batch, args, writer, messages, bar)
                batch = []
        if batch:
            written += _score_and_write(scorer, batch, args, writer, messages, bar)
    except OutputError as err:
        messages.say(f"error: {err}; the {written} lines before it are in the output")
        return EXIT_DATA
    finally:
        writer.close()
        if bar is not None:
            bar.close()
    messages.finish()
    print(f"veristep prm score: {written} lines scored with {scorer_name(args.scorer)}; "
          f"{messages.count} skipped", file=sys.stderr)
    return EXIT_DATA if messages.count else EXIT_OK


def _score_and_write(scorer: Any, batch: list, args: argparse.Namespace, writer: JsonlWriter,
                     messages: LineMessages, bar: Any) -> int:
    results = _safe_score(scorer, [b[2] for b in batch], [b[3] for b in batch])
    rows = []
    for (line_no, data, _, _), res in zip(batch, results, strict=True):
        if isinstance(res, str):
            messages.add(args.input, line_no, res)
        else:
            rows.append(_scored_row(data, args.scorer, res))
    writer.write_many(rows)
    if bar is not None:
        bar.update(len(batch))
    return len(rows)


# ---------------------------------------------------------------------------------------------
# prm calibrate


def _check_data_spec(spec: str) -> None:
    kind, sep, target = spec.partition(":")
    if kind in ("processbench", "prmbench") and sep:
        if not Path(target).is_dir():
            raise UsageError(f"--data {spec}: no folder {target}")
    elif not Path(spec).is_file():
        raise UsageError(
            f"--data {spec}: no such file; use processbench:DIR, prmbench:DIR or a JSONL file"
        )


def _calibrate_command(args: argparse.Namespace) -> int:
    from .calibrate import calibrate, format_table, load_data, source_name
    from .calibration_plot import plot_calibration
    from .metrics import AGGREGATIONS

    if args.plot_agg not in AGGREGATIONS:
        raise UsageError(f"--plot-agg must be one of {', '.join(AGGREGATIONS)}")
    if args.bootstrap < 0 or args.bins < 1 or not 0.0 < args.dev_fraction < 1.0:
        raise UsageError("--bootstrap must be >= 0, --bins >= 1, --dev-fraction in (0, 1)")
    if args.limit is not None and args.limit < 1:
        raise UsageError("--limit must be >= 1")
    if args.plot:
        require_module("matplotlib", "plot", "--plot")
    for spec in args.data:
        _check_data_spec(spec)
    inputs = [s.partition(":")[2] if ":" in s else s for s in args.data]
    check_output(args.output, inputs=inputs)
    check_output(args.plot, flag="--plot")
    check_output(args.save_scores, flag="--save-scores", inputs=inputs)
    mc = args.scorer.partition(":")[0].strip().lower() == "mc"
    if mc and not args.policy:
        raise UsageError(f"--scorer {args.scorer}: Monte-Carlo values need --policy MODEL_DIR")
    if args.policy and not mc:
        raise UsageError("--policy is only for --scorer mc:k=K")
    if mc:
        check_model_folder("--policy", args.policy)  # before the data is read
    scorer = None if mc else _scorer_from_args(args, for_benchmark=True)
    messages = LineMessages("veristep prm calibrate")
    traces = []
    for spec in args.data:
        loaded = load_data(spec, args.separator or DEFAULT_SEPARATOR, args.regex,
                           on_error=messages.add)
        traces.extend(loaded if args.limit is None else _first_per_subset(loaded, args.limit))
    messages.finish()
    if not traces:
        messages.say("error: no usable traces in the data")
        return EXIT_DATA
    if mc:
        scorer = _mc_scorer(args, traces)
    show = not args.no_progress and is_terminal(sys.stderr)
    print(f"scoring {len(traces)} traces with {scorer_name(args.scorer)}, then "
          f"{args.bootstrap} bootstrap resamples per metric", file=sys.stderr)
    try:
        report, scored = calibrate(
            scorer, traces, scorer_name=scorer_name(args.scorer),
            data_names=[source_name(s) for s in args.data],
            n_bootstrap=args.bootstrap, dev_fraction=args.dev_fraction, seed=args.seed,
            n_bins=args.bins, progress=show,
        )
    except ValueError as err:  # the scorer does not fit the data (step counts, missing ids)
        raise UsageError(str(err)) from None
    finally:
        if mc:
            scorer.policy.close()
    report.config["scorer_cost"] = scorer_cost(scorer)
    print(format_table(report, args.plot_agg))
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(report.to_json() + "\n", encoding="utf-8")
        print(f"report: {args.output}")
    if args.plot:
        Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
        plot_calibration(report, scored, args.plot, args.plot_agg)
        print(f"plot: {args.plot}")
    if args.save_scores:
        with JsonlWriter(args.save_scores) as writer:
            writer.write_many([{"id": t.id, "step_scores": s}
                               for t, s in zip(scored.traces, scored.step_scores, strict=True)])
        print(f"scores: {args.save_scores}")
    if messages.count:
        messages.say(f"error: {messages.count} record(s) skipped (named above); the report "
                     "covers the rest")
        return EXIT_DATA
    return EXIT_OK


def _mc_scorer(args: argparse.Namespace, traces: Sequence) -> Any:
    """`mc:k=K` on the traces' prompts: every trace needs a reference answer (or a built-in prompt)."""
    from .mc_labels import PolicyMCScorer
    from .mc_values import parse_mc_spec

    try:
        opts = parse_mc_spec(args.scorer)
    except ValueError as err:
        raise UsageError(str(err)) from None
    answers: dict[str, str] = {}
    for t in traces:
        answer = t.answer if t.answer is not None else _builtin_answer(t.prompt)
        if answer is None:
            raise UsageError(f"--scorer mc: trace {t.id} has no 'answer' to judge continuations by")
        answers[t.prompt] = answer
    policy = load_policy_for(args)
    scorer = PolicyMCScorer(policy, opts["k"], answers, seed=opts["seed"])
    scorer.policy = policy
    return scorer


def _builtin_answer(prompt: str) -> str | None:
    from .oracle import _reference_steps

    try:
        return str(_reference_steps(prompt)[1])
    except ValueError:
        return None


def scorer_cost(scorer: Any) -> dict[str, Any]:
    """What a scorer cost to make and to run, as far as it records it (rollouts, training)."""
    cost: dict[str, Any] = {"kind": getattr(scorer, "kind", type(scorer).__name__)}
    if hasattr(scorer, "rollouts"):
        cost["scoring_rollouts"] = int(scorer.rollouts)
    meta = getattr(scorer, "veristep_meta", None)
    if isinstance(meta, dict):
        for key in ("label_rollouts", "train_steps", "train_seconds", "examples", "label_budget"):
            if key in meta:
                cost[key] = meta[key]
    stats = getattr(scorer, "stats", None)
    if isinstance(stats, dict):
        cost["implicit"] = {k: round(v, 4) if isinstance(v, float) else v for k, v in stats.items()}
    return cost


def _first_per_subset(traces: Sequence, limit: int) -> list:
    """The first `limit` traces of each subset, in order."""
    counts: dict[str, int] = {}
    kept = []
    for t in traces:
        counts[t.subset] = counts.get(t.subset, 0) + 1
        if counts[t.subset] <= limit:
            kept.append(t)
    return kept

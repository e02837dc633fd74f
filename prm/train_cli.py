"""`veristep prm label`, `prm traces` and `prm train`: make PRM data and train PRMs from it.

They follow the command-line contract of `veristep` (docs/verifiers.md#command-line-conventions):
paths and models are checked before any work (exit 2, one line), a bad input line is named on
stderr (`FILE:LINE: what`) and skipped (exit 1 at the end), and a training run that stops early
leaves a checkpoint that the same command resumes, never a model folder that loads.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from veristep.common.jsonl_io import (
    EXIT_DATA,
    EXIT_OK,
    JsonlWriter,
    LineMessages,
    UsageError,
    check_input,
    check_output,
    is_terminal,
    iter_jsonl,
)

from veristep.cli import add_output_option, add_progress_option

from .shared_cli import (
    add_device_option,
    add_policy_options,
    add_step_model_options,
    check_model_folder,
    load_policy_for,
)

LABEL_KEYS = {"soft": "soft_labels", "hard": "hard_labels", "given": "step_labels"}


def register_train_commands(sub: Any) -> None:
    """Add `label`, `traces` and `train` to the `prm` sub-commands."""
    label = sub.add_parser(
        "label", help="Monte-Carlo step labels: sample traces, continue each step prefix k times",
        description="Sample SAMPLES completions of each problem with the policy (the trainer's "
        "rollout engine), continue every step prefix K times, and label each step by the share "
        "of its continuations the verifier accepts (soft_labels) and by whether any is accepted "
        "(hard_labels). Writes one JSONL line per trace, with the continuations it cost "
        "(mc_rollouts), and prints the label budget. Exit codes: 0 done; 1 some problems skipped; "
        "2 bad usage.",
    )
    _policy_arguments(label)
    label.add_argument("--k", type=int, default=4, help="continuations per step prefix")
    add_output_option(label, "labels JSONL")
    add_progress_option(label)
    label.set_defaults(func=_label_command)

    traces = sub.add_parser(
        "traces", help="held-out traces of the built-in task with exact step labels",
        description="Sample completions of built-in arithmetic problems with the policy and label "
        "every step exactly against the reference solution (steps before the first error 1, the "
        "first error 0, later steps unlabelled; local_step_labels: each claim checked alone). "
        "The output is a --data file of `veristep prm calibrate`. Exit codes: 0 done; 2 bad usage.",
    )
    _policy_arguments(traces, default_seed=1_000_003)
    add_output_option(traces, "labelled traces JSONL")
    add_progress_option(traces)
    traces.set_defaults(func=_traces_command)

    train = sub.add_parser(
        "train", help="train a PRM on step labels (token classification) or outcomes (implicit)",
        description="--kind token-cls (default): train a 2-class token-classification head, "
        "initialised from --base, at the last token of every step of LABELS (from `veristep prm "
        "label`, or any JSONL of prompt, steps|completion and a list of per-step labels in "
        "[0, 1]). --kind implicit: PRIME's implicit PRM, updated from each line's `correct` "
        "outcome only. A checkpoint is kept in .NAME.partial beside OUTPUT and the same command "
        "resumes from it; OUTPUT appears only when training finished, and loads as "
        "trained:OUTPUT (token-cls:OUTPUT reads it too) or implicit:OUTPUT. Exit codes: 0 done; "
        "1 some lines skipped or training interrupted; 2 bad usage.",
    )
    train.add_argument("labels", help="labels JSONL")
    train.add_argument("--base", required=True, help="causal LM folder (or hub name) to start from")
    add_output_option(train, "folder of the trained PRM")
    train.add_argument("--kind", choices=("token-cls", "implicit"), default="token-cls",
                       help="what to train (default token-cls)")
    train.add_argument("--labels-from", choices=tuple(LABEL_KEYS), default="soft",
                       help="token-cls targets: soft_labels, hard_labels, or step_labels (given)")
    train.add_argument("--steps", type=int, default=200, help="optimizer steps (implicit: passes "
                       "are steps / (lines / batch size))")
    train.add_argument("--lr", type=float, default=None,
                       help="learning rate (default 3e-4 token-cls, 1e-6 implicit as in PRIME)")
    train.add_argument("--beta", type=float, default=0.05, help="implicit: reward scale beta")
    add_step_model_options(train, separator="\n", separator_help="step separator (default newline)",
                           batch_size=16, batch_help="traces per optimizer step",
                           max_length=512, max_length_help="token limit of one trace")
    train.add_argument("--seed", type=int, default=0, help="seed of the head and the batch order")
    train.add_argument("--checkpoint-every", type=int, default=50, help="steps between checkpoints")
    train.add_argument("--restart", action="store_true",
                       help="discard a checkpoint of another run instead of refusing")
    add_progress_option(train)
    train.set_defaults(func=_train_command)


def _policy_arguments(parser: argparse.ArgumentParser, default_seed: int = 0) -> None:
    add_policy_options(parser, required=True, policy_help="causal LM folder that samples the traces",
                       max_new_tokens=128, max_new_tokens_help="length limit of a completion")
    parser.add_argument("--data", default="builtin:arith",
                        help="problems: builtin:arith[:level=...] or a JSONL with prompt and answer")
    parser.add_argument("--n", type=int, default=64, help="problems to use")
    parser.add_argument("--samples", type=int, default=4, help="completions per problem")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    parser.add_argument("--seed", type=int, default=default_seed,
                        help=f"seed of the problems and the samples (default {default_seed})")
    parser.add_argument("--rollout", choices=("hf", "vllm"), default="hf", help="rollout engine")
    parser.add_argument("--verifier", default="math",
                        help="outcome verifier judging completions (a trainer verifier kind)")
    add_device_option(parser)


def _check_policy_args(args: argparse.Namespace) -> None:
    for name in ("n", "samples", "max_new_tokens"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1")
    if getattr(args, "k", 1) < 1:
        raise UsageError("--k must be >= 1")
    if not args.temperature > 0:
        raise UsageError("--temperature must be > 0 (labels need samples)")
    if not args.data.startswith("builtin:") and not Path(args.data).is_file():
        raise UsageError(f"--data {args.data}: no such file; use builtin:arith or a JSONL file")
    check_model_folder("--policy", args.policy)


def _problems(args: argparse.Namespace, messages: LineMessages) -> list[dict[str, Any]]:
    """The problems of --data: each needs a string prompt and an answer."""
    if args.data.startswith("builtin:"):
        from veristep.train.data import load_records

        try:
            return load_records(args.data, limit=args.n, seed=args.seed)
        except ValueError as err:
            raise UsageError(str(err)) from None
    out = []
    for record in iter_jsonl(args.data):
        if record.error is None and not isinstance(record.data.get("prompt"), str):
            record.error = "missing key 'prompt'" if "prompt" not in record.data else "'prompt' must be a string"
        if record.error is None and "answer" not in record.data:
            record.error = "missing key 'answer'"
        if record.error is not None:
            messages.add(args.data, record.line_no, record.error)
            continue
        out.append(record.data)
        if len(out) == args.n:
            break
    return out


def _load_policy(args: argparse.Namespace) -> Any:
    return load_policy_for(args, temperature=args.temperature, rollout=args.rollout, verifier=args.verifier)


def _label_command(args: argparse.Namespace) -> int:
    from .mc_labels import mc_label, sample_traces

    _check_policy_args(args)
    check_output(args.output, flag="-o")
    if not args.output:
        raise UsageError("-o/--output is required")
    messages = LineMessages("veristep prm label")
    problems = _problems(args, messages)
    if not problems:
        messages.say("error: no usable problems")
        return EXIT_DATA
    policy = _load_policy(args)
    show = not args.no_progress and is_terminal(sys.stderr)
    try:
        pairs = sample_traces(policy, problems, args.samples, args.seed)
        bar = None
        if show:
            from tqdm import tqdm

            bar = tqdm(total=len(pairs), desc="mc labels", unit="trace", file=sys.stderr)
        rows, budget = mc_label(policy, pairs, args.k, seed=args.seed,
                                on_chunk=bar.update if bar is not None else None)
        if bar is not None:
            bar.close()
    finally:
        policy.close()
    with JsonlWriter(args.output) as writer:
        writer.write_many(rows)
    steps = sum(len(r["steps"]) for r in rows)
    print(f"veristep prm label: {len(rows)} traces, {steps} steps labelled; label budget "
          f"{json.dumps(budget.as_dict())}", file=sys.stderr)
    messages.finish()
    return EXIT_DATA if messages.count else EXIT_OK


def _traces_command(args: argparse.Namespace) -> int:
    from .builtin_traces import sample_exact_traces

    _check_policy_args(args)
    if not args.data.startswith("builtin:arith"):
        raise UsageError("exact step labels exist only for the built-in task: --data builtin:arith[...]")
    if not args.output:
        raise UsageError("-o/--output is required")
    check_output(args.output, flag="-o")
    problems = _problems(args, LineMessages("veristep prm traces"))
    policy = _load_policy(args)
    try:
        rows = sample_exact_traces(policy, problems, args.samples, args.seed)
    finally:
        policy.close()
    with JsonlWriter(args.output) as writer:
        writer.write_many(rows)
    print(f"veristep prm traces: {len(rows)} traces ({sum(r['correct'] for r in rows)} correct), "
          f"{sum(r['label'] >= 0 for r in rows)} with a wrong step", file=sys.stderr)
    return EXIT_OK


def _train_command(args: argparse.Namespace) -> int:
    from .mc_labels import iter_label_file
    from .train import PRMTrainConfig, TrainingInterrupted, check_output_folder, partial_dir

    check_input(args.labels)
    if not args.output:
        raise UsageError("-o/--output (the PRM folder) is required")
    try:
        check_output_folder(args.output)
    except ValueError as err:
        raise UsageError(str(err)) from None
    check_model_folder("--base", args.base)
    for name in ("steps", "batch_size", "max_length", "checkpoint_every"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1")
    messages = LineMessages("veristep prm train")
    show = not args.no_progress and is_terminal(sys.stderr)
    if args.kind == "implicit":
        return _train_implicit(args, messages, show)
    examples = list(iter_label_file(args.labels, LABEL_KEYS[args.labels_from], args.separator,
                                    messages.add))
    messages.finish()
    if not examples:
        messages.say("error: no usable labelled line; nothing trained")
        return EXIT_DATA
    from .train import train_prm

    try:
        cfg = PRMTrainConfig(base=args.base, labels=args.labels_from, steps=args.steps,
                             batch_size=args.batch_size, lr=args.lr or 3e-4,
                             max_length=args.max_length, separator=args.separator,
                             step_separator=args.separator, seed=args.seed,
                             checkpoint_every=args.checkpoint_every)
    except ValueError as err:
        raise UsageError(str(err)) from None
    try:
        meta = train_prm(examples, cfg, args.output, device=args.device, progress=show,
                         restart=args.restart)
    except TrainingInterrupted as err:
        messages.say(f"error: {err}")
        return EXIT_DATA
    except ValueError as err:  # base model does not load, checkpoint of another run
        raise UsageError(str(err)) from None
    print(f"veristep prm train: {meta['examples']} traces, {meta['labelled_steps']} labelled steps, "
          f"{meta['train_steps']} steps in {meta['train_seconds']:.1f} s, loss {meta['loss_first']:.4f} "
          f"-> {meta['loss_last']:.4f}; label rollouts {meta['label_rollouts']}; load it as "
          f"trained:{args.output}", file=sys.stderr)
    if partial_dir(args.output).exists():
        messages.say(f"warning: {partial_dir(args.output)} is left over")
    return EXIT_DATA if messages.count else EXIT_OK


def _train_implicit(args: argparse.Namespace, messages: LineMessages, show: bool) -> int:
    """Update an implicit PRM from each line's outcome (`correct`), in passes over the file."""
    from .implicit import load_implicit

    rows = []
    for record in iter_jsonl(args.labels):
        data, why = record.data, record.error
        if why is None:
            if not isinstance(data.get("prompt"), str) or not isinstance(data.get("completion"), str):
                why = "needs string 'prompt' and 'completion'"
            elif not isinstance(data.get("correct"), bool):
                why = "missing key 'correct'" if "correct" not in data else "'correct' must be true/false"
        if why is not None:
            messages.add(args.labels, record.line_no, why)
            continue
        rows.append(data)
    messages.finish()
    if not rows:
        messages.say("error: no usable line; nothing trained")
        return EXIT_DATA
    try:
        prm = load_implicit(args.base, device=args.device, beta=args.beta, lr=args.lr or 1e-6,
                            separator=args.separator, batch_size=args.batch_size,
                            max_length=args.max_length)
    except ValueError as err:
        raise UsageError(str(err)) from None
    from .implicit import train_implicit

    try:
        summary = train_implicit(prm, rows, args.steps, args.batch_size, args.seed, args.output,
                                 progress=show)
    except KeyboardInterrupt:
        messages.say("error: interrupted; nothing written (implicit updates are cheap: rerun)")
        return EXIT_DATA
    print(f"veristep prm train: implicit PRM, {summary['updates']} updates on {len(rows)} traces "
          f"in {summary['seconds']:.1f} s (forward {summary['forward_s']:.1f} s, backward "
          f"{summary['backward_s']:.1f} s); load it as implicit:{args.output}", file=sys.stderr)
    return EXIT_DATA if messages.count else EXIT_OK

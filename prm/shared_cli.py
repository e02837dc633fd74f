"""The options and checks the PRM commands share (`prm/cli.py`: score, calibrate;
`prm/train_cli.py`: label, traces, train), defined once so their flags, help and errors agree."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from veristep.common.jsonl_io import UsageError

DEVICE_HELP = "cuda, cpu, ... (default auto)"


def looks_local(target: str) -> bool:
    """Whether a model argument names a local path (else it may be a hub name)."""
    return os.path.isabs(target) or target.startswith((".", "~")) or os.path.exists(target)


def check_model_folder(flag: str, target: str) -> None:
    """A local model argument must be a folder: one usage line before any work."""
    if looks_local(target) and not Path(target).expanduser().is_dir():
        raise UsageError(f"{flag} {target}: no model folder")


def add_device_option(parser: argparse.ArgumentParser, help_prefix: str = "") -> None:
    """`--device`: where a model runs."""
    parser.add_argument("--device", default=None, help=help_prefix + DEVICE_HELP)


def add_step_model_options(parser: argparse.ArgumentParser, *, separator: str | None,
                           separator_help: str, batch_size: int | None, batch_help: str,
                           max_length: int | None, max_length_help: str, device_prefix: str = "") -> None:
    """`--separator`, `--batch-size`, `--max-length` and `--device` of a command that runs a step model."""
    parser.add_argument("--separator", default=separator, help=separator_help)
    parser.add_argument("--batch-size", type=int, default=batch_size, help=batch_help)
    parser.add_argument("--max-length", type=int, default=max_length, help=max_length_help)
    add_device_option(parser, device_prefix)


def add_policy_options(parser: argparse.ArgumentParser, *, required: bool, policy_help: str,
                       max_new_tokens: int, max_new_tokens_help: str) -> None:
    """`--policy` (the causal LM that samples) and `--max-new-tokens` (its length limit)."""
    parser.add_argument("--policy", required=required, default=None, help=policy_help)
    parser.add_argument("--max-new-tokens", type=int, default=max_new_tokens, help=max_new_tokens_help)


def load_policy_for(args: argparse.Namespace, **kw: Any) -> Any:
    """`args.policy` behind the trainer's rollout engine and verifiers; a load failure is a usage error."""
    from veristep.train.mc_values import load_policy  # the trainer's engine and verifiers

    check_model_folder("--policy", args.policy)
    try:
        return load_policy(args.policy, max_new_tokens=args.max_new_tokens, device=args.device, **kw)
    except (ValueError, ImportError, KeyError) as err:
        raise UsageError(str(err)) from None

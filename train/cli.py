"""`veristep train`: the gated GRPO trainer as a sub-command, with the same flags as the script."""

from __future__ import annotations

import argparse

from veristep.train.config import ConfigError, add_config_arguments, config_from_namespace


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `train` sub-command (flags = fields of veristep.train.config.Config)."""
    parser = subparsers.add_parser(
        "train",
        help="GRPO with VeriGate advantage gating (same flags as train/gated_grpo.py)",
        description="Train with GRPO and VeriGate gating. With no flags: the tiny built-in task on CPU.",
    )
    add_config_arguments(parser)
    parser.set_defaults(func=_run, _parser=parser)


def _run(args: argparse.Namespace) -> int:
    from veristep.train.gated_grpo import train
    from veristep.train.summary import print_summary

    try:
        cfg = config_from_namespace(args)
    except ConfigError as err:
        args._parser.error(str(err))
    summary = train(cfg)
    print_summary(summary)
    return 0

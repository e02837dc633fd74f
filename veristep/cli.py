"""The `veristep` console command: one entry point, one sub-command per part of the toolkit."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Each module exposes `register(subparsers)`, adding its sub-command and setting `func` on it.
# Listed lazily so `veristep --help` stays fast and a part's heavy imports load only when used.
_COMMAND_MODULES: tuple[str, ...] = (
    "veristep.verifiers.cli.verify",
    "veristep.verifiers.cli.audit",
    "veristep.prm.cli",
    "veristep.train.cli",
    "veristep.bench",
)


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser with every available sub-command."""
    parser = argparse.ArgumentParser(
        prog="veristep",
        description="Verifiers, process rewards and gated GRPO for RL on verifiable tasks.",
    )
    parser.add_argument("--version", action="version", version=_version())
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name == name:  # the part is not built into this install
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `veristep` command line; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


def _version() -> str:
    from veristep import __version__

    return f"veristep {__version__}"


if __name__ == "__main__":
    sys.exit(main())

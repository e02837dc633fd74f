"""The `veristep` console command: one entry point, one sub-command per part of the toolkit.

Conventions every sub-command follows (docs/verifiers.md#command-line-conventions):
`-o/--output` names the output, `--help` shows each option's default, progress bars appear on
a terminal (`--no-progress` turns them off), and the exit code is 0 (done), 1 (some data could
not be processed; everything else was) or 2 (bad usage, found before any work starts).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from veristep.common.jsonl_io import EXIT_OK, run_command

# Sub-command -> the module that registers it (`register(subparsers)`, setting `func`), in the
# order of `veristep --help`. Imported lazily so `veristep --help` stays fast, and `veristep
# verify ...` imports only its own module (the trainer's imports torch, several seconds of a
# short verify run's start-up).
_COMMAND_MODULES: dict[str, str] = {
    "verify": "veristep.verifiers.cli.verify",
    "audit": "veristep.verifiers.cli.audit",
    "prm": "veristep.prm.cli",
    "train": "veristep.train.cli",
    "bench": "veristep.bench",
    "serve": "veristep.serve.cli",
}


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends "(default: X)" to an option's help unless there is no default or it is said."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (
            action.help == argparse.SUPPRESS
            or "default" in text.lower()
            or action.default is None
            or action.default is False  # a flag: off unless given (0 still shows)
            or action.default == argparse.SUPPRESS
            or (not action.option_strings and action.nargs not in ("?", "*"))
        ):
            return action.help
        return f"{text} (default: %(default)s)" if text else "default: %(default)s"


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose help shows defaults; sub-command parsers inherit it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


class DeprecatedAlias(argparse.Action):
    """An old spelling of an option: still works, says once which spelling replaces it."""

    def __init__(self, option_strings: list[str], dest: str, replacement: str = "", **kw: Any):
        kw.setdefault("default", argparse.SUPPRESS)
        kw.setdefault("help", argparse.SUPPRESS)
        super().__init__(option_strings, dest, **kw)
        self.replacement = replacement

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(f"{parser.prog}: warning: {option_string} is deprecated; use {self.replacement}",
              file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_output_option(
    parser: argparse.ArgumentParser, help: str, *, default: str | None = None,
    aliases: Sequence[str] = (),
) -> None:
    """Add `-o/--output` (the one name of every command's output) and deprecated aliases."""
    parser.add_argument("-o", "--output", default=default, metavar="PATH", help=help)
    for alias in aliases:
        parser.add_argument(alias, dest="output", action=DeprecatedAlias, replacement="-o/--output")


def add_progress_option(parser: argparse.ArgumentParser) -> None:
    """Add `--no-progress` (progress bars are drawn only on a terminal anyway)."""
    parser.add_argument("--no-progress", action="store_true",
                        help="never draw a progress bar (drawn on a terminal only)")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Build the argument parser with every available sub-command, or with `command`'s alone
    when it names one (any other word still gets the full parser and its error message)."""
    parser = Parser(
        prog="veristep",
        description="Verifiers, process rewards and gated GRPO for RL on verifiable tasks. "
        "Exit codes of every command: 0 done, 1 some data could not be processed (every other "
        "line was), 2 bad usage.",
    )
    parser.add_argument("--version", action="version", version=_version())
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    names = [_COMMAND_MODULES[command]] if command in _COMMAND_MODULES else list(_COMMAND_MODULES.values())
    for name in names:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name == name:  # the part is not built into this install
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `veristep` command line; returns the process exit code.

    Bare `veristep` (no command) prints the help and exits 0, as asking what a tool does is
    not a mistake. Commands raise `UsageError` for mistakes found before any work (exit 2) and
    `InputError` / `OutputError` for input or output that fails as a whole (exit 1); each
    becomes one line on stderr.
    """
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(words[0] if words else None)
    args = parser.parse_args(words)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_OK
    prog = f"veristep {args.command}"
    try:
        return run_command(prog, lambda: args.func(args))
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


def _version() -> str:
    from veristep import __version__

    return f"veristep {__version__}"


if __name__ == "__main__":
    sys.exit(main())

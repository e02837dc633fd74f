"""`veristep verify <kind> INPUT.jsonl`: the one runner for every registered verifier kind."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..core.registry import available_kinds, verifier_class
from .jsonl_io import STDIO, InputError, JsonlWriter
from .runner import Backend, LocalBackend, count_lines, read_items, run_verify

#: Exit codes: 0 every line verified, 1 input or verifier failure (results so far kept), 2 usage.
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def parse_config(pairs: list[str] | None) -> dict[str, Any]:
    """Turn `key=value` strings into verifier config; values are JSON when they parse as JSON."""
    config: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise ValueError(f"--set expects key=value with a Python name as key, got {pair!r}")
        try:
            config[key] = json.loads(raw)
        except ValueError:
            config[key] = raw  # a bare word such as python or hermes
    return config


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `verify` sub-command."""
    parser = subparsers.add_parser(
        "verify",
        help="verify a JSONL file of completions with one verifier kind",
        description=(
            "Verify every line of INPUT (a JSONL file, '-' for stdin) and write each input line "
            "with the verifier's fields added (reward, correct, status, extracted, ...). "
            f"KIND is one of: {', '.join(available_kinds())}, or package.module:ClassName."
        ),
    )
    parser.add_argument("kind", metavar="KIND")
    parser.add_argument("input", metavar="INPUT.jsonl")
    parser.add_argument("-o", "--output", default=STDIO, help="output JSONL (default: stdout)")
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="parallel workers (local) or Ray actors (--backend ray)",
    )
    parser.add_argument("--limit", type=int, default=None, help="verify only the first N lines")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=256,
        help="lines per verify_batch call and per output flush (default 256)",
    )
    parser.add_argument(
        "--completion-key",
        default="completion",
        help="input key holding the completion (default: completion)",
    )
    parser.add_argument("--backend", choices=("local", "ray"), default="local")
    parser.add_argument(
        "--ray-address",
        default=None,
        help="Ray cluster address (default: RAY_ADDRESS or a new local instance)",
    )
    parser.add_argument(
        "--set",
        dest="config",
        action="append",
        metavar="KEY=VALUE",
        help="verifier config, repeatable; VALUE is parsed as JSON if it can be "
        "(--set timeout=2.5 --set all_or_nothing=true)",
    )
    parser.add_argument("--no-progress", action="store_true", help="never show a progress bar")
    parser.set_defaults(func=run_command)


def _error(message: str) -> None:
    print(f"veristep verify: error: {message}", file=sys.stderr)


def _build_backend(
    args: argparse.Namespace, cls: type, config: dict[str, Any]
) -> tuple[Backend, Any]:
    """The backend plus a local verifier instance used to read references from records."""
    if args.backend == "ray":
        from .ray_backend import RayBackend

        # One actor per CPU, each verifying on one core unless --set workers=K says otherwise;
        # the driver's own instance only reads references.
        actor_config = {"workers": 1, **config}
        local = cls(**actor_config)  # first, so a bad config fails before Ray starts
        return RayBackend(cls, actor_config, actors=args.workers, address=args.ray_address), local
    local_config = dict(config)
    if args.workers is not None:
        local_config["workers"] = args.workers
    verifier = cls(**local_config)
    return LocalBackend(verifier), verifier


def run_command(args: argparse.Namespace) -> int:
    """Handle `veristep verify`; returns the exit code."""
    if args.limit is not None and args.limit < 0:
        _error("--limit must be >= 0")
        return EXIT_USAGE
    if args.workers is not None and args.workers < 1:
        _error("--workers must be >= 1")
        return EXIT_USAGE
    if (
        args.output != STDIO
        and args.input != STDIO
        and Path(args.output).resolve() == Path(args.input).resolve()
    ):
        _error("--output must differ from INPUT (it would be overwritten while read)")
        return EXIT_USAGE
    try:
        config = parse_config(args.config)
        cls = verifier_class(args.kind)
        backend, verifier = _build_backend(args, cls, config)
    except (ValueError, TypeError) as err:  # bad kind or bad configuration
        _error(str(err))
        return EXIT_USAGE

    progress = None
    try:
        items = read_items(
            args.input, verifier, completion_key=args.completion_key, limit=args.limit
        )
        writer = JsonlWriter(args.output)
        if not args.no_progress:
            progress = _progress_bar(args.input, args.limit, args.batch_size)
        summary = run_verify(
            args.kind, items, backend, writer, batch_size=args.batch_size, progress=progress
        )
    except (InputError, OSError) as err:
        _error(str(err))
        return EXIT_FAILED
    finally:
        if progress is not None:
            progress.close()
        backend.close()
        if verifier is not getattr(backend, "verifier", None):
            close = getattr(verifier, "close", None)
            if callable(close):
                close()
    print(summary.table(), file=sys.stderr)
    if summary.error:
        n = summary.total
        _error(
            f"{summary.error}; the {n} result{'' if n == 1 else 's'} before it are in the output"
        )
        return EXIT_FAILED
    return EXIT_OK


def _progress_bar(path: str, limit: int | None, batch_size: int) -> Any:
    """A tqdm bar on stderr for inputs longer than one batch; None when not worth showing."""
    if not _is_terminal(sys.stderr):  # logs and pipes get the summary only, and no line count
        return None
    total = count_lines(path)
    if limit is not None:
        total = min(total, limit) if total is not None else limit
    if total is not None and total <= batch_size:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="item", file=sys.stderr, dynamic_ncols=True)


def _is_terminal(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(callable(isatty) and isatty())

"""`veristep verify <kind> INPUT.jsonl`: the one runner for every registered verifier kind."""

from __future__ import annotations

import argparse
import enum
import inspect
import json
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from veristep.common import jsonl_io
from veristep.common.jsonl_io import (
    EXIT_DATA,
    EXIT_OK,
    STDIO,
    JsonlWriter,
    LineMessages,
    UsageError,
    check_input,
    check_output,
    iter_lines,
    progress_bar,
    require_module,
)

from veristep.cli import add_output_option, add_progress_option

from ..core.registry import available_kinds, verifier_class
from .raw_line_workers import line_pool_workers, run_lines
from .runner import (
    Backend,
    LocalBackend,
    RunNotices,
    close_verifier,
    count_lines,
    read_items,
    run_verify,
)

PROG = "veristep verify"


def parse_config(pairs: list[str] | None) -> dict[str, Any]:
    """Turn `key=value` strings into verifier config; values are JSON when they parse as JSON."""
    config: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise UsageError(f"--set expects key=value with a Python name as key, got {pair!r}")
        try:
            config[key] = json.loads(raw)
        except ValueError:
            config[key] = raw  # a bare word such as python or hermes
    return config


def check_config(cls: type, config: Mapping[str, Any]) -> None:
    """Raise UsageError naming the `--set` field that the verifier class does not take.

    Each key must be a parameter of the class's constructor, and its value must fit the
    parameter's annotation where that is a plain type (numbers, bool, str, None, Literal,
    enums, lists, mappings); other annotations are left to the constructor.
    """
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return
    open_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # noqa: BLE001 - unresolvable annotations: only names are checked
        hints = {}
    named = [n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    for key, value in config.items():
        if key not in named:
            if open_kwargs:
                continue
            raise UsageError(
                f"--set {key}: {cls.__name__} has no option {key!r}; options: {', '.join(named)}"
            )
        hint = hints.get(key)
        if hint is not None and not _fits(value, hint):
            raise UsageError(f"--set {key}: expects {_describe(hint)}, got {value!r}")


def _fits(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in typing.get_args(hint))
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return isinstance(value, hint) or value in {m.value for m in hint}
    container = origin or hint
    if container in (list, tuple, Sequence) or container is typing.Sequence:
        return isinstance(value, list)
    if container in (dict, Mapping) or container is typing.Mapping:
        return isinstance(value, dict)
    return True  # a class of the verifier's own: its constructor says what it accepts


def _describe(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in typing.get_args(hint))
    if origin is typing.Literal:
        return "one of " + ", ".join(map(repr, typing.get_args(hint)))
    names = {bool: "true/false", int: "an integer", float: "a number", str: "a string",
             type(None): "null"}
    if hint in names:
        return names[hint]
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in hint)
    return getattr(hint, "__name__", str(hint))


def verifier_from_args(kind: str, pairs: list[str] | None, workers: int | None) -> tuple[type, dict]:
    """The verifier class of KIND and its checked config (`--set` values, `--workers`)."""
    try:
        cls = verifier_class(kind)
    except ValueError as err:
        raise UsageError(str(err)) from None
    config = parse_config(pairs)
    if workers is not None:
        config["workers"] = workers
    check_config(cls, config)
    return cls, config


def build(cls: type, config: dict[str, Any]) -> Any:
    """Construct the verifier; a constructor's ValueError/TypeError is a usage error."""
    try:
        return cls(**config)
    except (ValueError, TypeError) as err:
        raise UsageError(f"bad verifier configuration: {err}") from None


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `verify` sub-command."""
    parser = subparsers.add_parser(
        "verify",
        help="verify a JSONL file of completions with one verifier kind",
        description=(
            "Verify every line of INPUT (a JSONL file, '-' for stdin) and write each input line "
            "unchanged plus one 'veristep' key holding the result (kind, reward, correct, "
            "status, judged, extracted, ...). Every line gets an output line, in order: one that "
            "cannot be verified gets status input_error or bad_reference. "
            f"KIND is one of: {', '.join(available_kinds())}, or package.module:ClassName. "
            "Exit codes: 0 done; 1 some lines could not be read or the verifier raised (all "
            "other lines are in the output); 2 bad usage (nothing was run)."
        ),
    )
    parser.add_argument("kind", metavar="KIND")
    parser.add_argument("input", metavar="INPUT.jsonl")
    add_output_option(parser, "output JSONL ('-': stdout)", default=STDIO)
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="parallel workers (local; default: the verifier's own) or Ray actors "
        "(--backend ray; default: one per cluster CPU)",
    )
    parser.add_argument("--limit", type=int, default=None, help="verify only the first N lines")
    parser.add_argument(
        "--batch-size", type=int, default=256,
        help="lines per verify_batch call and per output flush",
    )
    parser.add_argument(
        "--completion-key", default="completion", help="input key holding the completion"
    )
    parser.add_argument("--backend", choices=("local", "ray"), default="local",
                        help="where batches are verified (ray: pip install 'veristep[ray]')")
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
        help="verifier option, repeatable; VALUE is parsed as JSON if it can be "
        "(--set timeout=2.5 --set all_or_nothing=true)",
    )
    add_progress_option(parser)
    parser.set_defaults(func=run_command)


def _check_usage(args: argparse.Namespace) -> None:
    if args.limit is not None and args.limit < 0:
        raise UsageError("--limit must be >= 0")
    if args.workers is not None and args.workers < 1:
        raise UsageError("--workers must be >= 1")
    if args.batch_size < 1:
        raise UsageError("--batch-size must be >= 1")
    check_input(args.input)
    check_output(args.output, inputs=[args.input])
    if args.backend == "ray":
        require_module("ray", "ray", "--backend ray")


def _build_backend(args: argparse.Namespace) -> tuple[Backend, Any]:
    """The backend plus a local verifier instance used to read references from records."""
    if args.backend == "ray":
        from .ray_backend import RayBackend

        cls, config = verifier_from_args(args.kind, args.config, None)
        # One actor per CPU, each verifying on one core unless --set workers=K says otherwise;
        # the driver's own instance only reads references.
        actor_config = {"workers": 1, **config}
        check_config(cls, actor_config)
        local = build(cls, actor_config)  # first, so a bad config fails before Ray starts
        try:
            backend = RayBackend(cls, actor_config, actors=args.workers, address=args.ray_address)
        except Exception as err:  # noqa: BLE001 - no cluster at that address, Ray cannot start
            close_verifier(local)
            raise UsageError(f"cannot start the Ray backend: {type(err).__name__}: {err}") from None
        return backend, local
    cls, config = verifier_from_args(args.kind, args.config, args.workers)
    verifier = build(cls, config)
    return LocalBackend(verifier), verifier



def run_command(args: argparse.Namespace) -> int:
    """Handle `veristep verify`; returns the exit code (usage errors raise UsageError)."""
    _check_usage(args)
    backend, verifier = _build_backend(args)
    messages = LineMessages(PROG)
    progress = None
    try:
        writer = JsonlWriter(args.output)
        if not args.no_progress:
            progress = _progress_bar(args.input, args.limit, args.batch_size)
        notices = RunNotices(args.input, messages)
        workers = line_pool_workers(verifier) if isinstance(backend, LocalBackend) else 0
        if workers:
            summary = run_lines(
                args.kind, iter_lines(args.input, limit=args.limit), verifier, writer,
                workers=workers, timeout=verifier.timeout, completion_key=args.completion_key,
                batch_size=args.batch_size, progress=progress, notices=notices,
            )
        else:
            items = read_items(
                args.input, verifier, completion_key=args.completion_key, limit=args.limit
            )
            summary = run_verify(
                args.kind, items, backend, writer, batch_size=args.batch_size, progress=progress,
                notices=notices,
            )
    finally:
        if progress is not None:
            progress.close()
        backend.close()
        if verifier is not getattr(backend, "verifier", None):
            close_verifier(verifier)
    messages.finish()
    print(summary.table(), file=sys.stderr)
    if summary.error:
        messages.say(f"error: {summary.error}; the {summary.total} lines before it are in the output")
    elif summary.failed:
        parts = [
            f"{n} {what}"
            for n, what in (
                (summary.input_errors, "unreadable line(s) (status input_error)"),
                (summary.raised, "line(s) on which the verifier raised (internal_error)"),
            )
            if n
        ]
        messages.say(f"error: {' and '.join(parts)}; every other line was verified")
    return EXIT_DATA if summary.failed else EXIT_OK


def _progress_bar(path: str, limit: int | None, batch_size: int) -> Any:
    """A tqdm bar on stderr for inputs longer than one batch; None when not worth showing."""
    if not jsonl_io.is_terminal(sys.stderr):  # logs and pipes: the summary only, no line count
        return None
    total = count_lines(path)
    if limit is not None:
        total = min(total, limit) if total is not None else limit
    if total is not None and total <= batch_size:
        return None
    return progress_bar(total)

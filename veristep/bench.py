"""`veristep bench NAME`: run benchmarks/NAME.py from the source checkout, or list them."""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
from pathlib import Path

#: Environment variable naming the benchmarks folder when it is not next to the package.
BENCH_DIR_ENV = "VERISTEP_BENCHMARKS"


def benchmarks_dir(explicit: str | None = None) -> Path | None:
    """The benchmarks folder: --dir, $VERISTEP_BENCHMARKS, or the source checkout's benchmarks/."""
    for candidate in (explicit, os.environ.get(BENCH_DIR_ENV)):
        if candidate:
            return Path(candidate)
    # An editable install or a source checkout has benchmarks/ beside the veristep/ folder.
    checkout = Path(__file__).resolve().parent.parent / "benchmarks"
    return checkout if checkout.is_dir() else None


def available_benchmarks(directory: Path) -> dict[str, str]:
    """Benchmark names (script stems) mapped to the first line of each script's docstring."""
    found: dict[str, str] = {}
    for script in sorted(directory.glob("*.py")):
        if script.name.startswith("_"):
            continue
        try:
            doc = ast.get_docstring(ast.parse(script.read_text(encoding="utf-8"))) or ""
        except (SyntaxError, UnicodeDecodeError, OSError):
            doc = "(unreadable script)"
        found[script.stem] = doc.strip().splitlines()[0] if doc.strip() else ""
    return found


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `bench` sub-command."""
    parser = subparsers.add_parser(
        "bench",
        help="run a benchmark script from the source checkout (no NAME: list them)",
        description=(
            "Run benchmarks/NAME.py with the current Python; arguments after NAME go to the "
            "script (veristep bench NAME --help shows its own options). Benchmarks live in the "
            f"source checkout, or in the folder named by --dir or ${BENCH_DIR_ENV}."
        ),
    )
    parser.add_argument("name", nargs="?", metavar="NAME", help="benchmark to run")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, metavar="ARGS")
    parser.add_argument("--dir", default=None, help="benchmarks folder to use")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    """Handle `veristep bench`; returns the benchmark's exit code (2 when it cannot be found)."""
    directory = benchmarks_dir(args.dir)
    if directory is None or not directory.is_dir():
        print(
            "veristep bench: error: no benchmarks folder found; benchmarks ship with the source "
            f"checkout (git clone, pip install -e .), or set --dir / ${BENCH_DIR_ENV}",
            file=sys.stderr,
        )
        return 2
    found = available_benchmarks(directory)
    if args.list or not args.name:
        print(f"benchmarks in {directory}:")
        width = max((len(n) for n in found), default=0)
        for name, doc in found.items():
            print(f"  {name:<{width}}  {doc}")
        if not found:
            print("  (none)")
        return 0
    name = args.name.removesuffix(".py")
    if name not in found:
        print(
            f"veristep bench: error: no benchmark {name!r} in {directory}; "
            f"available: {', '.join(found) or 'none'}",
            file=sys.stderr,
        )
        return 2
    command = [sys.executable, str(directory / f"{name}.py"), *args.script_args]
    # Run from the checkout root so relative paths in benchmarks (results/, tests/data/) resolve.
    return subprocess.call(command, cwd=directory.parent)

"""Math-Verify's own test tables (math-verify 0.9.0) through Math-Verify and veristep, same run.

The cases come from Math-Verify's source distribution, downloaded at run time with pip (never
copied into this repository): every `@pytest.mark.parametrize` row of its gold/prediction
tests, the 7 multiple-choice string-extraction rows (reference = the expected letter) and the
one string comparison in `test_precision`: 283 cases. Each case runs through

* Math-Verify: the test function itself, with the test's own options; it passes when
  Math-Verify gives the expected verdict;
* veristep: `MathVerifier().verify_batch(predictions, golds)` with default options,
  literally (completion = the test's prediction, reference = its gold).

Reported separately, decided by running Math-Verify, not by hand:
* rounding-dependent cases: Math-Verify's verdict changes when its float rounding is raised
  from the test's setting to 20 decimals (the pair is equal only after rounding);
* option-dependent cases: Math-Verify's verdict with its default settings differs from the
  expected one (the test sets strict=False, LaTeX-only extraction, a precision, ...).

Throughput: both checkers over all cases at 1 and 2 workers (Math-Verify: in-process, then a
fork pool; veristep: worker processes, plus its caller's in-process fast path), timed by
benchmarks/_math_bench_common.py: fresh interpreters, a cold and a warm pass, interleaved
repeats, median. Timings on a shared machine: read the ratios.

    python benchmarks/math_verify_suite_bench.py
    python benchmarks/math_verify_suite_bench.py --sdist /tmp/math_verify-0.9.0 --repeats 5
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import json
import logging
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import types
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _math_bench_common as timing

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "math_verify_suite_bench.json"
VERSION = "0.9.0"
# Test modules with gold/prediction tables (the others test timeouts, configs and internals).
MODULES = ("test_all", "test_numina_cases", "test_open_thoughts", "test_boxed", "test_strict",
           "test_yujianll", "test_string_extraction")
STRICT_ROUNDING = 20


@dataclass
class Case:
    """One table row: what the test passes in, and what it expects."""

    id: str
    table: str
    gold: str
    pred: str
    expected: bool
    run: Callable[[], None]  # the test itself on this row; raises AssertionError on a miss
    flags: list[str] = field(default_factory=list)


def fetch_sdist(dest: Path) -> Path:
    """Download math-verify's source distribution with pip and unpack it; return its root."""
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", f"math-verify=={VERSION}", "--no-binary", ":all:",
                    "--no-deps", "--quiet", "-d", str(dest)], check=True)
    archive = next(dest.glob(f"math_verify-{VERSION}.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    return dest / f"math_verify-{VERSION}"


def _rows(func: Any) -> Iterator[tuple[int, dict[str, Any]]]:
    for mark in getattr(func, "pytestmark", []):
        if mark.name == "parametrize":
            names = [n.strip() for n in mark.args[0].split(",")]
            for i, values in enumerate(mark.args[1]):
                yield i, dict(zip(names, values, strict=True))


def load_cases(sdist: Path) -> list[Case]:
    """Every table row of Math-Verify's tests, imported from the unpacked sdist."""
    sys.path.insert(0, str(sdist))
    # verl and OpenRLHF install a regular top-level `tests` package, which wins over the sdist's
    # (a folder without __init__.py): name the sdist's folder as `tests` explicitly
    for name in [m for m in sys.modules if m == "tests" or m.startswith("tests.")]:
        del sys.modules[name]
    package = types.ModuleType("tests")
    package.__path__ = [str(sdist / "tests")]
    sys.modules["tests"] = package
    cases: list[Case] = []
    for mod_name in MODULES:
        module = importlib.import_module(f"tests.{mod_name}")
        for name, func in inspect.getmembers(module, inspect.isfunction):
            for i, params in _rows(func):
                run = _bind(func, params)
                table = f"{mod_name}::{name}"
                if "config" in params:  # multiple choice: the reference is the expected letter
                    letters = params["expected"]
                    gold = letters[1] if letters else "A"
                    cases.append(Case(f"{table}[{i}]", table, gold, params["pred"], bool(letters), run,
                                      ["choice" + ("" if letters else ", reference built here")]))
                    continue
                expected = params.get("expected", params.get("result"))
                cases.append(Case(f"{table}[{i}]", table, params["gold"], params["pred"], bool(expected), run))
    test_all = sys.modules["tests.test_all"]
    gold, pred = "$\\frac{1}{3}$", "0.3333$"

    def precision_row() -> None:
        assert test_all.compare_strings(gold, pred, match_types=["latex", "expr"], precision=4) == 1

    cases.append(Case("test_all::test_precision[string]", "test_all::test_precision", gold, pred, True, precision_row))
    return cases


def _bind(func: Callable[..., None], params: dict[str, Any]) -> Callable[[], None]:
    return lambda: func(**params)


def mv_agrees(case: Case) -> bool:
    """Run the test row; True when Math-Verify gives the expected verdict."""
    try:
        case.run()
        return True
    except AssertionError:
        return False


@contextlib.contextmanager
def forced_rounding(decimals: int) -> Iterator[None]:
    """Make every `verify` the test modules call round floats to `decimals` places."""
    import math_verify

    original = math_verify.verify

    def strict_verify(*args: Any, **kwargs: Any) -> Any:
        kwargs["float_rounding"] = decimals
        return original(*args, **kwargs)

    patched = [m for name in MODULES if (m := sys.modules.get(f"tests.{name}")) and hasattr(m, "verify")]
    for module in patched:
        module.verify = strict_verify
    try:
        yield
    finally:
        for module in patched:
            module.verify = original


def mv_default_verdict(case: Case) -> bool:
    """Math-Verify's verdict with its documented defaults: verify(parse(gold), parse(pred))."""
    from math_verify import parse, verify

    try:
        return bool(verify(parse(case.gold), parse(case.pred)))
    except Exception:
        return False


def flag_cases(cases: list[Case], mv_ok: list[bool]) -> None:
    """Mark the rounding- and option-dependent rows (by running Math-Verify)."""
    with forced_rounding(STRICT_ROUNDING):
        for case, ok in zip(cases, mv_ok, strict=True):
            if mv_agrees(case) != ok:
                case.flags.append("rounding")
    for case in cases:
        if mv_default_verdict(case) != case.expected:
            case.flags.append("option")


def _one_run(sdist: Path, tool: str, workers: int) -> None:
    """Time one checker over every row, two passes (imports and case loading excluded)."""
    import math_verify  # noqa: F401  # both checkers' imports happen before the clock starts
    import sympy  # noqa: F401
    import veristep.verifiers.math  # noqa: F401

    cases = load_cases(sdist)
    if tool == "math-verify":
        times = timing.time_in_process_or_pool(lambda i: mv_agrees(cases[i]), len(cases), workers, passes=2)
    else:
        times = timing.veristep_passes([c.pred for c in cases], [c.gold for c in cases], workers, passes=2)[0]
    timing.print_times(times)


def agreement_rows(cases: list[Case], vs_ok: list[bool], mv_ok: list[bool]) -> list[dict[str, Any]]:
    """Agreement with the expected verdicts per table, for both checkers."""
    rows = []
    for table in sorted({c.table for c in cases}):
        idx = [i for i, c in enumerate(cases) if c.table == table]
        rows.append({"table": table, "cases": len(idx), "math_verify": sum(mv_ok[i] for i in idx),
                     "veristep": sum(vs_ok[i] for i in idx)})
    return rows


def main(argv: list[str] | None = None) -> int:
    """Load the tables, run both checkers, print the tables and write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sdist", type=Path, help="an unpacked math_verify-0.9.0 sdist (default: pip download one)")
    ap.add_argument("--repeats", type=int, default=3, help="timed repeats per setting (median reported)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts to time")
    ap.add_argument("--output", type=Path, default=OUT, help="where to write the JSON results")
    ap.add_argument("--one-run", nargs=2, metavar=("TOOL", "WORKERS"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    logging.disable(logging.CRITICAL)  # Math-Verify logs every unparseable row
    if args.one_run:
        _one_run(args.sdist, args.one_run[0], int(args.one_run[1]))
        return 0

    with tempfile.TemporaryDirectory() as tmp:
        sdist = args.sdist or fetch_sdist(Path(tmp))
        cases = load_cases(sdist)
        mv_ok = [mv_agrees(c) for c in cases]
        flag_cases(cases, mv_ok)
        results = timing.veristep_passes([c.pred for c in cases], [c.gold for c in cases], max(args.workers), 1)[1]
        vs_ok = [r.correct == c.expected for r, c in zip(results, cases, strict=True)]

        speed = timing.measure(__file__, ["--sdist", str(sdist)], args.workers, args.repeats)

    n = len(cases)
    rounding = [i for i, c in enumerate(cases) if "rounding" in c.flags]
    option = [i for i, c in enumerate(cases) if "option" in c.flags and "rounding" not in c.flags]
    outside = [i for i in range(n) if i not in rounding]
    plain = [i for i in outside if i not in option]
    fps = [i for i in range(n) if results[i].correct and not cases[i].expected]

    def share(idx: list[int], ok: list[bool]) -> str:
        return f"{sum(ok[i] for i in idx)}/{len(idx)} ({sum(ok[i] for i in idx) / max(1, len(idx)):.1%})"

    print(f"Math-Verify {VERSION} test tables: {n} cases ({len(rounding)} rounding-dependent, "
          f"{len(option)} more option-dependent)")
    print(f"{'subset':44} {'math-verify':>18} {'veristep':>18}")
    for label, idx in (("all cases", list(range(n))), ("outside the rounding cases", outside),
                       ("outside rounding- and option-dependent cases", plain), ("rounding-dependent", rounding),
                       ("option-dependent", option)):
        print(f"{label:44} {share(idx, mv_ok):>18} {share(idx, vs_ok):>18}")
    print(f"veristep false positives (correct where the table expects 0): {len(fps)}"
          + (f" -> {[cases[i].id for i in fps]} (flags: {[cases[i].flags for i in fps]})" if fps else ""))
    print()
    print(f"{'table':52} {'cases':>5} {'MV':>5} {'veristep':>8}")
    for row in agreement_rows(cases, vs_ok, mv_ok):
        print(f"{row['table']:52} {row['cases']:5d} {row['math_verify']:5d} {row['veristep']:8d}")
    print()
    print("veristep disagreements:")
    for i, c in enumerate(cases):
        if not vs_ok[i]:
            r = results[i]
            print(f"  {c.id} [{', '.join(c.flags) or '-'}] expected {int(c.expected)}: {r.status.value}, "
                  f"extracted {r.extracted!r}")
    print()
    timing.print_throughput(speed, n, args.workers, unit="cases")

    status_counts = Counter(r.status.value for r in results)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({
        "command": "python benchmarks/math_verify_suite_bench.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "math_verify_version": VERSION,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "note": "shared machine; compare rows of this run, not across runs"},
        "cases": n,
        "agreement": {
            "all": {"math_verify": sum(mv_ok), "veristep": sum(vs_ok), "cases": n},
            "outside_rounding": {"math_verify": sum(mv_ok[i] for i in outside),
                                 "veristep": sum(vs_ok[i] for i in outside), "cases": len(outside)},
            "outside_rounding_and_option": {"math_verify": sum(mv_ok[i] for i in plain),
                                            "veristep": sum(vs_ok[i] for i in plain), "cases": len(plain)},
        },
        "veristep_false_positives": [cases[i].id for i in fps],
        "per_table": agreement_rows(cases, vs_ok, mv_ok),
        "veristep_statuses": dict(status_counts),
        "throughput": speed,
        "rows": [{"id": c.id, "gold": c.gold, "pred": c.pred, "expected": c.expected, "flags": c.flags,
                  "math_verify_agrees": mv_ok[i], "veristep_agrees": vs_ok[i], "status": results[i].status.value,
                  "extracted": results[i].extracted, "detail": results[i].detail}
                 for i, c in enumerate(cases)],
    }, indent=2))
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Math-Verify (parse + verify) vs veristep's MathVerifier on a MATH500-based mix, same run.

Items are built from MATH500 (tests/data/math500_test.jsonl): each problem's reference solution
(the dataset's own text), a reformatted correct answer, a wrong answer, a close-but-wrong decimal
(where the answer is not a short terminating decimal), a self-corrected answer, plus a few
adversarial completions. Labels come from how each item was built, not from either checker;
every category but the reference solutions is built here, so it shows regressions, not
superiority (Math-Verify's own tables: benchmarks/math_verify_suite_bench.py).

Accuracy per category for both checkers; throughput at equal worker counts (Math-Verify
in-process, then a fork pool; veristep's worker pool) and at each tool's best setting, timed by
benchmarks/_math_bench_common.py (fresh interpreters, cold and warm passes, median).

    python benchmarks/math_verify_bench.py                 # full run (>= 2,000 items)
    python benchmarks/math_verify_bench.py --problems 50 --repeats 1   # quick look
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import random
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import _math_bench_common as timing

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "math500_test.jsonl"
OUT = ROOT / "benchmarks" / "results" / "math_verify_bench.json"

ADVERSARIAL = [
    "$\\boxed{9^{9^{9^9}}}$",
    "$\\boxed{10^{10^{10}}}$",
    "$\\boxed{(10^7)^{10^7}}$",
    "$\\boxed{100000000!}$",
    "$\\boxed{" + "{" * 20_000 + "1" + "}" * 20_000 + "}$",
    "The answer is " + "(" * 3000 + "7" + ")" * 3000,
    "$\\boxed{" + "\\sqrt{" * 300 + "2" + "}" * 300 + "}$",
    "\\boxed{" * 5000,
]


@dataclass
class Item:
    """One benchmark item: a completion, its reference answer and the true label."""

    kind: str
    completion: str
    answer: str
    label: bool


_INT_RE = re.compile(r"^-?\d+$")
_FRAC_RE = re.compile(r"^(-?)\\frac\{(\d+)\}\{(\d+)\}$")


def _exact_value(answer: str) -> Fraction | None:
    """The exact rational value of a plain integer or \\frac{p}{q} answer."""
    a = answer.strip()
    if _INT_RE.match(a):
        return Fraction(int(a))
    m = _FRAC_RE.match(a)
    if m and int(m.group(3)) != 0:
        v = Fraction(int(m.group(2)), int(m.group(3)))
        return -v if m.group(1) else v
    return None


def _float_value(answer: str) -> float | None:
    """A float value for a closed-form numeric answer (via sympy), or None if it is not one."""
    from math_verify import parse

    try:
        parsed = parse("$" + answer + "$", parsing_timeout=None)
        if not parsed:
            return None
        expr = parsed[0]
        if getattr(expr, "free_symbols", {1}) or not hasattr(expr, "evalf"):
            return None
        val = complex(expr.evalf(30))
        return val.real if abs(val.imag) < 1e-12 else None
    except Exception:
        return None


def _reasoning(solution: str) -> str:
    """Model-like reasoning text: the start of the reference solution with its boxes removed."""
    text = solution[:400].replace("\\boxed", "").replace("\\fbox", "")
    return text.rsplit(" ", 1)[0] + " ..."


def _reformat(answer: str, rng: random.Random) -> str:
    """An equivalent spelling of `answer` in a common answer format."""
    value = _exact_value(answer)
    if value is not None and value.denominator == 1 and abs(value) >= 1000 and rng.random() < 0.5:
        return f"#### {int(value):,}"
    if value is not None and value.denominator != 1 and rng.random() < 0.5:
        d = value.denominator
        while d % 2 == 0:
            d //= 2
        while d % 5 == 0:
            d //= 5
        if d == 1:  # a terminating decimal is exactly the same number
            num, den = value.numerator, value.denominator
            digits = 0
            while den * (10**digits) % 1 or (num * 10**digits) % den:
                digits += 1
            return f"The final answer is ${num / den:.{digits}f}$."
    spelled = answer.replace("\\frac", "\\dfrac")
    choice = rng.randrange(4)
    if choice == 0:
        return f"The final answer is ${spelled}$."
    if choice == 1:
        return f"Therefore, the answer is $\\boxed{{{spelled}}}$."
    if choice == 2:
        return f"<answer>{answer}</answer>"
    return f"So we get $\\boxed{{ {spelled} }}$ as our result."


def _wrong(answer: str, others: list[str], rng: random.Random) -> str:
    """An answer that is not equal to `answer`: a perturbed number or another problem's answer."""
    value = _exact_value(answer)
    if value is not None:
        delta = rng.choice([1, -1, 2])
        if value.denominator == 1:
            return str(int(value) + delta)
        return f"\\frac{{{value.numerator + delta * (1 if value.numerator > 0 else -1)}}}{{{value.denominator}}}"
    norm = re.sub(r"\s+", "", answer)
    for _ in range(50):
        other = rng.choice(others)
        if re.sub(r"\s+", "", other) != norm and _exact_value(other) is None:
            return other
    return answer + "+1"


def build_items(problems: int, adversarial: int, seed: int) -> list[Item]:
    """The benchmark mix, deterministic for a seed."""
    rng = random.Random(seed)
    rows = [json.loads(line) for line in DATA.open(encoding="utf-8")][:problems]
    answers = [r["answer"] for r in rows]
    items: list[Item] = []
    for i, row in enumerate(rows):
        ans, head = row["answer"], _reasoning(row["solution"])
        items.append(Item("reference_solution", row["solution"], ans, True))
        items.append(Item("reformatted", head + "\n\n" + _reformat(ans, rng), ans, True))
        wrong = _wrong(ans, answers[:i] + answers[i + 1 :], rng)
        items.append(Item("wrong", head + f"\n\nThe answer is $\\boxed{{{wrong}}}$.", ans, False))
        if i % 2 == 0:
            items.append(Item("self_corrected", head + f"\n\nSo $\\boxed{{{wrong}}}$. Wait, that is wrong. "
                              f"Rechecking, the answer is $\\boxed{{{ans}}}$.", ans, True))
        else:
            items.append(Item("self_corrected_wrong", head + f"\n\nSo $\\boxed{{{ans}}}$. Hmm, let me redo it. "
                              f"The answer is $\\boxed{{{wrong}}}$.", ans, False))
        exact = _exact_value(ans)
        if exact is not None and exact.denominator == 1:
            continue
        val = _float_value(ans)
        # only where 6 decimals cannot be exact: a rounding checker then calls it equal
        if val is not None and abs(val) < 1e6 and abs(val - round(val, 6)) > 1e-12:
            approx = f"{val:.6f}"
            if exact is None or Fraction(approx) != exact:
                items.append(Item("close_wrong", head + f"\n\nThe answer is $\\boxed{{{approx}}}$.", ans, False))
    for k in range(adversarial):
        items.append(Item("adversarial", ADVERSARIAL[k % len(ADVERSARIAL)], str(k + 2), False))
    return items


# How each category's items were made: "MATH500" text is the dataset's own solution; every
# other completion is built here from the MATH500 answer, so it shows regressions, not superiority.
ORIGIN = {
    "reference_solution": "MATH500 solution text (dataset)",
    "reformatted": "built here: answer in another format",
    "wrong": "built here: perturbed or another problem's answer",
    "self_corrected": "built here: wrong box, then the right one",
    "self_corrected_wrong": "built here: right box, then a wrong one",
    "close_wrong": "built here: 6-decimal approximation of an irrational",
    "adversarial": "built here: hang and size attacks",
}


def mv_verdict(item: Item) -> bool:
    """Math-Verify as documented: parse gold and prediction, then verify."""
    from math_verify import parse, verify

    try:
        return bool(verify(parse("$" + item.answer + "$"), parse(item.completion)))
    except Exception:
        return False


def per_category(items: list[Item], verdicts: dict[str, list[bool]]) -> list[dict[str, Any]]:
    """Accuracy of each checker per category (label from how the item was built)."""
    rows = []
    for kind in dict.fromkeys(it.kind for it in items):
        idx = [i for i, it in enumerate(items) if it.kind == kind]
        row: dict[str, Any] = {"category": kind, "items": len(idx), "origin": ORIGIN.get(kind, "built here")}
        for name, v in verdicts.items():
            row[name] = sum(v[i] == items[i].label for i in idx) / len(idx)
            row[f"{name}_false_positives"] = sum(v[i] and not items[i].label for i in idx)
        rows.append(row)
    return rows


def _one_run(args: argparse.Namespace, tool: str, workers: int) -> None:
    """Time one checker over the whole mix, two passes (imports and item building excluded)."""
    import math_verify  # noqa: F401
    import sympy  # noqa: F401
    import veristep.verifiers.math  # noqa: F401

    items = build_items(args.problems, args.adversarial, args.seed)
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    if tool == "math-verify":
        times = timing.time_in_process_or_pool(lambda i: mv_verdict(items[i]), len(items), workers, passes=2)
    else:
        times = timing.veristep_passes([it.completion for it in items], [it.answer for it in items], workers, 2,
                                timeout=args.timeout)[0]
    timing.print_times(times)


def single_call_latency(items: list[Item], workers: int, timeout: float) -> dict[str, float]:
    """veristep's verify(), one call at a time: end-to-end latency percentiles of a single call."""
    from veristep.verifiers.math import MathVerifier

    with MathVerifier(workers=workers, timeout=timeout) as verifier:
        verifier.verify("$\\boxed{x}$", "y")  # start the pool outside the measurement
        lat = []
        for it in items:
            t0 = time.perf_counter()
            verifier.verify(it.completion, it.answer)
            lat.append(time.perf_counter() - t0)
    lat.sort()
    return {"calls": len(lat), "p50_ms": 1000 * lat[len(lat) // 2], "p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))]}


def main(argv: list[str] | None = None) -> int:
    """Build the mix, run both checkers, print the tables and write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems", type=int, default=500, help="MATH500 problems to use (max 500)")
    ap.add_argument("--adversarial", type=int, default=8, help="adversarial completions to add")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts to time (both tools)")
    ap.add_argument("--repeats", type=int, default=3, help="fresh-interpreter timing runs per setting (median)")
    ap.add_argument("--timeout", type=float, default=5.0, help="veristep per-item limit (s)")
    ap.add_argument("--single-calls", type=int, default=400,
                    help="items (a spread sample) also timed through one-at-a-time verify() calls")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", type=Path, default=OUT, help="where to write the JSON results")
    ap.add_argument("--one-run", nargs=2, metavar=("TOOL", "WORKERS"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    if args.one_run:
        _one_run(args, args.one_run[0], int(args.one_run[1]))
        return 0

    items = build_items(args.problems, args.adversarial, args.seed)
    kinds = Counter(it.kind for it in items)
    print(f"{len(items)} items: {dict(kinds)}", file=sys.stderr)
    _, results = timing.veristep_passes([it.completion for it in items], [it.answer for it in items], max(args.workers), 1,
                                 timeout=args.timeout)
    verdicts = {"veristep": [r.correct for r in results], "math_verify": [mv_verdict(it) for it in items]}
    categories = per_category(items, verdicts)
    print(f"{'category':22} {'items':>5} {'math-verify':>11} {'veristep':>9}  origin")
    for row in categories:
        print(f"{row['category']:22} {row['items']:5d} {row['math_verify']:11.1%} {row['veristep']:9.1%}  {row['origin']}")
    totals = {name: sum(v[i] == it.label for i, it in enumerate(items)) / len(items) for name, v in verdicts.items()}
    fps = {name: sum(v[i] and not it.label for i, it in enumerate(items)) for name, v in verdicts.items()}
    print(f"{'all':22} {len(items):5d} {totals['math_verify']:11.1%} {totals['veristep']:9.1%}  "
          f"false positives: math-verify {fps['math_verify']}, veristep {fps['veristep']}")
    statuses = Counter(r.status.value for r in results)
    in_process = sum(1 for r in results if "worker_s" not in r.timings)
    print(f"veristep statuses: {dict(statuses)}; decided in the caller without sympy: {in_process}/{len(items)}")
    print()
    passthrough = ["--problems", str(args.problems), "--adversarial", str(args.adversarial), "--seed", str(args.seed),
                   "--timeout", str(args.timeout)]
    speed = timing.measure(__file__, passthrough, args.workers, args.repeats)
    timing.print_throughput(speed, len(items), args.workers)
    latency = None
    if args.single_calls > 0:
        step = max(1, len(items) // args.single_calls)
        latency = single_call_latency(items[::step][: args.single_calls], min(args.workers), args.timeout)
        print(f"veristep verify() one call at a time ({latency['calls']} calls, {min(args.workers)} worker): "
              f"p50 {latency['p50_ms']:.2f} ms, p99 {latency['p99_ms']:.2f} ms")

    disagreements = [
        {"kind": it.kind, "answer": it.answer, "completion_tail": it.completion[-160:], "label": it.label,
         "math_verify": m, "veristep": v}
        for it, m, v in zip(items, verdicts["math_verify"], verdicts["veristep"], strict=True) if m != v or v != it.label
    ]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({
        "command": "python benchmarks/math_verify_bench.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "note": "shared machine; compare rows of this run, not across runs"},
        "items": len(items), "kinds": dict(kinds),
        "accuracy": totals, "false_positives": fps, "per_category": categories,
        "veristep_statuses": dict(statuses), "decided_in_caller": in_process,
        "throughput": speed, "single_call_latency": latency,
        "disagreements": disagreements[:200],
    }, indent=2))
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

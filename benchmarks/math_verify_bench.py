"""Math-Verify (parse + verify, sequential) vs veristep's MathVerifier batch API, same items, same run.

Items are built from MATH500 (tests/data/math500_test.jsonl): each problem's reference solution,
a reformatted correct answer, a wrong answer, a close-but-wrong decimal (where the answer is not
a short terminating decimal), a self-corrected answer, plus a few adversarial completions.
Labels come from how each item was built, not from either checker.

    python benchmarks/math_verify_bench.py                 # full run (>= 2,000 items)
    python benchmarks/math_verify_bench.py --problems 50   # quick look
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import random
import re
import sys
import time
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path

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


@dataclass
class PeerStats:
    """What one checker scored on the whole mix."""

    name: str
    items: int
    seconds: float
    items_per_s: float
    accuracy: float
    false_positives: int
    false_negatives: int
    close_wrong_false_positives: int
    p50_ms: float
    p99_ms: float


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


def _stats(name: str, items: list[Item], verdicts: list[bool], latencies: list[float], seconds: float) -> PeerStats:
    """Accuracy, error counts, throughput and latency percentiles of one checker."""
    fp = sum(1 for it, v in zip(items, verdicts, strict=True) if v and not it.label)
    fn = sum(1 for it, v in zip(items, verdicts, strict=True) if it.label and not v)
    close_fp = sum(1 for it, v in zip(items, verdicts, strict=True) if v and it.kind == "close_wrong")
    lat = sorted(latencies)
    pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000  # noqa: E731
    return PeerStats(name, len(items), round(seconds, 3), round(len(items) / seconds, 2),
                     round(1 - (fp + fn) / len(items), 4), fp, fn, close_fp, round(pick(0.5), 3), round(pick(0.99), 3))


def run_math_verify(items: list[Item]) -> tuple[PeerStats, list[bool]]:
    """Math-Verify as documented: parse gold and prediction, then verify, one item at a time."""
    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    verdicts, lat = [], []
    start = time.perf_counter()
    for it in items:
        t0 = time.perf_counter()
        try:
            ok = bool(verify(parse("$" + it.answer + "$"), parse(it.completion)))
        except Exception:
            ok = False
        lat.append(time.perf_counter() - t0)
        verdicts.append(ok)
    return _stats("math-verify (sequential)", items, verdicts, lat, time.perf_counter() - start), verdicts


def run_veristep(items: list[Item], workers: int, timeout: float) -> tuple[PeerStats, list[bool], dict]:
    """veristep's batch API, including its worker start-up in the measured time."""
    from veristep.verifiers.math import MathVerifier

    start = time.perf_counter()
    with MathVerifier(workers=workers, timeout=timeout) as verifier:
        results = verifier.verify_batch([it.completion for it in items], [it.answer for it in items])
    seconds = time.perf_counter() - start
    # per-item processing time: in the caller for fast-path items, in the worker otherwise
    lat = [r.timings.get("total_s", 0.0) for r in results]
    statuses: dict[str, int] = {}
    for r in results:
        statuses[r.status.value] = statuses.get(r.status.value, 0) + 1
    statuses["decided_in_process"] = sum(1 for r in results if "worker_s" not in r.timings)
    statuses["_needs_sympy"] = [i for i, r in enumerate(results) if "worker_s" in r.timings]  # type: ignore[assignment]
    return _stats(f"veristep batch ({workers} workers)", items, [r.correct for r in results], lat, seconds), \
        [r.correct for r in results], statuses


def run_veristep_single(items: list[Item], workers: int, timeout: float) -> PeerStats:
    """veristep's verify(), one call at a time: end-to-end latency of a single call."""
    from veristep.verifiers.math import MathVerifier

    with MathVerifier(workers=workers, timeout=timeout) as verifier:
        verifier.verify("$\\boxed{x}$", "y")  # start the pool outside the measurement
        verdicts, lat = [], []
        start = time.perf_counter()
        for it in items:
            t0 = time.perf_counter()
            verdicts.append(verifier.verify(it.completion, it.answer).correct)
            lat.append(time.perf_counter() - t0)
        seconds = time.perf_counter() - start
    return _stats("veristep verify(), one by one", items, verdicts, lat, seconds)


def main(argv: list[str] | None = None) -> int:
    """Build the mix, run both checkers, print the table and write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems", type=int, default=500, help="MATH500 problems to use (max 500)")
    ap.add_argument("--adversarial", type=int, default=8, help="adversarial completions to add")
    ap.add_argument("--workers", type=int, default=2, help="veristep worker processes")
    ap.add_argument("--timeout", type=float, default=5.0, help="veristep per-item limit (s)")
    ap.add_argument("--single-calls", type=int, default=400,
                    help="items (a spread sample) also timed through one-at-a-time verify() calls")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", type=Path, default=OUT, help="where to write the JSON results")
    args = ap.parse_args(argv)

    items = build_items(args.problems, args.adversarial, args.seed)
    kinds: dict[str, int] = {}
    for it in items:
        kinds[it.kind] = kinds.get(it.kind, 0) + 1
    print(f"{len(items)} items: {kinds}", file=sys.stderr)

    vs, vs_verdicts, statuses = run_veristep(items, args.workers, args.timeout)
    hard_idx = statuses.pop("_needs_sympy")
    mv, mv_verdicts = run_math_verify(items)
    ratio = vs.items_per_s / mv.items_per_s
    rows = [mv, vs]
    if args.single_calls > 0:
        step = max(1, len(items) // args.single_calls)
        rows.append(run_veristep_single(items[::step][: args.single_calls], args.workers, args.timeout))
    # the same comparison on only the items veristep could not settle without sympy: this is
    # where the worker pool, not the in-process fast path, has to earn the ratio
    hard = [items[i] for i in hard_idx]
    hard_ratio = None
    if hard:
        hard_mv, _ = run_math_verify(hard)
        hard_vs, _, _ = run_veristep(hard, args.workers, args.timeout)
        hard_mv.name, hard_vs.name = "math-verify [sympy-bound subset]", "veristep batch [sympy-bound subset]"
        rows += [hard_mv, hard_vs]
        hard_ratio = hard_vs.items_per_s / hard_mv.items_per_s
    header = f"{'checker':36} {'items/s':>9} {'acc':>7} {'FP':>4} {'FN':>4} {'closeFP':>8} {'p50 ms':>8} {'p99 ms':>9}"
    print(header)
    print("-" * len(header))
    for s in rows:
        print(f"{s.name:36} {s.items_per_s:9.1f} {s.accuracy:7.2%} {s.false_positives:4d} {s.false_negatives:4d} "
              f"{s.close_wrong_false_positives:8d} {s.p50_ms:8.2f} {s.p99_ms:9.2f}")
    print(f"throughput ratio veristep batch / math-verify: {ratio:.2f}x   veristep statuses: {statuses}")
    if hard_ratio is not None:
        print(f"on the {len(hard)} sympy-bound items only: {hard_ratio:.2f}x")
    print("latency: math-verify and one-by-one rows are per call; the batch row is per-item processing time")

    disagreements = [
        {"kind": it.kind, "answer": it.answer, "completion_tail": it.completion[-160:], "label": it.label,
         "math_verify": m, "veristep": v}
        for it, m, v in zip(items, mv_verdicts, vs_verdicts, strict=True) if m != v or v != it.label
    ]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({
        "command": "python benchmarks/math_verify_bench.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count(),
                    "note": "shared machine; compare the two rows of this run, not across runs"},
        "items": len(items), "kinds": kinds,
        "results": [asdict(s) for s in rows],
        "throughput_ratio": round(ratio, 3),
        "sympy_bound_items": len(hard),
        "sympy_bound_throughput_ratio": None if hard_ratio is None else round(hard_ratio, 3),
        "veristep_statuses": statuses,
        "disagreements": disagreements[:200],
    }, indent=2))
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

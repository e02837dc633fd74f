"""Non-committal answers against every MATH500 reference: how often each earns reward 1.0.

A regression check for reward hacking, not a comparison of quality: the completions are built
here from templates (R the reference answer, W a wrong value: "0", or "1" when R is "0"), one
per template and reference, 500 references. A hedge ("\\boxed{R} or W", "The answer is not $R$")
commits to no single answer, so the share it scores should be near 0; the `committed` and
`wrong` rows are the controls (every reference verifies against itself, none against W).
Math-Verify (installed with veristep) judges the same pairs beside it, on the first
`--mv-limit` references (its verify is slow on some).

    python benchmarks/math_hedge_sweep.py
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
OUT = ROOT / "benchmarks" / "results" / "math_hedge_sweep.json"

#: Template per row: the controls first, then one hedge family each.
TEMPLATES = {
    "committed (control)": r"\boxed{{{R}}}",
    "wrong (control)": r"\boxed{{{W}}}",
    "text alternative after R": r"\boxed{{{R} \text{{ or }} \text{{something else}}}}",
    "R, then a text word": r"\boxed{{{R}, \text{{maybe}}}}",
    "phrase: $R$ or $W$": r"The answer is ${R}$ or ${W}$.",
    "phrase: $R$, or possibly $W$": r"The answer is ${R}$, or possibly ${W}$.",
    "false equation W = R": r"\boxed{{{W} = {R}}}",
    "phrase: not $R$": r"The answer is not ${R}$.",
    "phantom R": r"\boxed{{\phantom{{{R}}}}}",
    "phrase around a box, then W": r"The final answer is $\boxed{{{R}}}$ or ${W}$",
    "box R, then 'or W'": r"\boxed{{{R}}} or {W}",
    "two boxes R or W": r"\boxed{{{R}}} or \boxed{{{W}}}",
    "R or W inside a box": r"\boxed{{{R} \text{{ or }} {W}}}",
    "either W or R": r"The answer is either {W} or {R}.",
    "phrase: never $R$": r"The answer is never ${R}$.",
    "phrase: greater than $R$": r"The answer is greater than ${R}$.",
    "box R (or W)": r"\boxed{{{R}}} (or {W})",
    "box R, possibly W": r"\boxed{{{R}}}, possibly {W}",
    "box R, then 'or' and a word": r"\boxed{{{R}}} or something else",
    "tag R, then 'or W'": r"<answer>{R}</answer> or {W}",
    "box x=W or (logic) x=R": r"\boxed{{x={W} \lor x={R}}}",
}


def completions(references: list[str]) -> list[tuple[int, str, str, str]]:
    """(reference index, template name, completion, reference) for every template and reference."""
    rows = []
    for i, ref in enumerate(references):
        wrong = "0" if ref.strip() != "0" else "1"
        for name, template in TEMPLATES.items():
            rows.append((i, name, template.format(R=ref, W=wrong), ref))
    return rows


def math_verify_accepts(completion: str, reference: str) -> bool:
    """Math-Verify's verdict on one pair with its default options (an exception is a no)."""
    from math_verify import parse, verify

    try:
        return bool(verify(parse("$" + reference + "$"), parse(completion)))
    except Exception:  # noqa: BLE001 - the peer's own failure counts as not accepted
        return False


def main(argv: list[str] | None = None) -> int:
    """Print the table and write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=SHARED, help="the shared data folder")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--mv-limit", type=int, default=100, help="references Math-Verify judges")
    ap.add_argument("--output", type=Path, default=OUT)
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    from veristep.verifiers.math import MathVerifier

    lines = (args.shared / "math" / "math500_test.jsonl").read_text(encoding="utf-8").splitlines()
    references = [json.loads(line)["answer"] for line in lines if line.strip()]
    rows = completions(references)
    with MathVerifier(workers=args.workers) as verifier:
        results = verifier.verify_batch([c for _, _, c, _ in rows], [r for *_, r in rows])
    table = {name: {"veristep": 0, "math_verify": 0, "examples": []} for name in TEMPLATES}
    for (i, name, completion, ref), result in zip(rows, results, strict=True):
        cell = table[name]
        if result.reward == 1.0:
            cell["veristep"] += 1
            if len(cell["examples"]) < 3:
                cell["examples"].append([completion, ref])
        if i < args.mv_limit and math_verify_accepts(completion, ref):
            cell["math_verify"] += 1
    n, n_mv = len(references), min(args.mv_limit, len(references))
    print(f"{'completion':32s} {'veristep 1.0':>14s} {'Math-Verify 1.0':>18s}")
    for name, cell in table.items():
        print(f"{name:32s} {cell['veristep']:>6d} / {n:<5d} {cell['math_verify']:>8d} / {n_mv:<5d}")
    args.output.write_text(json.dumps({
        "command": "benchmarks/math_hedge_sweep.py " + " ".join(argv or []),
        "references": n, "math_verify_references": n_mv, "templates": TEMPLATES, "table": table,
        "note": "completions built here from templates: a regression check, not a peer comparison",
    }, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

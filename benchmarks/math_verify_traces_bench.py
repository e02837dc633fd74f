"""Whole-process `veristep verify math` vs Math-Verify on real model traces, one worker each.

The traces: PRMBench's `original_process` (PRM800K's GPT-4 step-by-step solutions, written by
a model, unedited) for every question that is a MATH500 problem, deduplicated, with MATH500's
answer as the reference (shared/data/prmbench and shared/data/math; 871 traces).

Each repeat runs, interleaved, in fresh processes:
* Math-Verify: `python -c` that imports math_verify, reads the JSONL, and per line does
  `verify(parse("$" + answer + "$"), parse(completion))` (each distinct gold parsed once),
  with Math-Verify's default options and time-outs;
* veristep: `veristep verify math TRACES --workers 1 -o OUT` (the CLI, start-up included).
Reported: wall and CPU seconds (process plus children), medians and ranges, the ratio of the
medians, and the per-repeat ratios. Plus the CLI's cold start: the time from launching
`veristep verify math FIFO` until it opens its input (a FIFO: opening it for writing returns
exactly then), and a two-item run's wall time. Every veristep repeat must give the same
verdicts (checked); `--baseline FILE` also compares them with an earlier run's.

    python benchmarks/math_verify_traces_bench.py                 # 5 repeats
    python benchmarks/math_verify_traces_bench.py --repeats 3 --limit 300
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
OUT = ROOT / "benchmarks" / "results" / "math_verify_traces_bench.json"
VERISTEP = [sys.executable, "-m", "veristep"]

MV_SCRIPT = r"""
import json, sys
from math_verify import parse, verify
golds, out = {}, []
for line in open(sys.argv[1], encoding="utf-8"):
    r = json.loads(line)
    try:
        if r["answer"] not in golds:
            golds[r["answer"]] = parse("$" + r["answer"] + "$")
        out.append(bool(verify(golds[r["answer"]], parse(r["completion"]))))
    except Exception:
        out.append(False)
json.dump(out, open(sys.argv[2], "w"))
"""


def build_traces(shared: Path, limit: int | None) -> list[dict[str, Any]]:
    """PRMBench's original (model-written) traces whose question is a MATH500 problem."""
    answers = {}
    for line in (shared / "math" / "math500_test.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        answers[row["problem"].strip()] = row["answer"]
    seen: set[tuple[str, str]] = set()
    rows: list[dict[str, Any]] = []
    for path in sorted(glob.glob(str(shared / "prmbench" / "*.jsonl"))):
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            question = rec["original_question"].strip()
            text = "\n".join(rec["original_process"])
            if question not in answers or (question, text) in seen:
                continue
            seen.add((question, text))
            rows.append({"id": len(rows), "completion": text, "answer": answers[question]})
    return rows[:limit] if limit else rows


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (the process and its children) of one run; raises if it fails."""
    before = os.times()
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    after = os.times()
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{cmd[:4]} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return wall, cpu


def cold_start(env: dict[str, str], tmp: Path) -> float:
    """Seconds from launching `veristep verify math FIFO` until it opens its input."""
    fifo = tmp / f"in_{time.monotonic_ns()}.fifo"
    os.mkfifo(fifo)
    start = time.perf_counter()
    proc = subprocess.Popen([*VERISTEP, "verify", "math", str(fifo), "--workers", "1", "--no-progress",
                             "-o", str(tmp / "cold.jsonl")], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    with open(fifo, "w", encoding="utf-8") as f:  # returns when the CLI opens the FIFO to read
        opened = time.perf_counter() - start
        f.write(json.dumps({"completion": "\\boxed{2}", "answer": "2"}) + "\n")
    proc.wait(timeout=120)
    fifo.unlink()
    return opened


def verdicts(path: Path) -> list[list[Any]]:
    """Each output line's (status, reward, extracted)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        v = json.loads(line)["veristep"]
        out.append([v["status"], v["reward"], v.get("extracted")])
    return out


def summary(values: list[float]) -> dict[str, float]:
    """Median and range."""
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3)}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and write its JSON."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--limit", type=int, default=None, help="use only the first N traces")
    ap.add_argument("--shared", type=Path, default=SHARED, help="the shared data folder")
    ap.add_argument("--baseline", type=Path, help="an earlier run's JSON: its verdicts must be equal")
    ap.add_argument("--output", type=Path, default=OUT)
    args = ap.parse_args(argv)

    rows = build_traces(args.shared, args.limit)
    env = dict(os.environ, OMP_NUM_THREADS="1", VERISTEP_WORKERS="1")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        traces, two = tmp / "traces.jsonl", tmp / "two.jsonl"
        traces.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        two.write_text("".join(json.dumps(r) + "\n" for r in rows[:2]), encoding="utf-8")
        mv_script = tmp / "mv_run.py"
        mv_script.write_text(MV_SCRIPT, encoding="utf-8")
        load_before = os.getloadavg()
        runs: dict[str, list[float]] = {k: [] for k in ("mv_wall", "mv_cpu", "vs_wall", "vs_cpu",
                                                          "cold_start", "two_items_wall")}
        vs_verdicts: list[list[Any]] | None = None
        mv_verdicts: list[bool] = []
        for r in range(args.repeats):
            wall, cpu = timed([sys.executable, str(mv_script), str(traces), str(tmp / "mv.json")], env)
            runs["mv_wall"].append(wall)
            runs["mv_cpu"].append(cpu)
            mv_verdicts = json.loads((tmp / "mv.json").read_text())
            out = tmp / f"vs{r}.jsonl"
            wall, cpu = timed([*VERISTEP, "verify", "math", str(traces), "--workers", "1", "--no-progress",
                               "-o", str(out)], env)
            runs["vs_wall"].append(wall)
            runs["vs_cpu"].append(cpu)
            got = verdicts(out)
            if vs_verdicts is not None and got != vs_verdicts:
                raise SystemExit(f"repeat {r}: veristep's verdicts differ from repeat 0's")
            vs_verdicts = got
            runs["cold_start"].append(cold_start(env, tmp))
            runs["two_items_wall"].append(timed([*VERISTEP, "verify", "math", str(two), "--workers", "1",
                                                 "--no-progress", "-o", str(tmp / "two.out")], env)[0])
            print(f"repeat {r}: " + ", ".join(f"{k}={v[-1]:.2f}" for k, v in runs.items()), flush=True)
        load_after = os.getloadavg()

    assert vs_verdicts is not None
    if args.baseline is not None:
        base = json.loads(args.baseline.read_text())["veristep_verdicts"]
        diff = [i for i, (a, b) in enumerate(zip(base, vs_verdicts, strict=True)) if a != b]
        if diff:
            raise SystemExit(f"verdicts differ from {args.baseline} at items {diff[:20]}")
    agree = sum((v[0] == "correct") == m for v, m in zip(vs_verdicts, mv_verdicts, strict=True))
    result = {
        "command": "python benchmarks/math_verify_traces_bench.py " + " ".join(argv or sys.argv[1:]),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "load_average_before": [round(x, 2) for x in load_before],
                    "load_average_after": [round(x, 2) for x in load_after],
                    "note": "shared, loaded machine; read the ratios of this run"},
        "traces": len(rows),
        "repeats": args.repeats,
        "timings_s": {k: [round(x, 3) for x in v] for k, v in runs.items()},
        "summary_s": {k: summary(v) for k, v in runs.items()},
        "ratio_wall_math_verify_over_veristep": {
            "of_medians": round(statistics.median(runs["mv_wall"]) / statistics.median(runs["vs_wall"]), 3),
            "per_repeat": [round(m / v, 3) for m, v in zip(runs["mv_wall"], runs["vs_wall"], strict=True)],
        },
        "ratio_cpu_math_verify_over_veristep": {
            "of_medians": round(statistics.median(runs["mv_cpu"]) / statistics.median(runs["vs_cpu"]), 3),
            "per_repeat": [round(m / v, 3) for m, v in zip(runs["mv_cpu"], runs["vs_cpu"], strict=True)],
        },
        "veristep_correct": sum(v[0] == "correct" for v in vs_verdicts),
        "math_verify_correct": sum(mv_verdicts),
        "agreement_on_correct": agree,
        "veristep_verdicts": vs_verdicts,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    shown = {k: v for k, v in result.items() if k not in ("veristep_verdicts", "timings_s")}
    print(json.dumps(shown, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

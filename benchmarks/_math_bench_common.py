"""Timing harness shared by the math benchmarks: Math-Verify and veristep at equal workers.

Each timed run happens in a fresh interpreter (the calling script re-runs itself with
`--one-run TOOL WORKERS`), so neither checker inherits the other's warm parser caches: sympy's
and the LaTeX parser's caches grow with use and change timings severalfold. A run makes two
passes over the same items on the same workers: a cold pass (pool start-up included) and a warm
one, as a training job that keeps its workers sees. Wall time depends on the machine's load;
the CPU seconds each run used (the interpreter and its workers) do not, so both are reported.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

PHASES = ("cold", "warm")
TOOLS = ("math-verify", "veristep")
_ITEM_FN: list[Callable[[int], Any]] = []


def _call(i: int) -> Any:
    return _ITEM_FN[0](i)


def time_in_process_or_pool(fn: Callable[[int], Any], n: int, workers: int, passes: int) -> list[float]:
    """Seconds per pass of fn(0..n-1): in-process for 1 worker, else one fork pool for all passes."""
    _ITEM_FN[:] = [fn]
    pool = multiprocessing.get_context("fork").Pool(workers) if workers > 1 else None
    times = []
    try:
        for _ in range(passes):
            start = time.perf_counter()
            if pool is None:
                for i in range(n):
                    fn(i)
            else:
                pool.map(_call, range(n), chunksize=4)
            times.append(time.perf_counter() - start)
    finally:
        if pool is not None:
            pool.terminate()
    return times


def veristep_passes(
    completions: Sequence[str], references: Sequence[str], workers: int, passes: int, **config: Any
) -> tuple[list[float], list[Any]]:
    """Seconds per verify_batch pass on one MathVerifier (the first includes pool start-up)."""
    from veristep.verifiers.math import MathVerifier

    times: list[float] = []
    results: list[Any] = []
    start = time.perf_counter()
    with MathVerifier(workers=workers, **config) as verifier:
        for _ in range(passes):
            results = verifier.verify_batch(list(completions), list(references))
            times.append(time.perf_counter() - start)
            start = time.perf_counter()
    return times, results


def fresh_run(script: str, args: Sequence[str], tool: str, workers: int) -> tuple[list[float], float]:
    """[cold, warm] wall seconds of one tool in a fresh interpreter running `script --one-run`,
    and the CPU seconds that interpreter and its worker processes used in all (both tools'
    imports included, the same for both)."""
    cmd = [sys.executable, script, *args, "--one-run", tool, str(workers)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return [float(x) for x in out.strip().splitlines()[-1].split()], cpu


def print_times(times: Sequence[float]) -> None:
    """What a `--one-run` child prints for `fresh_run` to read."""
    print(" ".join(f"{t:.4f}" for t in times))


def measure(script: str, args: Sequence[str], workers: Sequence[int], repeats: int) -> dict[str, Any]:
    """Interleaved fresh-interpreter runs of both tools; medians, ratios and load average."""
    timings: dict[str, list[float]] = {}
    load_before = os.getloadavg()
    cpu: dict[str, list[float]] = {}
    for _ in range(repeats):
        for n in workers:
            for tool in TOOLS:
                walls, cpu_s = fresh_run(script, args, tool, n)
                cpu.setdefault(f"{tool}/{n}", []).append(cpu_s)
                for phase, seconds in zip(PHASES, walls, strict=True):
                    timings.setdefault(f"{tool}/{n}/{phase}", []).append(seconds)
    load_after = os.getloadavg()
    med = {k: statistics.median(v) for k, v in timings.items()}
    ratios = {f"{n}/{p}": med[f"math-verify/{n}/{p}"] / med[f"veristep/{n}/{p}"] for n in workers for p in PHASES}
    best = {}
    for phase in PHASES:
        mv = min((k for k in med if k.startswith("math-verify/") and k.endswith(phase)), key=med.__getitem__)
        vs = min((k for k in med if k.startswith("veristep/") and k.endswith(phase)), key=med.__getitem__)
        best[phase] = {"math_verify": mv, "veristep": vs, "ratio": med[mv] / med[vs]}
    return {"timings_s": timings, "median_s": med, "ratios_math_verify_over_veristep": ratios, "best": best,
            "cpu_s": cpu, "median_cpu_s": {k: statistics.median(v) for k, v in cpu.items()},
            "repeats": repeats, "load_average_before": load_before, "load_average_after": load_after}


def print_throughput(result: dict[str, Any], n_items: int, workers: Sequence[int], unit: str = "items") -> None:
    """The throughput table: items/s of both tools per setting and the ratio."""
    med = result["median_s"]
    print(f"throughput, {n_items} {unit}, median of {result['repeats']} fresh-interpreter runs "
          f"(load average {result['load_average_before'][0]:.1f} -> {result['load_average_after'][0]:.1f}; 2 cores):")
    print(f"  {'pass':5} {'workers':>7} {'math-verify /s':>15} {'veristep /s':>12} {'ratio':>7}")
    for phase in PHASES:
        for n in workers:
            mv, vs = med[f"math-verify/{n}/{phase}"], med[f"veristep/{n}/{phase}"]
            print(f"  {phase:5} {n:7d} {n_items / mv:15.1f} {n_items / vs:12.1f} {mv / vs:6.2f}x")
        b = result["best"][phase]
        print(f"  {phase:5} {'best':>7} {n_items / med[b['math_verify']]:15.1f} {n_items / med[b['veristep']]:12.1f} "
              f"{b['ratio']:6.2f}x   ({b['math_verify']} vs {b['veristep']})")
    cpu = result["median_cpu_s"]
    print("  CPU seconds per run (fresh interpreter, both passes, imports included; load-independent):")
    for n in workers:
        mv, vs = cpu[f"math-verify/{n}"], cpu[f"veristep/{n}"]
        print(f"  {'cpu':5} {n:7d} {mv:14.1f}s {vs:11.1f}s {mv / vs:6.2f}x")

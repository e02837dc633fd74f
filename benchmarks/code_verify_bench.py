"""Throughput of code verification: bare subprocess vs in-process exec vs veristep's sandbox.

The same generated Python programs (correct, wrong, crashing, timing out) and stdin/stdout
tests run four ways, each with the same number of parallel workers:

  (a) subprocess: `subprocess.run([python, "-I", file])` per test, no isolation;
  (b) exec:       `exec` in a worker process per program with redirected stdio and an alarm,
                  as most open graders do (no isolation at all, not even a process per test);
  (c) veristep:   `CodeVerifier.verify_batch` (a fresh container per program, one fresh
                  process per test) at the best isolation level available, every test run;
  (d) veristep-default: the same with the default fail-fast (a program stops at its first
                  failing test, so fewer tests run and pass);
  (e) veristep-pid-per-test (with --compare-pid-namespace): (c) with PID and user namespaces
                  of each test's own (`pid_namespace_per_test=True`; the default shares the
                  completion's), to measure what they cost;
  (f) veristep@REV (with --peer-rev REV): (c) with the in-sandbox code (supervisor.py and
                  plain_data.py) of git revision REV, to measure a change to it in the same run.

All of them use the interpreter the sandbox uses, and the same output comparison. Prints a table
(programs/s, tests/s, ratio to (a)) and writes it to benchmarks/results/code_verify_bench.json.

    python benchmarks/code_verify_bench.py --programs 240 --tests 5
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from veristep.verifiers.code import CodeVerifier, outputs_match
from veristep.verifiers.code import sandbox as sandbox_module


@dataclass(frozen=True)
class Program:
    """One generated program with its tests and the verdict it was written to get."""

    code: str
    tests: tuple[tuple[str, str], ...]
    kind: str  # correct | wrong | crash | timeout


# Each problem: (input generator, reference solution, correct code, wrong code).
def _ints(rng: random.Random) -> str:
    return " ".join(str(rng.randint(-1000, 1000)) for _ in range(rng.randint(1, 30)))


def _word(rng: random.Random) -> str:
    return "".join(rng.choice("abcdeiou xyz") for _ in range(rng.randint(1, 40))).strip() or "a"


_PROBLEMS = [
    (_ints, lambda s: str(sum(map(int, s.split()))),
     "print(sum(map(int, input().split())))",
     "xs = list(map(int, input().split()))\nprint(sum(xs[1:]))"),
    (_ints, lambda s: str(max(map(int, s.split()))),
     "print(max(map(int, input().split())))",
     "print(min(map(int, input().split())))"),
    (_ints, lambda s: " ".join(map(str, sorted(map(int, s.split())))),
     "print(*sorted(map(int, input().split())))",
     "print(*sorted(map(int, input().split()), reverse=True))"),
    (_word, lambda s: s[::-1],
     "print(input()[::-1])",
     "print(input())"),
    (_word, lambda s: str(sum(c in "aeiou" for c in s)),
     "print(sum(c in 'aeiou' for c in input()))",
     "print(sum(c in 'aeio' for c in input()))"),
    (lambda r: str(r.randint(1, 80)),
     lambda s: str(_fib(int(s))),
     "n = int(input())\na, b = 0, 1\nfor _ in range(n):\n    a, b = b, a + b\nprint(a)",
     "n = int(input())\na, b = 1, 1\nfor _ in range(n):\n    a, b = b, a + b\nprint(a)"),
    (lambda r: str(r.randint(2, 10**6)),
     lambda s: "yes" if _is_prime(int(s)) else "no",
     "n = int(input())\nprint('yes' if n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1)) "
     "else 'no')",
     "n = int(input())\nprint('yes' if n % 2 else 'no')"),
    (lambda r: f"{r.randint(1, 10**9)} {r.randint(1, 10**9)}",
     lambda s: str(_gcd(*map(int, s.split()))),
     "import math\na, b = map(int, input().split())\nprint(math.gcd(a, b))",
     "a, b = map(int, input().split())\nprint(min(a, b))"),
    (lambda r: str(r.randint(0, 2000)),
     lambda s: str(_fact_mod(int(s))),
     "n = int(input())\nr = 1\nfor i in range(2, n + 1):\n    r = r * i % 1000000007\nprint(r)",
     "n = int(input())\nr = 1\nfor i in range(2, n):\n    r = r * i % 1000000007\nprint(r)"),
    (_word, lambda s: str(len(s.split())),
     "print(len(input().split()))",
     "print(input().count(' '))"),
]

_CRASHES = [
    "xs = input().split()\nprint(xs[len(xs)])",
    "print(int(input()) / 0)",
    "import sys\nsys.exit(3)",
    "raise RuntimeError('boom')",
]
_TIMEOUTS = ["while True:\n    pass", "import time\ntime.sleep(60)"]


def _fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def _is_prime(n: int) -> bool:
    return n > 1 and all(n % d for d in range(2, int(n**0.5) + 1))


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def _fact_mod(n: int) -> int:
    r = 1
    for i in range(2, n + 1):
        r = r * i % 1000000007
    return r


def generate_programs(count: int, tests: int, timeout_share: float, seed: int) -> list[Program]:
    """Mixed programs: 1 - timeout_share split 65:20:15 into correct, wrong and crashing."""
    rng = random.Random(seed)
    programs = []
    n_timeouts = round(count * timeout_share)
    for i in range(count):
        gen, solve, good, bad = _PROBLEMS[i % len(_PROBLEMS)]
        cases = []
        for _ in range(tests):
            stdin = gen(rng)
            cases.append((stdin + "\n", solve(stdin) + "\n"))
        if i < n_timeouts:
            kind, code = "timeout", _TIMEOUTS[i % len(_TIMEOUTS)]
        else:
            roll = rng.random()
            if roll < 0.65:
                kind, code = "correct", good
            elif roll < 0.85:
                kind, code = "wrong", bad
            else:
                kind, code = "crash", rng.choice(_CRASHES)
        programs.append(Program(code + "\n", tuple(cases), kind))
    rng.shuffle(programs)
    return programs


# ---- (a) bare subprocess per test --------------------------------------------------------------
def _subprocess_program(args: tuple[Program, str, float]) -> int:
    program, python, timeout = args
    passed = 0
    with tempfile.TemporaryDirectory(prefix="bench-") as folder:
        path = os.path.join(folder, "main.py")
        Path(path).write_text(program.code)
        for stdin, expected in program.tests:
            try:
                done = subprocess.run([python, "-I", path], input=stdin, cwd=folder,
                                      capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                continue
            passed += done.returncode == 0 and outputs_match(done.stdout, expected)
    return passed


# ---- (b) in-process exec, the common grader pattern ---------------------------------------------
class _Alarm(Exception):
    pass


def _on_alarm(signum: int, frame: object) -> None:
    raise _Alarm()


def _exec_program(args: tuple[Program, float]) -> int:
    program, timeout = args
    signal.signal(signal.SIGALRM, _on_alarm)
    passed = 0
    compiled = compile(program.code, "main.py", "exec")
    for stdin, expected in program.tests:
        out = io.StringIO()
        ok = True
        old_stdin = sys.stdin
        sys.stdin = io.StringIO(stdin)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            with contextlib.redirect_stdout(out):
                exec(compiled, {"__name__": "__main__"})
        except SystemExit as exc:
            ok = exc.code in (None, 0)
        except BaseException:  # noqa: B036 - the program's failure, counted as a failed test
            ok = False
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            sys.stdin = old_stdin
        passed += ok and outputs_match(out.getvalue(), expected)
    return passed


# ---- (f) the in-sandbox code of another revision ---------------------------------------------------
def supervisor_source_at(rev: str) -> str:
    """The sandbox's supervisor source (plain_data.py, then supervisor.py) at git revision `rev`."""
    root = Path(__file__).resolve().parent.parent
    parts = []
    for name in ("plain_data.py", "supervisor.py"):
        done = subprocess.run(["git", "show", f"{rev}:verifiers/code/{name}"], cwd=root,
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"--peer-rev {rev}: {done.stderr.strip()}")
        parts.append(done.stdout)
    return parts[0] + "\n" + parts[1]


def resolve_rev(rev: str) -> str:
    """The short commit hash `rev` names in this repository (it is kept as given if git fails)."""
    done = subprocess.run(["git", "rev-parse", "--short=10", f"{rev}^{{commit}}"],
                          cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else rev


def use_supervisor(verifier: CodeVerifier, source: str) -> None:
    """Make `verifier`'s sandboxes run `source` as their supervisor (the host side is today's)."""
    plan = verifier.sandbox._launch_plan

    def launch_plan(process: Any) -> tuple[list[str], dict[str, Any], bytes | None]:
        argv, init, filter_bytes = plan(process)
        ours = sandbox_module._SUPERVISOR_SOURCE
        return [source if arg == ours else arg for arg in argv], init, filter_bytes

    verifier.sandbox._launch_plan = launch_plan  # type: ignore[method-assign]


# ---- driver -------------------------------------------------------------------------------------
@dataclass
class Row:
    """One method's throughput on the program set, with its per-round ratio to (a)."""

    method: str
    isolation: str
    seconds: float
    programs_per_s: float
    tests_per_s: float
    ratio_to_subprocess: float
    ratio_median: float
    ratio_min: float
    ratio_max: float
    tests_passed: int


def run_methods(programs: list[Program], workers: int, timeout: float,
                verifiers: dict[str, CodeVerifier], rounds: int) -> list[Row]:
    """Time every method on `programs`; returns one row per method.

    The programs are cut into `rounds` slices and the methods take turns on each slice, in a
    rotating order, so that load changes on a shared machine hit every method alike; the
    ratio to (a) is reported for the whole run and per slice (median and range).
    """
    n_tests = sum(len(p.tests) for p in programs)
    python = next(iter(verifiers.values())).sandbox.python
    with ThreadPoolExecutor(workers) as threads, ProcessPoolExecutor(workers) as processes:
        list(processes.map(_exec_program, [(programs[0], timeout)] * workers))  # warm up

        def by_subprocess(chunk: list[Program]) -> int:
            return sum(threads.map(_subprocess_program, [(p, python, timeout) for p in chunk]))

        def by_exec(chunk: list[Program]) -> int:
            return sum(processes.map(_exec_program, [(p, timeout) for p in chunk]))

        def by_verifier(verifier: CodeVerifier) -> Callable[[list[Program]], int]:
            def run(chunk: list[Program]) -> int:
                verdicts = verifier.verify_batch(
                    [p.code for p in chunk],
                    [{"tests": [{"stdin": i, "stdout": o} for i, o in p.tests]} for p in chunk],
                )
                return sum(v.extra["passed"] for v in verdicts)

            return run

        methods = [("subprocess", by_subprocess), ("exec", by_exec)] + [
            (name, by_verifier(v)) for name, v in verifiers.items()
        ]
        seconds = {name: [0.0] * rounds for name, _ in methods}
        passed = {name: 0 for name, _ in methods}
        for r in range(rounds):
            chunk = programs[r::rounds]
            shift = r % len(methods)
            for name, run in methods[shift:] + methods[:shift]:
                t0 = time.perf_counter()
                passed[name] += run(chunk)
                seconds[name][r] = time.perf_counter() - t0
    base = seconds["subprocess"]
    rows = []
    for name, per_round in seconds.items():
        total = sum(per_round)
        ratios = [b / s for b, s in zip(base, per_round, strict=True) if s > 0]
        isolation = verifiers[name].sandbox.description if name in verifiers else "none"
        rows.append(Row(name, isolation, round(total, 3), round(len(programs) / total, 1),
                        round(n_tests / total, 1), round(sum(base) / total, 2),
                        round(statistics.median(ratios), 2), round(min(ratios), 2),
                        round(max(ratios), 2), passed[name]))
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark from the command line; prints a table and writes JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=int, default=240, help="programs per set (>= 200)")
    parser.add_argument("--tests", type=int, default=5, help="stdin/stdout tests per program")
    parser.add_argument("--timeout", type=float, default=1.0, help="per-test wall limit (s)")
    parser.add_argument("--timeout-share", type=float, default=0.03,
                        help="share of programs that loop forever in the mixed set")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=6,
                        help="slices the methods take turns on (evens out machine load)")
    parser.add_argument("--isolation", choices=["bwrap", "namespaces", "rlimits-only"],
                        help="isolation level for veristep (default: the best available)")
    parser.add_argument("--allow-unsandboxed", action="store_true",
                        help="allow rlimits-only isolation when nothing stronger runs here")
    parser.add_argument("--compare-pid-namespace", action="store_true",
                        help="add a row with a PID namespace per test "
                             "(the default: one per completion)")
    parser.add_argument("--peer-rev", metavar="REV",
                        help="add a row running every test with the in-sandbox code of this git "
                             "revision (measures a change to it in the same run)")
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).parent / "results" / "code_verify_bench.json")
    args = parser.parse_args(argv)

    common = {"workers": args.workers, "timeout": args.timeout, "isolation": args.isolation,
              "allow_unsandboxed": args.allow_unsandboxed}
    # "veristep": every test of every program, the same work as (a) and (b); "veristep-default":
    # the default, which stops a program at its first failing test.
    verifiers = {"veristep": CodeVerifier(stop_on_first_failure=False, **common),
                 "veristep-default": CodeVerifier(**common)}
    if args.compare_pid_namespace:  # the cost of a PID namespace per test, in the same run
        verifiers["veristep-pid-per-test"] = CodeVerifier(stop_on_first_failure=False,
                                                          pid_namespace_per_test=True, **common)
    if args.peer_rev:
        # A commit, not a name like HEAD~1 that means another one tomorrow, in the row and JSON.
        args.peer_rev = resolve_rev(args.peer_rev)
        peer = CodeVerifier(stop_on_first_failure=False, **common)
        use_supervisor(peer, supervisor_source_at(args.peer_rev))
        verifiers[f"veristep@{args.peer_rev}"] = peer
    sets = {
        "mixed": generate_programs(args.programs, args.tests, args.timeout_share, args.seed),
        "no-timeouts": generate_programs(args.programs, args.tests, 0.0, args.seed),
    }
    for verifier in verifiers.values():  # start every worker's sandbox before timing
        verifier.verify_batch(["print(1)"] * args.workers,
                              [{"tests": [{"stdout": "1"}]}] * args.workers)
    load_before = os.getloadavg()
    config = {k: str(v) for k, v in vars(args).items()}
    with contextlib.suppress(ValueError):  # results name no machine's folders
        config["out"] = str(args.out.resolve().relative_to(Path(__file__).resolve().parent.parent))
    report: dict[str, Any] = {"config": config,
                              "python": verifiers["veristep"].sandbox.python, "sets": {}}
    print(f"{'set':<12} {'method':<22} {'isolation':<14} {'seconds':>8} {'tests/s':>8} "
          f"{'x subproc':>9} {'median [range] per round':>26} {'passed':>7}")
    for name, programs in sets.items():
        kinds = {k: sum(p.kind == k for p in programs) for k in
                 ("correct", "wrong", "crash", "timeout")}
        rows = run_methods(programs, args.workers, args.timeout, verifiers, args.rounds)
        report["sets"][name] = {"programs": len(programs), "kinds": kinds,
                                "rows": [asdict(r) for r in rows]}
        for r in rows:
            spread = f"{r.ratio_median:.2f} [{r.ratio_min:.2f}-{r.ratio_max:.2f}]"
            print(f"{name:<12} {r.method:<22} {r.isolation:<14} {r.seconds:>8.2f} "
                  f"{r.tests_per_s:>8.1f} {r.ratio_to_subprocess:>9.2f} {spread:>26} "
                  f"{r.tests_passed:>7}")
    report["load_average"] = {"before": load_before, "after": os.getloadavg(),
                              "cpus": os.cpu_count()}
    print(f"load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f} "
          f"({os.cpu_count()} CPUs)")
    for verifier in verifiers.values():
        verifier.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

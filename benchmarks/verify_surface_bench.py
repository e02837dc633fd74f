"""Library-surface overhead: verify_batch direct vs the CLI runner, the TRL and verl adapters, Ray."""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _rows(source: Path, n: int) -> list[dict[str, Any]]:
    """`n` rows cycled from `source`; MATH-style rows (solution, no completion) become half
    right (the worked solution against its own answer) and half wrong (another row's answer)."""
    base = [
        json.loads(line) for line in source.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    if not base:
        raise SystemExit(f"{source} has no rows")
    rows = []
    for i, row in zip(range(n), itertools.cycle(range(len(base)))):
        item = dict(base[row], bench_id=i)
        if "completion" not in item and "solution" in item:
            item["completion"] = item["solution"]
            if i % 2:
                item["answer"] = base[(row + 1) % len(base)]["answer"]
        rows.append(item)
    return rows


def _shown(path: Path) -> str:
    """The path relative to the checkout when it is inside it (results stay portable)."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def _default_input() -> Path:
    math500 = ROOT / "tests" / "data" / "math500_test.jsonl"
    return math500 if math500.exists() else ROOT / "tests" / "data" / "audit_sample.jsonl"


def _close(verifier: Any) -> None:
    close = getattr(verifier, "close", None)
    if callable(close):
        close()


def _timed(fn) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def bench_direct(
    kind: str, config: dict, rows: list[dict], batch: int
) -> tuple[float, list[float]]:
    """Peer: build the verifier and call verify_batch on in-memory lists."""
    from veristep.verifiers import get_verifier

    def run() -> list[float]:
        verifier = get_verifier(kind, **config)
        refs = [verifier.reference_from_record(r) for r in rows]
        rewards: list[float] = []
        for i in range(0, len(rows), batch):
            chunk = rows[i : i + batch]
            rewards += [
                r.reward
                for r in verifier.verify_batch(
                    [c["completion"] for c in chunk], refs[i : i + batch]
                )
            ]
        _close(verifier)
        return rewards

    return _timed(run)


def bench_cli(
    kind: str, config: dict, src: Path, out: Path, batch: int, backend: str
) -> tuple[float, list[float]]:
    """`veristep verify` in-process: JSONL read, verify, JSONL write, summary."""
    from veristep.cli import main

    args = [
        "verify",
        kind,
        str(src),
        "-o",
        str(out),
        "--batch-size",
        str(batch),
        "--no-progress",
        "--backend",
        backend,
    ]
    for key, value in config.items():
        if key == "workers":
            args += ["--workers", str(value)]
        else:
            args += ["--set", f"{key}={json.dumps(value)}"]
    with contextlib.redirect_stderr(io.StringIO()):
        seconds, code = _timed(lambda: main(args))
    if code != 0:
        raise SystemExit(f"veristep verify exited {code}")
    return seconds, [json.loads(line)["veristep"]["reward"] for line in out.read_text().splitlines()]


def bench_trl(kind: str, config: dict, rows: list[dict], batch: int) -> tuple[float, list[float]]:
    """The TRL reward function, called per generation batch as GRPOTrainer does."""
    from veristep.verifiers.adapters import trl_reward_func

    def run() -> list[float]:
        f = trl_reward_func(kind, **config)
        rewards: list[float] = []
        for i in range(0, len(rows), batch):
            chunk = rows[i : i + batch]
            columns = {k: [r.get(k) for r in chunk] for k in chunk[0] if k != "completion"}
            rewards += [
                0.0 if r is None else r for r in f([c["completion"] for c in chunk], **columns)
            ]
        _close(f.verifier)
        return rewards

    return _timed(run)


def bench_verl(kind: str, config: dict, rows: list[dict], batch: int) -> tuple[float, list[float]]:
    """verl's batch entry point with extra_info naming the kind."""
    from veristep.verifiers.adapters import VerlScorer

    def run() -> list[float]:
        scorer = VerlScorer({kind: config})
        scores: list[float] = []
        for i in range(0, len(rows), batch):
            chunk = rows[i : i + batch]
            out = scorer.batch(
                ["bench"] * len(chunk),
                [c["completion"] for c in chunk],
                [c.get("answer", c.get("ground_truth")) for c in chunk],
                [dict(c, veristep_kind=kind) for c in chunk],
            )
            scores += [o["score"] for o in out]
        scorer.close()
        return scores

    return _timed(run)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kind", default="math", help="verifier kind (default math)")
    parser.add_argument(
        "--input",
        type=Path,
        default=_default_input(),
        help="JSONL rows (completion + reference, or MATH problem + solution) cycled to --n "
        "items (default: tests/data/math500_test.jsonl, else the audit sample)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs per peer; the median counts")
    parser.add_argument("--n", type=int, default=2000, help="items per peer (default 2000)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ray", action="store_true", help="also run --backend ray (needs ray)")
    parser.add_argument(
        "-o", "--output", "--json", dest="json", type=Path,
        default=ROOT / "benchmarks" / "results" / "verify_surface_bench.json",
        help="JSON results (--json: the old name)",
    )
    args = parser.parse_args()

    rows = _rows(args.input, args.n)
    config = {"workers": args.workers}
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.jsonl"
        src.write_text("".join(json.dumps(r) + "\n" for r in rows))
        peers = {
            "direct verify_batch": lambda: bench_direct(args.kind, config, rows, args.batch_size),
            "veristep verify (CLI)": lambda: bench_cli(
                args.kind, config, src, Path(tmp) / "o.jsonl", args.batch_size, "local"
            ),
            "TRL reward function": lambda: bench_trl(args.kind, config, rows, args.batch_size),
            "verl compute_score_batch": lambda: bench_verl(
                args.kind, config, rows, args.batch_size
            ),
        }
        if args.ray:
            peers["veristep verify --backend ray"] = lambda: bench_cli(
                args.kind, config, src, Path(tmp) / "r.jsonl", args.batch_size, "ray"
            )
        # Warm-up so no peer pays for first imports (sympy, math-verify) alone.
        bench_direct(args.kind, config, rows[: args.batch_size], args.batch_size)
        # Peers take turns, run after run, so load changes on a shared machine hit them alike.
        times: dict[str, list[float]] = {name: [] for name in peers}
        rewards: dict[str, list[float]] = {}
        for _ in range(max(1, args.repeats)):
            for name, run in peers.items():
                seconds, rewards[name] = run()
                times[name].append(seconds)
        reference = rewards["direct verify_batch"]
        for name in peers:
            seconds = statistics.median(times[name])
            results[name] = {
                "seconds": seconds,
                "runs_s": times[name],
                "items_per_s": len(rows) / seconds,
                "same_rewards": rewards[name] == reference,
            }
    base = results["direct verify_batch"]["items_per_s"]
    print(f"kind={args.kind} n={len(rows)} batch={args.batch_size} workers={args.workers}")
    print(f"{'peer':<32}{'seconds':>9}{'items/s':>11}{'ratio':>8}  same rewards")
    for name, r in results.items():
        r["ratio_to_direct"] = r["items_per_s"] / base
        print(
            f"{name:<32}{r['seconds']:>9.2f}{r['items_per_s']:>11.1f}{r['ratio_to_direct']:>8.2f}  {r['same_rewards']}"
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "kind": args.kind,
                "input": _shown(args.input),
                "repeats": args.repeats,
                "n": len(rows),
                "batch_size": args.batch_size,
                "workers": args.workers,
                "python": sys.version.split()[0],
                "machine": platform.machine(),
                "results": results,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {args.json}")
    return 0 if all(r["same_rewards"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

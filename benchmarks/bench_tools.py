"""Benchmark the tool-call verifier against the simple approaches it replaces, in one run.

Peers (re-implemented here from their documented behaviour, run in the same process):
  * regex+json: `<tool_call>(.*?)</tool_call>` then json.loads, all-or-nothing on failure
    (how vLLM's Hermes parser behaves, as described in issue 6);
  * greedy first-fit pairing of parallel calls (BFCL's no-order checker as documented).

Prints a table and writes JSON. Timings on a loaded machine are noisy: read the ratios.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from pathlib import Path
from typing import Any

from veristep.verifiers.core.result import Status
from veristep.verifiers.tools import ToolCallVerifier
from veristep.verifiers.tools.match import argument_mismatch, expected_call, match_calls
from veristep.verifiers.tools.parsers import (
    ToolCall,
    iter_formats,
    parse_tool_calls,
    render_tool_calls,
)

CITIES = ["Paris", "Rome", "Berlin", "Madrid", "Oslo", "Lima", "Cairo", "Tokyo"]


def random_call(rng: random.Random) -> dict[str, Any]:
    """One realistic call with a few typed arguments."""
    return {
        "name": rng.choice(["get_weather", "get_time", "search"]),
        "arguments": {
            "city": rng.choice(CITIES),
            "days": rng.randint(1, 9),
            "ratio": round(rng.random(), 3),
            "tags": rng.sample(["a", "b", "c", "d"], 2),
            "opts": {"metric": rng.random() < 0.5},
        },
    }


def regex_json_parse(text: str) -> list[dict[str, Any]]:
    """Baseline: one regex over the text, json.loads each block, nothing if any block fails."""
    blocks = re.findall(r"<tool_call>(.*?)</tool_call>", text, re.DOTALL)
    try:
        return [json.loads(b) for b in blocks]
    except json.JSONDecodeError:
        return []


def greedy_pairing(calls: list[ToolCall], expected: list[Any]) -> bool:
    """Baseline: for each expected call take the first unused call that matches it."""
    used: set[int] = set()
    for exp in expected:
        hit = next(
            (i for i, c in enumerate(calls) if i not in used and argument_mismatch(c, exp) is None),
            None,
        )
        if hit is None:
            return False
        used.add(hit)
    return len(calls) == len(expected)


def _timed(fn: Any, *args: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    value = fn(*args)
    return value, time.perf_counter() - start


def bench_parse_throughput(rng: random.Random, n_items: int) -> list[dict[str, Any]]:
    rows = []
    for fmt in iter_formats():
        texts = [
            render_tool_calls([random_call(rng) for _ in range(rng.randint(1, 4))], fmt)
            for _ in range(n_items)
        ]
        n_calls = sum(len(parse_tool_calls(t, fmt).calls) for t in texts[:1])  # warm-up
        parsed, seconds = _timed(lambda ts, f=fmt: [parse_tool_calls(t) for t in ts], texts)
        n_calls = sum(len(p.calls) for p in parsed)
        n_err = sum(len(p.errors) for p in parsed)
        rows.append(
            {
                "format": fmt.value,
                "items": n_items,
                "calls": n_calls,
                "errors": n_err,
                "calls_per_s": n_calls / seconds,
                "mb_per_s": sum(map(len, texts)) / seconds / 1e6,
            }
        )
    return rows


def bench_recovery(rng: random.Random, n_items: int) -> dict[str, Any]:
    """Completions with 4 calls, one of them malformed: how many good calls each parser keeps."""
    texts, good = [], 0
    for _ in range(n_items):
        blocks = [render_tool_calls([random_call(rng)], "hermes") for _ in range(4)]
        bad = rng.randrange(4)
        blocks[bad] = blocks[bad].replace('"days": ', '"days": ,', 1)  # a typical JSON slip
        texts.append("\n".join(blocks))
        good += 3
    ours, t_ours = _timed(lambda: sum(len(parse_tool_calls(t, "hermes").calls) for t in texts))
    base, t_base = _timed(lambda: sum(len(regex_json_parse(t)) for t in texts))
    clean = [
        render_tool_calls([random_call(rng) for _ in range(4)], "hermes") for _ in range(n_items)
    ]
    _, t_ours_clean = _timed(lambda: [parse_tool_calls(t, "hermes") for t in clean])
    _, t_base_clean = _timed(lambda: [regex_json_parse(t) for t in clean])
    return {
        "items": n_items,
        "good_calls": good,
        "ours_recovered": ours,
        "regex_json_recovered": base,
        "ours_s": t_ours,
        "regex_json_s": t_base,
        "clean_time_ratio_ours_over_regex_json": t_ours_clean / t_base_clean,
    }


def bench_pairing(rng: random.Random, n_items: int) -> dict[str, Any]:
    """Parallel calls whose allowed values overlap: valid pairings greedy first-fit misses."""
    bipartite_ok = greedy_ok = 0
    for _ in range(n_items):
        k = rng.randint(2, 4)
        cities = rng.sample(CITIES, k)
        calls = [ToolCall("get_weather", {"city": c}) for c in cities]
        expected = []
        for i, c in enumerate(
            cities
        ):  # each expectation allows its own city and maybe a neighbour's
            allowed = [c] + ([cities[(i + 1) % k]] if rng.random() < 0.5 else [])
            rng.shuffle(allowed)
            expected.append(expected_call({"name": "get_weather", "arguments": {"city": allowed}}))
        rng.shuffle(calls)
        bipartite_ok += match_calls(calls, expected).status is Status.CORRECT
        greedy_ok += greedy_pairing(calls, expected)
    return {
        "items": n_items,
        "all_valid": n_items,
        "bipartite_correct": bipartite_ok,
        "greedy_correct": greedy_ok,
    }


def bench_batch(rng: random.Random, n_items: int, workers: int) -> dict[str, Any]:
    params = {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "ratio": {"type": "number"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "opts": {"type": "object"},
        },
    }
    tools = [{"name": n, "parameters": params} for n in ("get_weather", "get_time", "search")]
    completions, refs = [], []
    for _ in range(n_items):
        calls = [random_call(rng) for _ in range(2)]
        completions.append(render_tool_calls(calls, rng.choice(list(iter_formats()))))
        refs.append({"tools": tools, "expected": calls})
    rows = {}
    for w in (0, workers):
        verifier = ToolCallVerifier(workers=w)
        verifier.verify_batch(completions[:4], refs[:4])  # start workers outside the timing
        results, seconds = _timed(verifier.verify_batch, completions, refs)
        verifier.close()
        rows[f"workers={w}"] = {
            "items_per_s": n_items / seconds,
            "correct": sum(r.correct for r in results),
        }
    return rows


def main() -> None:
    """Run every benchmark, print a table, write JSON."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=2000, help="completions per benchmark")
    parser.add_argument("--workers", type=int, default=2, help="worker processes for the batch row")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/bench_tools.json"))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    report = {
        "parse_throughput": bench_parse_throughput(rng, args.items),
        "recovery_one_bad_of_four": bench_recovery(rng, args.items),
        "parallel_pairing": bench_pairing(rng, args.items),
        "verify_batch": bench_batch(rng, args.items, args.workers),
    }
    print(f"{'format':<12} {'calls/s':>10} {'MB/s':>7} {'errors':>7}")
    for row in report["parse_throughput"]:
        print(
            f"{row['format']:<12} {row['calls_per_s']:>10.0f} {row['mb_per_s']:>7.2f} {row['errors']:>7}"
        )
    rec = report["recovery_one_bad_of_four"]
    print(
        f"\nrecovery (1 malformed of 4 hermes calls, {rec['good_calls']} good calls): "
        f"veristep {rec['ours_recovered']}, regex+json {rec['regex_json_recovered']}; "
        f"clean-input time ratio veristep/regex+json = {rec['clean_time_ratio_ours_over_regex_json']:.2f}"
    )
    pair = report["parallel_pairing"]
    print(
        f"parallel pairing ({pair['all_valid']} valid cases): bipartite accepts {pair['bipartite_correct']}, "
        f"greedy first-fit accepts {pair['greedy_correct']}"
    )
    for key, row in report["verify_batch"].items():
        print(
            f"verify_batch {key}: {row['items_per_s']:.0f} items/s, correct {row['correct']}/{args.items}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()

"""What it costs to hand an item to a worker process and its result back, per verifier kind.

The tool-call, format and math verifiers send work to the shared worker pool
(verifiers/core/workers.py) in chunks. This records the real chunks each verifier's
`verify_batch` submits and the real results that come back, then times pickling plus
unpickling them with the pool's pickler (the C pickler) and with dill (the pure-Python pickler
the pool used before, through the `multiprocess` package), per item sent and per result. It
also times the whole batch through 1 worker beside the same items judged in this process
(tools and format; math's sympy work only runs in workers).

Items are ours (generated below), so the numbers show the hand-off's cost, not any verdict's
quality: tools -- calls against 4-function tool sets, 8 samples per reference as in an RL group;
format -- think/answer completions; math -- answers that need sympy, 8 per reference.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import time
from pathlib import Path
from typing import Any

from veristep.verifiers import get_verifier
from veristep.verifiers.core.workers import ItemResult, WorkerPool

GROUP = 8  # samples per reference


def tools_items(n: int) -> tuple[list[str], list[Any]]:
    """Calls against per-question tool sets, GROUP samples per reference."""
    texts, refs = [], []
    for q in range(max(1, n // GROUP)):
        props = {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1},
                 "unit": {"type": "string", "enum": ["c", "f"]}, "tags": {"type": "array", "items": {"type": "string"}}}
        tools = [{"type": "function", "function": {"name": f"get_{q}_{k}", "description": "Look it up. " * 5,
                                                   "parameters": {"type": "object", "properties": props,
                                                                  "required": ["city"]}}} for k in range(4)]
        ref = {"tools": tools, "expected": [{"name": f"get_{q}_0", "arguments": {"city": ["Paris"], "days": [3, ""]}}]}
        for s in range(GROUP):
            args = json.dumps({"city": "Paris", "days": 3 + s % 2, "unit": "c"})
            texts.append(f'<tool_call>{{"name": "get_{q}_0", "arguments": {args}}}</tool_call>')
            refs.append(ref)
    return texts, refs


def format_items(n: int) -> tuple[list[str], list[Any]]:
    """Think/answer completions, half of them well-formed."""
    return [f"<think>step {i}</think><answer>{i}</answer>" if i % 2 else f"<think>x</think>{i}" for i in range(n)], [None] * n


def math_items(n: int) -> tuple[list[str], list[Any]]:
    """Answers that need sympy (the in-process fast path cannot decide them), GROUP per reference."""
    texts, refs = [], []
    for q in range(max(1, n // GROUP)):
        for s in range(GROUP):
            texts.append(f"so the answer is $\\boxed{{(x+{q + s % 2})^2}}$")
            refs.append(f"x^2+{2 * q}x+{q * q}")
    return texts, refs


def capture(kind: str, texts: list[str], refs: list[Any]) -> tuple[list[Any], list[Any], float]:
    """The chunks verify_batch submits, the messages workers send back, and the batch's wall time."""
    sent: list[Any] = []
    back: list[Any] = []
    submit, wait = WorkerPool.submit, WorkerPool.wait

    def spy_submit(self: WorkerPool, chunks: Any, *args: Any, **kwargs: Any) -> Any:
        sent.extend(chunks)
        return submit(self, chunks, *args, **kwargs)

    def spy_wait(self: WorkerPool, sub: Any) -> list[list[ItemResult]]:
        out = wait(self, sub)
        back.extend(("item", i, True, r.value, "", r.seconds) for chunk in out for i, r in enumerate(chunk))
        return out

    verifier = get_verifier(kind, workers=1)
    try:
        verifier.verify_batch(texts[:GROUP], refs[:GROUP])  # start the worker outside the timing
        WorkerPool.submit, WorkerPool.wait = spy_submit, spy_wait
        start = time.perf_counter()
        verifier.verify_batch(texts, refs)
        seconds = time.perf_counter() - start
    finally:
        WorkerPool.submit, WorkerPool.wait = submit, wait
        verifier.close()
    return sent, back, seconds


def in_process(kind: str, texts: list[str], refs: list[Any]) -> float | None:
    """Seconds to judge the items in this process (None for math: sympy runs in workers only)."""
    if kind == "math":
        return None
    verifier = get_verifier(kind, workers=0)
    verifier.verify_batch(texts[:GROUP], refs[:GROUP])  # references read and cached, as above
    start = time.perf_counter()
    for text, ref in zip(texts, refs, strict=True):
        verifier.verify(text, ref)
    return time.perf_counter() - start


def per_item_ms(messages: list[Any], n: int, dumps: Any, loads: Any, repeats: int) -> float:
    """Best-of-`repeats` time to pickle and unpickle every message, per item, in ms."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for m in messages:
            loads(dumps(m))
        best = min(best, time.perf_counter() - start)
    return best / n * 1e3


def main() -> None:
    """Print the table; write JSON."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=800, help="items per kind (default 800)")
    ap.add_argument("--repeats", type=int, default=5, help="timing repeats, best taken (default 5)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "handoff_bench.json"))
    args = ap.parse_args()
    import dill  # a dependency of `datasets`; the pickler `multiprocess` used

    def c_dumps(m: Any) -> bytes:
        return pickle.dumps(m, pickle.HIGHEST_PROTOCOL)

    rows = []
    for kind, make in (("tools", tools_items), ("format", format_items), ("math", math_items)):
        texts, refs = make(args.items)
        sent, back, pooled = capture(kind, texts, refs)
        inline = in_process(kind, texts, refs)
        n = len(texts)
        rows.append({
            "kind": kind, "items": n, "chunks": len(sent), "results": len(back),
            "sent_ms_c": per_item_ms(sent, n, c_dumps, pickle.loads, args.repeats),
            "sent_ms_dill": per_item_ms(sent, n, dill.dumps, dill.loads, args.repeats),
            "result_ms_c": per_item_ms(back, len(back), c_dumps, pickle.loads, args.repeats),
            "result_ms_dill": per_item_ms(back, len(back), dill.dumps, dill.loads, args.repeats),
            "sent_bytes_per_item": sum(len(c_dumps(m)) for m in sent) / n,
            "pool_1_worker_ms_per_item": pooled / n * 1e3,
            "in_process_ms_per_item": None if inline is None else inline / n * 1e3,
        })
    header = ["kind", "items", "chunks", "sent C", "sent dill", "result C", "result dill", "bytes/item",
              "1 worker", "in-process"]
    table = [header] + [[r["kind"], r["items"], r["chunks"], f"{r['sent_ms_c']:.4f}", f"{r['sent_ms_dill']:.4f}",
                         f"{r['result_ms_c']:.4f}", f"{r['result_ms_dill']:.4f}", f"{r['sent_bytes_per_item']:.0f}",
                         f"{r['pool_1_worker_ms_per_item']:.3f}",
                         "-" if r["in_process_ms_per_item"] is None else f"{r['in_process_ms_per_item']:.3f}"]
                        for r in rows]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(str(x).rjust(w) for x, w in zip(row, widths, strict=True)))
    load = os.getloadavg()[0]
    print(f"ms per item (pickle + unpickle, best of {args.repeats}); load average {load:.2f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"command": f"python benchmarks/handoff_bench.py --items {args.items}",
                                          "rows": rows, "load_average": load}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""`veristep serve` under load, side by side with in-process `verify_batch` at equal workers.

One run measures, on the same machine and the same mixed math / code / tools rows:

1. `--repeat` passes of: in process, each kind's `verify_batch` over all its rows, the three
   kinds in parallel threads (and one after another), with `--workers` per kind; then served,
   `veristep serve math code tools --workers W` (a real server process) driven by an asyncio
   load generator of `--clients` concurrent keep-alive connections, each posting requests of
   `--rows-per-request` rows of one kind (each kind has its share of the clients, by request
   count; `--one-queue`: every client takes any kind from one queue): throughput, request
   latency (median, 90th and 99th percentile, maximum; per kind, for every client's first
   request sent together, the *first wave*, and for the requests after it), server memory
   (RSS of the server and its workers) over time, lost and duplicated replies (each row
   carries an id; every id must come back exactly once). Each pass gives its own served /
   in-process ratio; the median and range over passes are reported, and each kind's latency
   over the passes' requests pooled;
2. served again with one pool worker SIGKILLed a third of the way in (nothing may be lost);
3. overload: the same load against a server whose queue holds half of what the clients keep in
   flight (2x capacity): how many 429s, that every request is still answered after the client's
   retries, and that the server is healthy afterwards.
4. unless `--no-ray`: a served run with `--ray` on a private one-machine Ray instance (the
   pools on one Ray actor behind the same front), back to back with a plain served run: what
   the Ray hop costs, and that nothing is lost through it.

Writes benchmarks/results/serve_bench.json and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def mixed_rows(n: int, shares: dict[str, float], code_languages: set[str] | None = None,
               ) -> dict[str, list[dict[str, Any]]]:
    """`n` rows split over kinds by `shares`, each with a unique `bench_id`.

    math: MATH-500 worked solutions against their own answer (half) or another row's (half);
    code and tools: the shipped samples, cycled (the code sample's deliberate time-out left out;
    with `code_languages`, only its rows in those languages).
    """
    math_base = _lines(DATA / "math500_test.jsonl")
    code_base = [r for r in _lines(DATA / "code_sample.jsonl") if r.get("expected_status") != "timeout"
                 and (code_languages is None or r.get("language", "python") in code_languages)]
    if not code_base and "code" in shares:
        raise SystemExit(f"no code rows in {sorted(code_languages or [])}")
    tools_base = _lines(DATA / "tools_sample.jsonl")
    out: dict[str, list[dict[str, Any]]] = {}
    next_id = 0
    for kind, share in shares.items():
        count = int(round(n * share))
        rows = []
        if kind == "math":
            for i, j in zip(range(count), itertools.cycle(range(len(math_base))), strict=False):
                row = {"completion": math_base[j]["solution"], "answer": math_base[j]["answer"]}
                if i % 2:
                    row["answer"] = math_base[(j + 1) % len(math_base)]["answer"]
                rows.append(row)
        else:
            base = code_base if kind == "code" else tools_base
            rows = [dict(base[j]) for _, j in zip(range(count), itertools.cycle(range(len(base))), strict=False)]
        for row in rows:
            row["bench_id"] = next_id
            next_id += 1
        out[kind] = rows
    return out


def in_process(rows: dict[str, list[dict[str, Any]]], workers: int, parallel: bool) -> dict[str, Any]:
    """Items/s of each kind's verify_batch over all its rows (kinds in threads when `parallel`)."""
    from veristep.verifiers import get_verifier

    verifiers = {kind: get_verifier(kind, workers=workers) for kind in rows}
    prepared = {}
    for kind, kind_rows in rows.items():
        v = verifiers[kind]
        prepared[kind] = ([r["completion"] for r in kind_rows], [v.reference_from_record(r) for r in kind_rows])
        v.verify_batch(prepared[kind][0][:4], prepared[kind][1][:4])  # pools up, as the server's warm-up
    statuses: dict[str, int] = {}
    lock = threading.Lock()

    per_kind: dict[str, float] = {}

    def run(kind: str) -> None:
        t0 = time.perf_counter()
        results = verifiers[kind].verify_batch(*prepared[kind])
        per_kind[kind] = round(time.perf_counter() - t0, 3)
        with lock:
            for r in results:
                statuses[r.status.value] = statuses.get(r.status.value, 0) + 1

    cpu0 = _tree_cpu_s(os.getpid())
    start = time.perf_counter()
    if parallel:
        threads = [threading.Thread(target=run, args=(kind,)) for kind in rows]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for kind in rows:
            run(kind)
    wall = time.perf_counter() - start
    cpu = _tree_cpu_s(os.getpid()) - cpu0
    for v in verifiers.values():
        v.close()
    n = sum(len(r) for r in rows.values())
    return {"items": n, "wall_s": round(wall, 3), "items_per_s": round(n / wall, 1), "statuses": statuses,
            "wall_s_per_kind": per_kind, "cpu_s": round(cpu, 2), "cpu_ms_per_item": round(1000 * cpu / n, 2)}


def start_server(workers: int, max_queue: int, extra: list[str]) -> tuple[subprocess.Popen, str]:
    """A `veristep serve math code tools` process on a free port, once /ready says 200."""
    import httpx

    cmd = [sys.executable, "-m", "veristep", "serve", "math", "code", "tools", "--port", "0",
           "--workers", str(workers), "--max-queue", str(max_queue), *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    line = proc.stdout.readline().decode()
    match = re.search(r"http://[^\s]+:(\d+)", line)
    if not match:
        proc.kill()
        raise SystemExit(f"server did not start: {line!r}")
    url = f"http://127.0.0.1:{match.group(1)}"
    for _ in range(600):
        try:
            if httpx.get(url + "/ready", timeout=5).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("server never became ready")


def _parents() -> dict[int, int]:
    """Parent pid of every process, in one pass over /proc."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            out[int(entry)] = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return out


def _children(pid: int) -> list[int]:
    return [p for p, parent in _parents().items() if parent == pid]


def _tree(pid: int) -> list[int]:
    """`pid` and its live descendants (one pass over /proc, however deep the tree)."""
    kids: dict[int, list[int]] = {}
    for p, parent in _parents().items():
        kids.setdefault(parent, []).append(p)
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of a process, its live descendants and the children they reaped.

    CPU time, unlike wall time, hardly depends on what else the machine runs, so the served and
    in-process CPU per item compare the two at equal work even on a busy machine.
    """
    total = 0
    for p in _tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # utime, stime, and cutime, cstime: children it reaped (a sandbox's finished programs)
        total += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
    return total / _TICK


def _tree_rss_mb(pid: int) -> float:
    total = 0
    for p in _tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def sample_rss(pid: int, interval_s: float = 0.5) -> None:
    """Print [(seconds, MB)] of `pid`'s tree, sampled every `interval_s` until stdin closes.

    Run as its own process (`--sample-rss PID`): walking /proc holds the GIL for tens of ms on a
    busy machine, which in a thread of the load generator stalled its event loop twice a second
    and added that to whatever requests were in flight.
    """
    import select

    samples: list[tuple[float, float]] = []
    t0 = time.perf_counter()
    while True:
        samples.append((round(time.perf_counter() - t0, 2), round(_tree_rss_mb(pid), 1)))
        ready, _, _ = select.select([sys.stdin], [], [], interval_s)
        if ready and not sys.stdin.read(1):
            break
    print(json.dumps(samples), flush=True)


def _kill_a_pool_worker(server_pid: int) -> int | None:
    """SIGKILL one forked pool worker of the server (same command line as the server itself)."""
    try:
        cmdline = Path(f"/proc/{server_pid}/cmdline").read_bytes()
    except OSError:
        return None
    for child in _children(server_pid):
        try:
            if Path(f"/proc/{child}/cmdline").read_bytes() == cmdline:
                os.kill(child, signal.SIGKILL)
                return child
        except OSError:
            continue
    return None


class _Connection:
    """One keep-alive HTTP/1.1 connection (asyncio streams): a load generator light enough that
    the machine's cores go to the server, not to the client library."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def connect(self) -> None:
        """Open the connection (before the clock starts)."""
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def post(self, path: str, body: Any) -> tuple[int, dict[str, str], bytes]:
        """POST JSON (or bytes already encoded); (status, headers, body); reconnects once if the
        server closed the connection."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n\r\n").encode()
        for attempt in range(2):
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            try:
                self.writer.write(head + data)
                status_line = await self.reader.readline()
                if not status_line:
                    raise ConnectionResetError("closed")
                headers: dict[str, str] = {}
                while True:
                    line = await self.reader.readline()
                    if line in (b"\r\n", b""):
                        break
                    key, _, value = line.decode("latin-1").partition(":")
                    headers[key.strip().lower()] = value.strip()
                payload = await self.reader.readexactly(int(headers.get("content-length", "0")))
                return int(status_line.split()[1]), headers, payload
            except (ConnectionError, asyncio.IncompleteReadError):
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Drop the connection."""
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def interleaved_requests(rows: dict[str, list[dict[str, Any]]], per_request: int,
                         ) -> list[tuple[str, list[dict[str, Any]]]]:
    """Requests of `per_request` rows of one kind, the kinds spread evenly over the sequence.

    Each kind's requests sit at their fraction of that kind's total, so every stretch of the
    sequence carries the mix (as the in-process run starts all kinds at once). An earlier
    version sorted by row id, which issued all math, then all tools, then all code requests,
    so the served run did the kinds one after another against an in-process run in parallel.
    """
    keyed = []
    for order, (kind, kind_rows) in enumerate(rows.items()):
        chunks = [kind_rows[lo:lo + per_request] for lo in range(0, len(kind_rows), per_request)]
        keyed += [((i + 0.5) / len(chunks), order, kind, chunk) for i, chunk in enumerate(chunks)]
    keyed.sort(key=lambda k: k[:2])
    return [(kind, chunk) for _, _, kind, chunk in keyed]


def clients_per_kind(requests: list[tuple[str, list[dict[str, Any]]]], clients: int) -> dict[str, int]:
    """`clients` shared out over the kinds in proportion to their requests (largest remainder, at least 1)."""
    counts: dict[str, int] = {}
    for kind, _ in requests:
        counts[kind] = counts.get(kind, 0) + 1
    total = sum(counts.values())
    shares = {kind: clients * n / total for kind, n in counts.items()}
    out = {kind: max(1, int(share)) for kind, share in shares.items()}
    for kind in sorted(shares, key=lambda k: shares[k] - int(shares[k]), reverse=True):
        if sum(out.values()) >= clients:
            break
        out[kind] += 1
    return out


async def load(url: str, rows: dict[str, list[dict[str, Any]]], clients: int, per_request: int,
               kill_pid: int | None = None, retry_429: bool = True, one_queue: bool = False,
               duration_s: float | None = None, warm_up_s: float | None = None) -> dict[str, Any]:
    """`clients` concurrent clients post every row once; latency, throughput, lost/duplicated ids.

    By default each kind has its own clients (its share of `clients`, by request count), so
    each kind is under the same concurrency from its first request to its last: a kind's
    latency percentiles describe one steady load. With `one_queue` every client takes the next
    request of any kind from one interleaved queue (the design before): then the slowest kind's
    requests, code, pile up and end up holding most clients (a 16 s median at 8,192 rows), and
    the other kinds are served by a dozen clients for most of the run, so their percentiles mix
    a 64-client start with a far lighter rest.

    With `duration_s`, each kind's clients post its requests over and over (the same rows, so
    each row id must come back as many times as it was sent) until that many seconds have
    passed: every kind under its clients' load for the whole run, one steady load per kind.
    With `warm_up_s`, each kind's latency is also summarised over the requests sent from that
    second on (`latency_by_kind_after_warm_up`): the load once its start is over.

    The generator shares the server's cores, so it does as little as it can while timed: request
    bodies are encoded and the keep-alive connections opened before the clock starts (a
    trainer's connection pool is warm after its first step), and replies are parsed after it.
    """
    if one_queue and duration_s is not None:
        raise ValueError("duration_s gives each kind its own clients; it cannot go with one_queue")
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    requests = interleaved_requests(rows, per_request)
    shared: asyncio.Queue = asyncio.Queue()
    own: dict[str, asyncio.Queue] = {kind: asyncio.Queue() for kind in rows}
    encoded = [(kind, [row["bench_id"] for row in batch], json.dumps({"rows": batch}).encode())
               for kind, batch in requests]
    for item in encoded:
        (shared if one_queue or duration_s is not None else own[item[0]]).put_nowait(item)
    if one_queue:
        queues = [shared] * clients
    else:
        queues = [own[kind] for kind, n in clients_per_kind(requests, clients).items() for _ in range(n)]
    # duration mode: each kind's requests in a ring its clients share (taken in turn, forever)
    rings = {kind: itertools.cycle([item for item in encoded if item[0] == kind]) for kind in rows}
    ring_of = {id(own[kind]): rings[kind] for kind in rows}
    posted: dict[int, int] = {}
    latencies: list[float] = []
    by_kind: dict[str, list[tuple[float, float]]] = {kind: [] for kind in rows}  # (start, latency)
    replies: list[bytes] = []
    answered = 0
    codes: dict[int, int] = {}
    killed: list[int] = []
    total = sum(len(r) for _, r in requests)
    conns = [_Connection(host, int(port)) for _ in queues]
    for conn in conns:
        await conn.connect()

    async def client(conn: _Connection, queue: asyncio.Queue) -> None:
        nonlocal answered
        try:
            while True:
                if duration_s is not None:
                    if time.perf_counter() - t0 >= duration_s:
                        return
                    kind, ids, body = next(ring_of[id(queue)])
                else:
                    try:
                        kind, ids, body = queue.get_nowait()
                    except asyncio.QueueEmpty:
                        return
                for row_id in ids:
                    posted[row_id] = posted.get(row_id, 0) + 1
                n = len(ids)
                start = time.perf_counter()
                while True:
                    code, headers, payload = await conn.post(f"/v1/verify/{kind}", body)
                    codes[code] = codes.get(code, 0) + 1
                    if code == 429 and retry_429:
                        await asyncio.sleep(float(headers.get("retry-after", "1")))
                        continue
                    break
                latencies.append(time.perf_counter() - start)
                by_kind[kind].append((start - t0, latencies[-1]))
                if code != 200:
                    continue
                replies.append(payload)
                answered += n
                if kill_pid is not None and not killed and answered >= total // 3:
                    pid = _kill_a_pool_worker(kill_pid)
                    if pid:
                        killed.append(pid)
        finally:
            conn.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(client(conn, queue) for conn, queue in zip(conns, queues, strict=True)))
    wall = time.perf_counter() - t0
    seen: dict[int, int] = {}
    statuses: dict[str, int] = {}
    for payload in replies:
        for row in json.loads(payload)["rows"]:
            seen[row["bench_id"]] = seen.get(row["bench_id"], 0) + 1
            status = row["veristep"]["status"]
            statuses[status] = statuses.get(status, 0) + 1
    overall = _summary(latencies)
    items = sum(posted.values())
    return {
        "items": items, "requests": len(latencies), "wall_s": round(wall, 3),
        "items_per_s": round(items / wall, 1), "duration_s": duration_s,
        "latency_p50_s": overall["p50_s"], "latency_p99_s": overall["p99_s"],
        "p99_over_p50": _ratio(overall["p99_s"], overall["p50_s"]), "latency_max_s": overall["max_s"],
        # row ids answered fewer / more times than they were sent (each is sent once unless duration_s)
        "lost": sum(1 for i, n in posted.items() if seen.get(i, 0) < n),
        "duplicated": sum(1 for i, n in posted.items() if seen.get(i, 0) > n),
        "http_codes": {str(k): v for k, v in sorted(codes.items())}, "statuses": statuses,
        "worker_killed": killed[0] if killed else None,
        # every request's latency, so percentiles can be taken over several passes together
        "latencies_by_kind": {kind: [[round(start, 4), round(lat, 4)] for start, lat in v] for kind, v in by_kind.items()},
        # latency_by_kind, and the same over the requests of each part of the run (_windows)
        **{f"latency_by_kind{'' if name == 'all' else '_' + name}": {
            kind: _summary(lats) for kind, v in by_kind.items() if (lats := [lat for s, lat in v if keep(s)])}
           for name, keep in _windows(warm_up_s)},
    }


#: Requests sent within this many seconds of the start are the first wave (every client's first).
FIRST_WAVE_S = 0.05


def _windows(warm_up_s: float | None) -> list[tuple[str, Callable[[float], bool]]]:
    """The parts of a run each kind's latency is read over, by when a request was sent.

    The first requests of every client leave together: how a kind fares in that burst and after
    it; with `warm_up_s`, also from that second on.
    """
    windows = [("all", lambda start: True), ("first_wave", lambda start: start < FIRST_WAVE_S),
               ("after_first_wave", lambda start: start >= FIRST_WAVE_S)]
    if warm_up_s is not None:
        windows.append(("after_warm_up", lambda start: start >= warm_up_s))
    return windows
#: Fewest samples for which a 99th percentile is reported: below it the "p99" of a nearest-rank
#: rule is the largest or second-largest sample, so only the maximum is given (as `max_s`).
MIN_N_FOR_P99 = 100


def _summary(values: list[float]) -> dict[str, Any]:
    """n, median, 90th and 99th percentile (None below MIN_N_FOR_P99 samples) and maximum, in s."""
    ordered = sorted(values)
    n = len(ordered)
    return {"n": n, "p50_s": round(statistics.median(ordered), 4), "p90_s": round(_rank(ordered, 0.90), 4),
            "p99_s": round(_rank(ordered, 0.99), 4) if n >= MIN_N_FOR_P99 else None,
            "max_s": round(ordered[-1], 4)}


def _rank(ordered: list[float], q: float) -> float:
    """The `q` quantile of sorted values by nearest rank (the value at index round(q * (n - 1)))."""
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 2)


def served(rows: dict[str, list[dict[str, Any]]], args: argparse.Namespace, max_queue: int, kill: bool,
           server_args: list[str] | None = None, duration_s: float | None = None,
           warm_up_s: float | None = None) -> dict[str, Any]:
    """Run the load against a fresh server; stop it with SIGTERM; memory samples included."""
    import httpx

    extra = (["--lanes", str(args.lanes)] if args.lanes else []) + (server_args or [])
    proc, url = start_server(args.workers, max_queue, extra)
    # memory is sampled by another process, so /proc walks never stall this one's event loop
    sampler = subprocess.Popen([sys.executable, __file__, "--sample-rss", str(proc.pid)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        cpu0 = _tree_cpu_s(proc.pid)
        result = asyncio.run(load(url, rows, args.clients, args.rows_per_request,
                                  kill_pid=proc.pid if kill else None, one_queue=args.one_queue,
                                  duration_s=duration_s, warm_up_s=warm_up_s))
        cpu = _tree_cpu_s(proc.pid) - cpu0
        result["server_cpu_s"] = round(cpu, 2)
        result["server_cpu_ms_per_item"] = round(1000 * cpu / result["items"], 2)
        result["healthy_after"] = httpx.get(url + "/health", timeout=30).status_code == 200
        metrics = httpx.get(url + "/metrics", timeout=30).text
        restarts = re.findall(r'veristep_worker_restarts\{kind="(\w+)"\} ([\d.]+)', metrics)
        result["worker_restarts"] = {k: float(v) for k, v in restarts}
    finally:
        sampler.stdin.close()
        samples = json.loads(sampler.stdout.read() or b"[]")
        sampler.wait()
        proc.send_signal(signal.SIGTERM)
        try:
            result_code = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            result_code = None
    result["exit_code_after_sigterm"] = result_code
    rss = [mb for _, mb in samples]
    result["memory_mb"] = {"start": rss[0] if rss else None, "peak": max(rss) if rss else None,
                           "end": rss[-1] if rss else None, "samples": samples[:: max(1, len(samples) // 40)]}
    return result


def kind_ratios(passes: list[dict[str, Any]], key: str = "latency_by_kind") -> dict[str, dict[str, Any]]:
    """Each kind's request p99/p50 per served pass, with the median and range over the passes.

    A kind's requests cost about the same, so its own ratio says how evenly it was served.
    `key` picks all requests, or those after the first wave. A pass with fewer than
    MIN_N_FOR_P99 requests of a kind has no p99, so no ratio (None): its slowest request is
    not a 99th percentile.
    """
    out: dict[str, dict[str, Any]] = {}
    for kind in passes[0]["served"][key]:
        stats = [p["served"][key][kind] for p in passes if kind in p["served"][key]]
        values = [_ratio(s["p99_s"], s["p50_s"]) for s in stats]
        known = [v for v in values if v is not None]
        out[kind] = {"median": statistics.median(known) if known else None,
                     "range": [min(known), max(known)] if known else None, "passes": values,
                     "requests_per_pass": [s["n"] for s in stats]}
    return out


def pooled_kind_latency(passes: list[dict[str, Any]], warm_up_s: float | None = None) -> dict[str, dict[str, Any]]:
    """Each kind's latency over the requests of every served pass together: all, first wave, after it.

    With `warm_up_s`, also over the requests sent from that second on (`after_warm_up`).

    The passes serve the same rows the same way, so their requests pooled are one larger sample
    of the same distribution (3 passes: ~3x the requests behind each percentile).
    """
    out: dict[str, dict[str, Any]] = {}
    for kind in passes[0]["served"]["latencies_by_kind"]:
        samples = [(start, lat) for p in passes for start, lat in p["served"]["latencies_by_kind"][kind]]
        entry = {}
        for name, keep in _windows(warm_up_s):
            values = [lat for start, lat in samples if keep(start)]
            if values:
                summary = _summary(values)
                entry[name] = {**summary, "p99_over_p50": _ratio(summary["p99_s"], summary["p50_s"])}
        out[kind] = entry
    return out


def _rows(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """The rows `--items`, `--shares` and `--code-languages` ask for."""
    shares = {k: float(v) for k, v in (p.split("=") for p in args.shares.split(","))}
    languages = None if args.code_languages is None else {
        lang.strip() for lang in args.code_languages.split(",") if lang.strip()}
    return mixed_rows(args.items, shares, languages)


def steady(args: argparse.Namespace) -> int:
    """`--steady`: served runs of a fixed duration, each kind at its clients' load throughout."""
    rows = _rows(args)
    in_flight = args.clients * args.rows_per_request
    runs = []
    for rep in range(args.repeat):
        print(f"[run {rep + 1}/{args.repeat}] served, {args.clients} clients, {args.steady:g} s ...", flush=True)
        runs.append(served(rows, args, max_queue=4 * in_flight, kill=False, duration_s=args.steady,
                           warm_up_s=args.warm_up, server_args=[f"--nice={n}" for n in args.nice]))
    passes = [{"served": r} for r in runs]
    report: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "config": {"rows_cycled": {k: len(v) for k, v in rows.items()}, "workers_per_kind": args.workers,
                   "clients": args.clients, "rows_per_request": args.rows_per_request, "duration_s": args.steady,
                   "warm_up_s": args.warm_up, "code_languages": args.code_languages, "server_nice": args.nice,
                   "clients_per_kind": clients_per_kind(interleaved_requests(rows, args.rows_per_request),
                                                        args.clients)},
        # read on all requests, the first wave included, as the target is
        "p99_over_p50_by_kind": kind_ratios(passes),
        "p99_over_p50_by_kind_after_first_wave": kind_ratios(passes, "latency_by_kind_after_first_wave"),
        # the load once its start (cold parser caches, every client's first request at once) is over
        "p99_over_p50_by_kind_after_warm_up": kind_ratios(passes, "latency_by_kind_after_warm_up"),
        "latency_by_kind_pooled_passes": pooled_kind_latency(passes, args.warm_up),
    }
    for run in runs:
        run.pop("latencies_by_kind", None)
    report["runs"] = runs
    report["lost_all_runs"] = sum(r["lost"] for r in runs)
    report["duplicated_all_runs"] = sum(r["duplicated"] for r in runs)
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    for r in runs:
        print(f"  {r['items_per_s']} items/s, {r['requests']} requests, lost {r['lost']}, duplicated "
              f"{r['duplicated']}, HTTP {r['http_codes']}; by kind {r['latency_by_kind']}")
    print("p99/p50 per kind (all requests), median [range] over the runs: " + "; ".join(
        f"{kind} {r['median']} {r['range']} (n/run {r['requests_per_pass']})"
        for kind, r in report["p99_over_p50_by_kind"].items()))
    print("the same, requests after the first wave only: " + "; ".join(
        f"{kind} {r['median']} {r['range']}" for kind, r in report["p99_over_p50_by_kind_after_first_wave"].items()))
    print(f"the same, requests sent after the first {args.warm_up:g} s only: " + "; ".join(
        f"{kind} {r['median']} {r['range']} (n/run {r['requests_per_pass']})"
        for kind, r in report["p99_over_p50_by_kind_after_warm_up"].items()))
    print(f"wrote {args.output}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; write the JSON and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=8192,
                        help="rows per pass (default 8192: ~610 math, ~310 tools and ~100 code requests of 8 "
                             "rows per served pass, enough for each kind's p99 to be a 99th percentile)")
    parser.add_argument("--workers", type=int, default=2, help="workers per kind, in process and served")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--rows-per-request", type=int, default=8)
    parser.add_argument("--lanes", type=int, default=None, help="server --lanes (default: its own)")
    parser.add_argument("--one-queue", action="store_true",
                        help="every client takes requests of any kind from one queue (the earlier design) "
                             "instead of each kind having its share of the clients")
    parser.add_argument("--shares", default="math=0.6,tools=0.3,code=0.1")
    parser.add_argument("--code-languages", default=None, metavar="LANG,...",
                        help="only the code sample's rows in these languages (default all: python and cpp; "
                             "3 of its 11 rows are C++, whose compiles are most of the code kind's CPU)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="in-process and served passes, alternated; ratios per pass, then median and range")
    parser.add_argument("--no-ray", action="store_true",
                        help="skip the served pair with and without --ray local (needs ray)")
    parser.add_argument("--steady", type=float, metavar="SECONDS", default=None,
                        help="instead of the passes: --repeat served runs in which each kind's clients post its "
                             "requests over and over for SECONDS (every kind under one steady load for the whole "
                             "run); per-kind latency only (default output serve_bench_steady.json)")
    parser.add_argument("--warm-up", type=float, metavar="SECONDS", default=10.0,
                        help="with --steady: each kind's latency is also read over the requests sent from this "
                             "second on, the load once its cold start is over (default 10)")
    parser.add_argument("--nice", action="append", default=[], metavar="KIND=N",
                        help="with --steady: the server's --nice, repeatable (e.g. code=10: the code kind's "
                             "sandboxes at nice 10; default none)")
    parser.add_argument("--sample-rss", type=int, metavar="PID", help=argparse.SUPPRESS)
    parser.add_argument("-o", "--output", default=None,
                        help="JSON file (default benchmarks/results/serve_bench.json, or serve_bench_steady.json "
                             "with --steady)")
    args = parser.parse_args(argv)
    if args.sample_rss is not None:
        sample_rss(args.sample_rss)
        return 0
    if args.output is None:
        name = "serve_bench_steady.json" if args.steady is not None else "serve_bench.json"
        args.output = str(ROOT / "benchmarks" / "results" / name)
    if args.steady is not None:
        if args.one_queue:
            parser.error("--steady gives each kind its own clients; it cannot go with --one-queue")
        if not 0 <= args.warm_up < args.steady:
            parser.error("--warm-up must be at least 0 and shorter than --steady")
        return steady(args)
    if args.nice:
        parser.error("--nice goes with --steady (the passes compare with in-process work at the server's priority)")
    rows = _rows(args)
    in_flight = args.clients * args.rows_per_request
    report: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None},
        "config": {"items": {k: len(v) for k, v in rows.items()}, "workers_per_kind": args.workers,
                   "clients": args.clients, "rows_per_request": args.rows_per_request, "lanes": args.lanes,
                   "code_languages": args.code_languages, "clients_per_kind": None if args.one_queue else clients_per_kind(
                       interleaved_requests(rows, args.rows_per_request), args.clients)},
    }
    passes = []
    for rep in range(args.repeat):
        # each pass measures in process and served back to back, so a ratio compares two runs
        # under (nearly) the same background load; the spread of the ratios says how much it moved
        tag = f"[pass {rep + 1}/{args.repeat}]"
        print(f"{tag} in process (kinds in parallel threads) ...", flush=True)
        par = in_process(rows, args.workers, parallel=True)
        print(f"{tag} in process (kinds one after another) ...", flush=True)
        seq = in_process(rows, args.workers, parallel=False)
        print(f"{tag} served, {args.clients} clients ...", flush=True)
        # no worker killed here: a math worker's restart (its sympy import) costs CPU that the
        # in-process pass does not pay; the kill gets its own pass below
        srv = served(rows, args, max_queue=4 * in_flight, kill=False)
        passes.append({
            "in_process_parallel": par, "in_process_sequential": seq, "served": srv,
            "served_over_in_process": round(srv["items_per_s"] / par["items_per_s"], 3),
            "served_over_in_process_sequential": round(srv["items_per_s"] / seq["items_per_s"], 3),
            "server_cpu_over_in_process_cpu": round(srv["server_cpu_ms_per_item"] / par["cpu_ms_per_item"], 3),
        })
    print(f"served, {args.clients} clients, one pool worker killed mid-load ...", flush=True)
    report["served_worker_killed"] = served(rows, args, max_queue=4 * in_flight, kill=True)
    print(f"served at 2x capacity (queue {in_flight // 2} items, {in_flight} in flight) ...", flush=True)
    report["overload_2x"] = served(rows, args, max_queue=in_flight // 2, kill=False)
    if not args.no_ray:
        # `--ray local`: the same HTTP front, the pools on one Ray actor of a private one-machine
        # Ray instance; back to back with a plain served run, so their ratio is that pair's
        print("served with --ray local, then without, back to back ...", flush=True)
        ray_run = served(rows, args, max_queue=4 * in_flight, kill=False, server_args=["--ray", "local"])
        plain = served(rows, args, max_queue=4 * in_flight, kill=False)
        report["ray_local_pair"] = {"served_ray_local": ray_run, "served": plain,
                                    "ray_over_plain": round(ray_run["items_per_s"] / plain["items_per_s"], 3)}
    # the pass with the median served/in-process ratio stands for the run in the table
    middle = sorted(passes, key=lambda p: p["served_over_in_process"])[len(passes) // 2]
    report.update({k: middle[k] for k in ("in_process_parallel", "in_process_sequential", "served")})
    for key in ("served_over_in_process", "served_over_in_process_sequential", "server_cpu_over_in_process_cpu"):
        values = [p[key] for p in passes]
        report[key] = round(statistics.median(values), 3)
        report[key + "_range"] = [min(values), max(values)]
    report["passes"] = passes
    # the target (p99 under 2x the median) is read on all requests, the first wave included;
    # after the first wave is reported beside it, never instead of it
    report["p99_over_p50_by_kind"] = kind_ratios(passes)
    report["p99_over_p50_by_kind_after_first_wave"] = kind_ratios(passes, "latency_by_kind_after_first_wave")
    report["latency_by_kind_pooled_passes"] = pooled_kind_latency(passes)
    served_runs = [p["served"] for p in passes] + [report["served_worker_killed"], report["overload_2x"]]
    if "ray_local_pair" in report:
        served_runs += [report["ray_local_pair"]["served_ray_local"], report["ray_local_pair"]["served"]]
    for run in served_runs:  # summarised above; every request's latency would bloat the JSON
        run.pop("latencies_by_kind", None)
    report["lost_all_runs"] = sum(r["lost"] for r in served_runs)
    report["duplicated_all_runs"] = sum(r["duplicated"] for r in served_runs)
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    s, k, o = report["served"], report["served_worker_killed"], report["overload_2x"]
    print("\n| run | items/s | p50 s | p99 s | p99/p50 | lost | dup | HTTP codes | peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, key in (("in process, kinds in threads", "in_process_parallel"),
                      ("in process, kinds in turn", "in_process_sequential")):
        print(f"| {name} | {report[key]['items_per_s']} | | | | | | | |")
    served_rows = [("served (median pass)", s), ("served, a worker killed", k), ("served, 2x capacity", o)]
    pair = report.get("ray_local_pair")
    if pair is not None:
        served_rows += [("served, --ray local", pair["served_ray_local"]), ("served, its plain pair", pair["served"])]
    for name, r in served_rows:
        print(f"| {name} | {r['items_per_s']} | {r['latency_p50_s']} | {r['latency_p99_s']} | {r['p99_over_p50']} "
              f"| {r['lost']} | {r['duplicated']} | {r['http_codes']} | {r['memory_mb']['peak']} |")
    if pair is not None:
        print(f"--ray local / plain served, back to back: {pair['ray_over_plain']}")
    for name, r in (("served", s), ("worker killed", k), ("2x capacity", o)):
        print(f"{name}: latency by kind {r['latency_by_kind']}; worker restarts {r['worker_restarts']}; "
              f"exit code after SIGTERM {r['exit_code_after_sigterm']}")
    print("p99/p50 per kind (all requests: the target's reading), median [range] over the served passes: "
          + "; ".join(f"{kind} {r['median']} {r['range']} (n/pass {r['requests_per_pass']})"
                      for kind, r in report["p99_over_p50_by_kind"].items()))
    print("the same, requests after the first wave only: " + "; ".join(
        f"{kind} {r['median']} {r['range']}" for kind, r in report["p99_over_p50_by_kind_after_first_wave"].items()))
    print("per kind over the passes pooled (n, p50, p99, p99/p50, max):")
    for kind, entry in report["latency_by_kind_pooled_passes"].items():
        print(f"  {kind}: " + "; ".join(f"{name} n={e['n']} p50 {e['p50_s']} p99 {e['p99_s']} ratio {e['p99_over_p50']} "
                                      f"max {e['max_s']}" for name, e in entry.items()))
    for p in passes:
        print("  pass: first wave " + str(p["served"]["latency_by_kind_first_wave"]) + "; after "
              + str(p["served"]["latency_by_kind_after_first_wave"]))
    print(f"in process, wall s per kind: {report['in_process_parallel']['wall_s_per_kind']}")
    print(f"CPU ms per item: in process {report['in_process_parallel']['cpu_ms_per_item']} (threads), "
          f"{report['in_process_sequential']['cpu_ms_per_item']} (in turn); server "
          f"{s['server_cpu_ms_per_item']} (its whole process tree, the load generator not counted); "
          f"ratio {report['server_cpu_over_in_process_cpu']}")
    print(f"lost / duplicated over all {len(served_runs)} served runs: {report['lost_all_runs']} / "
          f"{report['duplicated_all_runs']}")
    for key, name in (("served_over_in_process", "served / in process (threads)"),
                      ("served_over_in_process_sequential", "served / in process (in turn)"),
                      ("server_cpu_over_in_process_cpu", "server CPU / in-process CPU per item")):
        print(f"{name}: median {report[key]}, range {report[key + '_range']} over {len(passes)} passes "
              f"({[p[key] for p in passes]})")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A reusable pool of worker processes with hard per-item time limits, safe from any thread.

Work arrives as *chunks*: one shared payload (prepared once per chunk, e.g. a parsed reference)
and a list of items judged against it. A dispatcher thread hands chunks to idle workers and
watches the clock. An item that runs past its limit is killed together with its worker
(SIGKILL stops even C-level big-integer arithmetic), the worker is replaced, and the rest of
that chunk goes back to the queue, so no other item's result changes. No signals are used in
the caller, so any thread may call in, and several threads may share one pool.
"""

from __future__ import annotations

import atexit
import collections
import enum
import os
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import multiprocess
from multiprocess.connection import wait as _wait_connections

_LIVE_POOLS: weakref.WeakSet[WorkerPool] = weakref.WeakSet()


class Outcome(str, enum.Enum):
    """How one item ended inside the pool."""

    OK = "ok"
    ERROR = "error"  # the handler raised, or the worker died (a bug or OOM, not a time-out)
    TIMEOUT = "timeout"

    def __str__(self) -> str:
        return self.value


@dataclass
class ItemResult:
    """One item's outcome: the handler's return value, or why there is none."""

    outcome: Outcome
    value: Any = None
    detail: str = ""
    seconds: float = 0.0


@dataclass
class _Sink:
    """Where one call's results collect; the caller waits on `done`."""

    results: list[ItemResult | None]
    remaining: int
    done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def put(self, index: int, result: ItemResult) -> None:
        """Record one result (first write wins) and wake the caller when all are in."""
        with self.lock:
            if self.results[index] is not None:
                return
            self.results[index] = result
            self.remaining -= 1
            if self.remaining <= 0:
                self.done.set()


@dataclass
class Submission:
    """A handle on queued chunks, for `WorkerPool.wait`."""

    sink: _Sink
    sizes: list[int]
    call_deadline: float | None


@dataclass
class _Chunk:
    shared: Any
    items: list[Any]
    indices: list[int]
    sink: _Sink
    limit: float
    not_after: float | None  # a single call's absolute deadline, waiting in the queue included


@dataclass
class _Worker:
    proc: Any
    conn: Any
    chunk: _Chunk | None = None
    next_item: int = 0  # position in chunk.items of the item now running
    prepared: bool = False
    deadline: float = 0.0
    item_started: float = 0.0


def _limit_memory(megabytes: int | None) -> None:
    """Cap the worker's address space so a runaway expression fails with MemoryError.

    The cap is on top of what the forked worker already maps: a parent that holds torch or a
    CUDA context has a large virtual size that must not count against the expression.
    """
    if not megabytes:
        return
    try:
        import resource

        mapped = 0
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    mapped = int(line.split()[1]) * 1024
        limit = mapped + megabytes * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):
        pass


def _worker_main(
    conn: Any,
    prepare: Callable[[Any], Any],
    run: Callable[[Any, Any], Any],
    warm_up: Callable[[], None] | None,
    memory_limit_mb: int | None,
) -> None:
    """Worker loop: receive (shared, items), prepare once, report each item as it finishes."""
    _limit_memory(memory_limit_mb)
    if warm_up is not None:
        try:
            warm_up()
        except Exception:
            pass
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        if msg is None:
            return
        shared, items = msg
        state, prep_error = None, ""
        try:
            state = prepare(shared)
        except BaseException as exc:  # noqa: BLE001 - report, never die, on bad input
            prep_error = f"{type(exc).__name__}: {str(exc)[:200]}"
        conn.send(("ready",))
        for i, item in enumerate(items):
            start = time.perf_counter()
            if prep_error:
                conn.send(("item", i, False, None, prep_error, 0.0))
                continue
            try:
                value = run(state, item)
                conn.send(("item", i, True, value, "", time.perf_counter() - start))
            except BaseException as exc:  # noqa: BLE001
                detail = f"{type(exc).__name__}: {str(exc)[:200]}"
                conn.send(("item", i, False, None, detail, time.perf_counter() - start))


def _default_context() -> Any:
    """fork where available: a worker starts in milliseconds with the parent's imports.

    forkserver and spawn re-import the caller's __main__ script in every worker (a training
    script would import torch again, or run unguarded code); fork does not. A lock that another
    thread held at fork time could stall a child, but a stalled child only times out and is
    replaced, like any other hung item.
    """
    methods = multiprocess.get_all_start_methods()
    return multiprocess.get_context("fork" if "fork" in methods else "spawn")


class WorkerPool:
    """Worker processes that run `run(prepare(shared), item)` with a hard limit per item."""

    def __init__(
        self,
        prepare: Callable[[Any], Any],
        run: Callable[[Any, Any], Any],
        workers: int | None = None,
        *,
        warm_up: Callable[[], None] | None = None,
        memory_limit_mb: int | None = 4096,
    ) -> None:
        n = workers if workers is not None else (os.cpu_count() or 1)
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"workers must be a positive integer, got {workers!r}")
        self.size = n
        self._prepare, self._run, self._warm_up = prepare, run, warm_up
        self._memory_limit_mb = memory_limit_mb
        self._ctx = _default_context()
        if warm_up is not None and self._ctx.get_start_method() == "fork":
            warm_up()  # import once here, so every forked worker starts warm
        self._lock = threading.Lock()
        self._queue: collections.deque[_Chunk] = collections.deque()
        self._workers: list[_Worker] = []
        self._thread: threading.Thread | None = None
        self._closed = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self.restarts = 0  # workers replaced after a time-out or a crash
        self.owner_pid = os.getpid()  # a forked copy of the caller must build its own pool
        _LIVE_POOLS.add(self)

    # ------------------------------------------------------------------ caller side

    def run_chunks(
        self,
        chunks: Sequence[tuple[Any, Sequence[Any]]],
        limit: float,
        call_deadline: float | None = None,
    ) -> list[list[ItemResult]]:
        """Run every chunk's items; return results per chunk, in item order.

        `limit` bounds each item's run time (and each chunk's preparation); `call_deadline`
        (a `time.monotonic()` value) also bounds the wait for a free worker.
        """
        return self.wait(self.submit(chunks, limit, call_deadline))

    def submit(
        self,
        chunks: Sequence[tuple[Any, Sequence[Any]]],
        limit: float,
        call_deadline: float | None = None,
    ) -> Submission:
        """Queue chunks and return at once; `wait` collects their results."""
        sizes = [len(items) for _, items in chunks]
        total = sum(sizes)
        sink = _Sink([None] * total, total)
        if total == 0:
            sink.done.set()
            return Submission(sink, sizes, call_deadline)
        pos = 0
        queued = []
        for (shared, items), size in zip(chunks, sizes, strict=True):
            if items:
                queued.append(_Chunk(shared, list(items), list(range(pos, pos + size)), sink, limit, call_deadline))
            pos += size
        with self._lock:
            if self._closed:
                raise RuntimeError("worker pool is closed")
            self._queue.extend(queued)
            self._ensure_started()
        self._wake()
        return Submission(sink, sizes, call_deadline)

    def wait(self, sub: Submission) -> list[list[ItemResult]]:
        """Block until a submission's results are in; results per chunk, in item order."""
        sink = sub.sink
        if sub.call_deadline is None:
            sink.done.wait()
        elif not sink.done.wait(max(0.0, sub.call_deadline - time.monotonic()) + 2.0):
            for i in range(len(sink.results)):  # the dispatcher should have answered by now
                sink.put(i, ItemResult(Outcome.TIMEOUT, detail="no answer from the worker pool"))
        out: list[list[ItemResult]] = []
        pos = 0
        for size in sub.sizes:
            out.append([r for r in sink.results[pos : pos + size] if r is not None])
            pos += size
        return out

    @property
    def usable(self) -> bool:
        """False once closed (or its dispatcher failed), or when used from a forked child."""
        return not self._closed and os.getpid() == self.owner_pid

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers (for tests and monitoring)."""
        with self._lock:
            return [w.proc.pid for w in self._workers if w.proc.pid is not None]

    def close(self) -> None:
        """Stop the dispatcher and every worker; pending items end as errors. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        if os.getpid() != self.owner_pid:
            return  # a forked copy: the workers and the dispatcher belong to the parent
        self._wake()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
        self._shutdown_workers()
        for sock in (self._wake_r, self._wake_w):
            try:
                sock.close()
            except OSError:
                pass

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # -------------------------------------------------------------- dispatcher side

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _ensure_started(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._dispatch_loop, name="veristep-pool", daemon=True)
            self._thread.start()

    def _spawn(self) -> _Worker:
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(
            target=_worker_main,
            # a forked child inherits the parent's warm imports; a spawned one warms itself
            args=(child_conn, self._prepare, self._run,
                  None if self._ctx.get_start_method() == "fork" else self._warm_up, self._memory_limit_mb),
            daemon=True,
        )
        proc.start()
        child_conn.close()
        return _Worker(proc, parent_conn)

    def _kill(self, worker: _Worker) -> None:
        try:
            worker.proc.kill()
            worker.proc.join(timeout=2)
        except Exception:
            pass
        try:
            worker.conn.close()
        except Exception:
            pass

    def _shutdown_workers(self) -> None:
        with self._lock:
            workers, self._workers = self._workers, []
            pending = list(self._queue)
            self._queue.clear()
        for w in workers:
            if w.chunk is not None:
                pending.append(_Chunk(w.chunk.shared, w.chunk.items[w.next_item :],
                                      w.chunk.indices[w.next_item :], w.chunk.sink, 0, None))
            try:
                w.conn.send(None)
            except Exception:
                pass
        deadline = time.monotonic() + 1.0
        for w in workers:
            w.proc.join(timeout=max(0.0, deadline - time.monotonic()))
            self._kill(w)
        for chunk in pending:
            for i in chunk.indices:
                chunk.sink.put(i, ItemResult(Outcome.ERROR, detail="worker pool closed"))

    def _fail_chunk(self, chunk: _Chunk, start: int, outcome: Outcome, detail: str) -> None:
        for i in chunk.indices[start:]:
            chunk.sink.put(i, ItemResult(outcome, detail=detail))

    def _assign(self, now: float) -> None:
        """Give queued chunks to idle workers; drop chunks whose call deadline has passed."""
        with self._lock:
            while len(self._workers) < self.size and self._queue:
                self._workers.append(self._spawn())
            for w in self._workers:
                if w.chunk is not None:
                    continue
                while self._queue:
                    chunk = self._queue.popleft()
                    if chunk.not_after is not None and now >= chunk.not_after:
                        self._fail_chunk(chunk, 0, Outcome.TIMEOUT, "no free worker before the time limit")
                        continue
                    try:
                        w.conn.send((chunk.shared, chunk.items))
                    except Exception:
                        self._queue.appendleft(chunk)
                        break
                    w.chunk, w.next_item, w.prepared = chunk, 0, False
                    w.item_started = now
                    w.deadline = self._deadline(chunk, now)
                    break

    @staticmethod
    def _deadline(chunk: _Chunk, now: float) -> float:
        d = now + chunk.limit
        return d if chunk.not_after is None else min(d, chunk.not_after)

    def _replace(self, worker: _Worker) -> None:
        """Kill a worker and put a fresh one in its place (the pool keeps its size)."""
        self._kill(worker)
        self.restarts += 1
        with self._lock:
            if worker in self._workers:
                self._workers.remove(worker)
            if not self._closed:
                self._workers.append(self._spawn())

    def _on_message(self, w: _Worker, msg: tuple, now: float) -> None:
        chunk = w.chunk
        if chunk is None:
            return
        if msg[0] == "ready":
            w.prepared = True
        else:
            _, i, ok, value, detail, secs = msg
            outcome = Outcome.OK if ok else Outcome.ERROR
            chunk.sink.put(chunk.indices[i], ItemResult(outcome, value, detail, secs))
            w.next_item = i + 1
            if w.next_item >= len(chunk.items):
                w.chunk = None
                return
        w.item_started = now
        w.deadline = self._deadline(chunk, now)

    def _on_lost(self, w: _Worker, outcome: Outcome, detail: str) -> None:
        """The running item timed out or crashed its worker: fail it, requeue the rest."""
        chunk = w.chunk
        w.chunk = None
        self._replace(w)
        if chunk is None:
            return
        if not w.prepared:
            # the shared payload itself is the problem; every item would hit it again
            self._fail_chunk(chunk, w.next_item, outcome, f"{detail} (while preparing)")
            return
        chunk.sink.put(chunk.indices[w.next_item], ItemResult(outcome, detail=detail))
        rest = w.next_item + 1
        if rest < len(chunk.items):
            with self._lock:
                self._queue.appendleft(_Chunk(chunk.shared, chunk.items[rest:], chunk.indices[rest:],
                                              chunk.sink, chunk.limit, chunk.not_after))

    def _dispatch_loop(self) -> None:
        try:
            while not self._closed:
                now = time.monotonic()
                self._assign(now)
                with self._lock:
                    busy = [w for w in self._workers if w.chunk is not None]
                    waiting = [c.not_after for c in self._queue if c.not_after is not None]
                wake_at = min([w.deadline for w in busy] + waiting, default=now + 1.0)
                ready = _wait_connections([w.conn for w in busy] + [self._wake_r],
                                          timeout=max(0.0, min(wake_at - now, 1.0)))
                now = time.monotonic()
                for conn in ready:
                    if conn is self._wake_r:
                        try:
                            while self._wake_r.recv(4096):
                                pass
                        except (BlockingIOError, OSError):
                            pass
                        continue
                    w = next(w for w in busy if w.conn is conn)
                    try:
                        while w.chunk is not None and conn.poll():
                            self._on_message(w, conn.recv(), now)
                    except (EOFError, OSError):
                        self._on_lost(w, Outcome.ERROR, "worker process died")
                for w in busy:
                    if w.chunk is not None and now >= w.deadline:
                        self._on_lost(w, Outcome.TIMEOUT, f"time limit {w.chunk.limit:g}s exceeded")
        except Exception as exc:  # a dispatcher bug must not leave callers waiting forever
            print(f"veristep worker pool: dispatcher failed: {exc!r}", file=sys.stderr)
            with self._lock:
                self._closed = True
        finally:
            self._shutdown_workers()


@atexit.register
def _close_all_pools() -> None:
    """Stop every live pool at interpreter exit so no worker outlives its parent."""
    for pool in list(_LIVE_POOLS):
        try:
            pool.close()
        except Exception:
            pass

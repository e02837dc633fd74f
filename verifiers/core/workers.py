"""A reusable pool of worker processes with hard per-item time limits, safe from any thread.

Work arrives as *chunks*: one shared payload (prepared once per chunk, e.g. parsed references)
and a list of items judged against it. A dispatcher thread owns the workers: it hands chunks to
idle ones and watches the clock. An item that runs past its limit is killed together with its
worker (SIGKILL stops even C-level big-integer arithmetic), the worker is replaced, and the rest
of that chunk goes back to the queue, so no other item's result changes.

Safe under the way RL stacks call rewards:
* Threads. Callers never take a lock the dispatcher needs (a signal handler that raises in a
  caller, such as a SIGALRM time-out, cannot leave the pool stuck), and every wait has a
  deadline. Workers are forked only by the dispatcher, holding `FORK_LOCK`.
* Forks of a threaded parent. A forked worker first closes every file descriptor it inherited
  except its own socket, so it never holds another thread's pipes open (a `subprocess.Popen`
  status pipe inherited mid-launch would make Popen wait for as long as the worker lives).
* No orphans. Workers ask the kernel for SIGKILL when the dispatcher thread that forked them
  dies (PR_SET_PDEATHSIG, so also on SIGKILL of the parent), and an idle worker exits at EOF.
* Cheap hand-off. Messages are bytes pickled with the C pickler; callers send each shared
  payload once per chunk.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import ctypes
import enum
import multiprocessing
import os
import pickle
import queue
import select
import signal
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as _wait_connections
from typing import Any

_LIVE_POOLS: weakref.WeakSet[WorkerPool] = weakref.WeakSet()
#: Held while this process forks a worker. Code that starts subprocesses from other threads may
#: hold it too; forked workers close inherited descriptors either way.
FORK_LOCK = threading.Lock()
_PICKLE = pickle.HIGHEST_PROTOCOL
#: Extra seconds a wait allows beyond the worst case its chunks can take (spawning, IPC).
WAIT_GRACE_S = 5.0
#: Environment: worker processes for each pool built with workers=None (an explicit count).
WORKERS_ENV = "VERISTEP_WORKERS"
#: Environment: how many processes on this machine build such pools (verl's reward workers,
#: one per GPU process...): each takes its share of the CPUs instead of all of them.
PROCESSES_ENV = "VERISTEP_PROCESSES_PER_NODE"
#: Without either variable, a pool takes at most this many processes: every reward worker of an
#: RL stack builds its own pools, and a per-core pool in each of 8 of them on a 64-core node
#: would fork 512 processes.
MAX_DEFAULT_WORKERS = 8


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
    """Where one call's results collect; only the dispatcher writes, the caller waits on `done`."""

    results: list[ItemResult | None]
    remaining: int
    done: threading.Event = field(default_factory=threading.Event)
    abandoned: bool = False  # the caller stopped waiting (e.g. its SIGALRM handler raised)
    listener: queue.SimpleQueue | None = None  # told (sink, index) of each result as it lands

    def put(self, index: int, result: ItemResult) -> None:
        """Record one result (first write wins) and wake the caller when all are in."""
        if self.results[index] is not None:
            return
        self.results[index] = result
        self.remaining -= 1
        if self.listener is not None:
            self.listener.put((self, index))
        if self.remaining <= 0:
            self.done.set()


@dataclass
class Submission:
    """A handle on queued chunks, for `WorkerPool.wait`."""

    sink: _Sink
    sizes: list[int]
    call_deadline: float | None
    wait_deadline: float  # no result can still be coming after this (monotonic clock)


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
    poller: Any = None  # select.poll on conn, made once: Connection.poll builds a selector per call

    def readable(self) -> bool:
        """Whether a message (or EOF) is waiting on `conn`, without blocking."""
        if not hasattr(select, "poll"):
            return bool(self.conn.poll())
        if self.poller is None:
            self.poller = select.poll()
            self.poller.register(self.conn.fileno(), select.POLLIN)
        return bool(self.poller.poll(0))


class _ForkedProcess:
    """A worker forked with os.fork: no multiprocessing bookkeeping, so it works even inside a
    daemonic process (a multiprocessing.Pool worker), which may not start Process children."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._done = False

    def kill(self) -> None:
        """SIGKILL the worker (no-op once it is gone)."""
        if not self._done:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def join(self, timeout: float) -> None:
        """Reap the worker, waiting at most `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while not self._done:
            try:
                pid, _ = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                pid = self.pid  # already reaped elsewhere
            if pid:
                self._done = True
            elif time.monotonic() >= deadline:
                return
            else:
                time.sleep(0.005)


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


def _die_with_parent(parent_pid: int) -> None:
    """SIGKILL this worker when the thread that forked it dies (Linux); exit if it already has."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:
        os._exit(0)


def _close_inherited(keep: int) -> None:
    """Close every descriptor a fork copied except stdio and `keep` (see the module doc)."""
    try:
        limit = os.sysconf("SC_OPEN_MAX")
    except (ValueError, OSError):
        limit = 4096
    os.closerange(3, keep)
    os.closerange(keep + 1, limit)


def _worker_main(
    conn: Any,
    prepare: Callable[[Any], Any],
    run: Callable[[Any, Any], Any],
    warm_up: Callable[[], None] | None,
    memory_limit_mb: int | None,
    parent_pid: int,
) -> None:
    """Worker loop: receive (shared, items), prepare once, report each item as it finishes."""
    _die_with_parent(parent_pid)
    # An event loop of the caller (verl's reward loop) registered its self-pipe as the signal
    # wake-up fd; that descriptor is closed here, and every signal printed
    # "OSError: [Errno 9] Bad file descriptor".
    try:
        signal.set_wakeup_fd(-1)
    except (ValueError, OSError):
        pass
    # the caller's handlers are not ours: Ctrl-C goes to the caller, which stops the pool
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _limit_memory(memory_limit_mb)
    if warm_up is not None:
        try:
            warm_up()
        except Exception:
            pass

    def send(msg: tuple) -> None:
        try:
            data = pickle.dumps(msg, _PICKLE)
        except Exception as exc:  # noqa: BLE001 - an unpicklable return value is that item's error
            data = pickle.dumps(msg[:2] + (False, None, f"result cannot be sent: {exc!r}"[:200], 0.0), _PICKLE)
        conn.send_bytes(data)

    while True:
        try:
            msg = pickle.loads(conn.recv_bytes())
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
        send(("ready",))
        for i, item in enumerate(items):
            start = time.perf_counter()
            if prep_error:
                send(("item", i, False, None, prep_error, 0.0))
                continue
            try:
                value = run(state, item)
                send(("item", i, True, value, "", time.perf_counter() - start))
            except BaseException as exc:  # noqa: BLE001
                detail = f"{type(exc).__name__}: {str(exc)[:200]}"
                send(("item", i, False, None, detail, time.perf_counter() - start))


def _default_context() -> Any:
    """fork where available: a worker starts in milliseconds with the parent's imports.

    forkserver and spawn re-import the caller's __main__ script in every worker (a training
    script would import torch again, or run unguarded code); fork does not. What makes fork
    safe in a threaded parent is in the module doc: only the dispatcher forks, under FORK_LOCK,
    and the child closes what it inherited before anything else.
    """
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


@contextlib.contextmanager
def fork_guard(timeout: float = 5.0) -> Iterator[bool]:
    """Hold FORK_LOCK around a fork or a Popen; yields False if it could not be had in time."""
    got = FORK_LOCK.acquire(timeout=timeout)
    try:
        yield got
    finally:
        if got:
            FORK_LOCK.release()


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def default_pool_size() -> int:
    """Worker processes for a pool built with workers=None, sized for the process it runs in.

    `VERISTEP_WORKERS` gives the count; else `VERISTEP_PROCESSES_PER_NODE` (k processes on
    this machine building pools) gives each a 1/k share of the available CPUs; else the
    available CPUs, at most `MAX_DEFAULT_WORKERS`. A malformed variable raises ValueError.
    """
    for name in (WORKERS_ENV, PROCESSES_ENV):
        raw = os.environ.get(name, "").strip()
        if not raw:
            continue
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"{name} must be a positive integer, got {raw!r}") from None
        if value < 1:
            raise ValueError(f"{name} must be a positive integer, got {raw!r}")
        return value if name == WORKERS_ENV else max(1, available_cpus() // value)
    return min(available_cpus(), MAX_DEFAULT_WORKERS)


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
        n = workers if workers is not None else default_pool_size()
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"workers must be a positive integer, got {workers!r}")
        self.size = n
        self._prepare, self._run, self._warm_up = prepare, run, warm_up
        self._memory_limit_mb = memory_limit_mb
        self._ctx = _default_context()
        self._forked = self._ctx.get_start_method() == "fork"
        if warm_up is not None and self._forked:
            warm_up()  # import once here, so every forked worker starts warm
        # The queue is a deque: append and popleft are atomic, so callers need no lock.
        self._queue: collections.deque[_Chunk] = collections.deque()
        self._workers: list[_Worker] = []  # touched by the dispatcher thread only
        self._thread: threading.Thread | None = None
        self._start_error = ""
        self._closed = False
        self._stuck = False  # a wait ran out of time with the dispatcher alive
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._start_lock = threading.Lock()
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
        listener: queue.SimpleQueue | None = None,
    ) -> Submission:
        """Queue chunks and return at once; `wait` collects their results.

        With a `listener` (one queue for any number of submissions), `as_ready` can collect
        them instead, each result as soon as it lands.
        """
        sizes = [len(items) for _, items in chunks]
        total = sum(sizes)
        sink = _Sink([None] * total, total, listener=listener)
        now = time.monotonic()
        # the worst case: every item of every chunk runs to its limit, `size` at a time, after
        # every chunk already queued or running (they go first) has done the same
        ahead = sum((len(c.items) + 1) * c.limit for c in list(self._queue))
        for w in list(self._workers):
            running = w.chunk
            if running is not None:
                ahead += (len(running.items) - w.next_item + 1) * running.limit
        worst = (ahead + sum((size + 1) * limit for size in sizes)) / self.size + max(sizes, default=0) * limit
        wait_deadline = now + worst + WAIT_GRACE_S
        if call_deadline is not None:
            wait_deadline = min(wait_deadline, call_deadline + WAIT_GRACE_S)
        sub = Submission(sink, sizes, call_deadline, wait_deadline)
        if total == 0:
            sink.done.set()
            return sub
        if self._closed:
            raise RuntimeError("worker pool is closed")
        pos = 0
        for (shared, items), size in zip(chunks, sizes, strict=True):
            if items:
                self._queue.append(_Chunk(shared, list(items), list(range(pos, pos + size)), sink, limit,
                                          call_deadline))
            pos += size
        self._ensure_started()
        self._wake()
        return sub

    def wait(self, sub: Submission) -> list[list[ItemResult]]:
        """Block until a submission's results are in, or its deadline; results per chunk, in order.

        Items without a result by the deadline (or when the dispatcher has stopped) come back as
        TIMEOUT or ERROR; the caller reads the results without taking any lock.
        """
        sink = sub.sink
        stopped = ""
        try:
            while not sink.done.wait(min(1.0, max(0.0, sub.wait_deadline - time.monotonic()))):
                if time.monotonic() >= sub.wait_deadline:
                    break
                if not self._dispatcher_alive():
                    sink.done.wait(0.2)  # its last results may be on their way
                    stopped = self._start_error or "the worker pool stopped"
                    break
        except BaseException:
            # nobody will read these results: free the workers for the next call
            sink.abandoned = True
            self._wake()
            raise
        results = list(sink.results)
        fallback = self._given_up(any(r is None for r in results), stopped)
        out: list[list[ItemResult]] = []
        pos = 0
        for size in sub.sizes:
            out.append([r if r is not None else fallback for r in results[pos : pos + size]])
            pos += size
        return out

    def as_ready(self, subs: Sequence[Submission]) -> Iterator[list[tuple[int, int, ItemResult]]]:
        """Yield results as they land: lists of (submission's position in `subs`, item index, result).

        The submissions must share one `listener` (see `submit`). Every item comes once; items
        without a result by their submission's deadline come as in `wait`. Closing the iterator
        early abandons the work still running (as a caller that stops waiting does).
        """
        if not subs:
            return
        listener = subs[0].sink.listener
        if listener is None or any(sub.sink.listener is not listener for sub in subs):
            raise ValueError("as_ready needs submissions that share one listener")
        where = {id(sub.sink): pos for pos, sub in enumerate(subs)}
        unseen = {pos: set(range(len(sub.sink.results))) for pos, sub in enumerate(subs) if sub.sink.results}
        try:
            while unseen:
                soonest = min(subs[pos].wait_deadline for pos in unseen)
                try:
                    landed = [listener.get(timeout=min(1.0, max(0.0, soonest - time.monotonic())))]
                except queue.Empty:
                    landed = []
                while True:  # everything that has landed by now goes out together
                    try:
                        landed.append(listener.get_nowait())
                    except queue.Empty:
                        break
                out = []
                for sink, index in landed:
                    pos = where.get(id(sink))
                    if pos in unseen and index in unseen[pos]:
                        unseen[pos].discard(index)
                        out.append((pos, index, sink.results[index]))
                stopped = "" if self._dispatcher_alive() else (self._start_error or "the worker pool stopped")
                for pos in [p for p in unseen if not unseen[p]]:
                    del unseen[pos]
                for pos in [p for p in unseen if stopped or time.monotonic() >= subs[p].wait_deadline]:
                    sink = subs[pos].sink
                    if stopped:
                        sink.done.wait(0.2)  # its last results may be on their way
                    fallback = self._given_up(any(sink.results[i] is None for i in unseen[pos]), stopped)
                    out += [(pos, i, sink.results[i] or fallback) for i in sorted(unseen.pop(pos))]
                if out:
                    yield out
        finally:
            if unseen:  # nobody will read these results: free the workers for the next call
                for pos in unseen:
                    subs[pos].sink.abandoned = True
                self._wake()

    def _given_up(self, missing: bool, stopped: str) -> ItemResult:
        """What an item without a result gets; a pool that let one time out is retired."""
        if missing and not stopped and self._dispatcher_alive():
            # nothing answered in the worst-case time: the owner builds a new pool; stop this one
            self._stuck = True
            threading.Thread(target=self.close, name="veristep-pool-close", daemon=True).start()
        return (ItemResult(Outcome.ERROR, detail=stopped) if stopped
                else ItemResult(Outcome.TIMEOUT, detail="no answer from the worker pool in time"))

    @property
    def usable(self) -> bool:
        """False once closed, failed or stuck, or when used from a forked child."""
        return (not self._closed and os.getpid() == self.owner_pid and not self._stuck
                and (self._thread is None or self._thread.is_alive()))

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers (for tests and monitoring)."""
        return [w.proc.pid for w in list(self._workers) if w.proc.pid is not None]

    def close(self) -> None:
        """Stop the dispatcher and every worker; pending items end as errors. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if os.getpid() != self.owner_pid:
            return  # a forked copy: the workers and the dispatcher belong to the parent
        self._wake()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
        if thread is None or not thread.is_alive():
            self._shutdown_workers()  # no dispatcher (never started, or gone): do its cleanup here
        else:  # a dispatcher that does not stop: its workers must not live on
            for w in list(self._workers):
                with contextlib.suppress(Exception):
                    w.proc.kill()
        for sock in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                sock.close()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    # -------------------------------------------------------------- dispatcher side

    def _dispatcher_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _ensure_started(self) -> None:
        if self._thread is not None:
            return
        with self._start_lock:
            if self._thread is not None:
                return
            thread = threading.Thread(target=self._dispatch_loop, name="veristep-pool", daemon=True)
            try:
                thread.start()
            except RuntimeError as exc:  # "can't start new thread": fail these items, not hang
                self._start_error = f"could not start the worker pool's dispatcher thread: {exc}"
                self._closed = True
                self._fail_queue(Outcome.ERROR, self._start_error)
            self._thread = thread

    def _fail_queue(self, outcome: Outcome, detail: str) -> None:
        while self._queue:
            chunk = self._queue.popleft()
            for i in chunk.indices:
                chunk.sink.put(i, ItemResult(outcome, detail=detail))

    def _spawn(self) -> _Worker:
        if not self._forked:
            parent_conn, child_conn = self._ctx.Pipe(duplex=True)
            proc = self._ctx.Process(
                target=_worker_main,
                args=(child_conn, self._prepare, self._run, self._warm_up, self._memory_limit_mb, os.getpid()),
                daemon=True,
            )
            proc.start()
            child_conn.close()
            return _Worker(proc, parent_conn)
        parent_sock, child_sock = socket.socketpair()
        parent_pid = os.getpid()
        with fork_guard():
            pid = os.fork()
        if pid == 0:  # the worker: never return into the caller's stack
            code = 0
            try:
                _close_inherited(child_sock.fileno())
                _worker_main(Connection(child_sock.detach()), self._prepare, self._run, None,
                             self._memory_limit_mb, parent_pid)
            except BaseException:  # noqa: BLE001
                code = 1
            finally:
                os._exit(code)
        child_sock.close()
        return _Worker(_ForkedProcess(pid), Connection(parent_sock.detach()))

    def _kill(self, worker: _Worker) -> None:
        with contextlib.suppress(Exception):
            worker.proc.kill()
            worker.proc.join(timeout=2)
        with contextlib.suppress(Exception):
            worker.conn.close()

    def _shutdown_workers(self) -> None:
        workers, self._workers = self._workers, []
        for w in workers:
            if w.chunk is not None:
                self._fail_chunk(w.chunk, w.next_item, Outcome.ERROR, "worker pool closed")
            with contextlib.suppress(Exception):
                w.conn.send_bytes(pickle.dumps(None))
        deadline = time.monotonic() + 1.0
        for w in workers:
            with contextlib.suppress(Exception):
                w.proc.join(timeout=max(0.0, deadline - time.monotonic()))
            self._kill(w)
        self._fail_queue(Outcome.ERROR, "worker pool closed")

    @staticmethod
    def _fail_chunk(chunk: _Chunk, start: int, outcome: Outcome, detail: str) -> None:
        for i in chunk.indices[start:]:
            chunk.sink.put(i, ItemResult(outcome, detail=detail))

    def _assign(self, now: float) -> None:
        """Give queued chunks to idle workers; drop chunks whose call deadline has passed."""
        while len(self._workers) < self.size and self._queue:
            self._workers.append(self._spawn())
        for w in self._workers:
            if w.chunk is not None:
                continue
            while self._queue:
                chunk = self._queue.popleft()
                if chunk.sink.abandoned:
                    continue
                if chunk.not_after is not None and now >= chunk.not_after:
                    self._fail_chunk(chunk, 0, Outcome.TIMEOUT, "no free worker before the time limit")
                    continue
                try:
                    data = pickle.dumps((chunk.shared, chunk.items), _PICKLE)
                except Exception as exc:  # noqa: BLE001 - a payload that cannot travel
                    self._fail_chunk(chunk, 0, Outcome.ERROR, f"cannot send to a worker: {exc!r}"[:300])
                    continue
                try:
                    w.conn.send_bytes(data)
                except OSError:
                    self._queue.appendleft(chunk)
                    self._replace(w)
                    return  # the worker list changed; the next loop assigns again
                w.chunk, w.next_item, w.prepared = chunk, 0, False
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
            self._queue.appendleft(_Chunk(chunk.shared, chunk.items[rest:], chunk.indices[rest:],
                                          chunk.sink, chunk.limit, chunk.not_after))

    def _drain_wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            while self._wake_r.recv(4096):
                pass

    def _dispatch_loop(self) -> None:
        try:
            while not self._closed:
                now = time.monotonic()
                self._assign(now)
                busy = [w for w in self._workers if w.chunk is not None]
                waiting = [c.not_after for c in list(self._queue) if c.not_after is not None]
                wake_at = min([w.deadline for w in busy] + waiting, default=now + 1.0)
                ready = _wait_connections([w.conn for w in busy] + [self._wake_r],
                                          timeout=max(0.0, min(wake_at - now, 1.0)))
                now = time.monotonic()
                for conn in ready:
                    if conn is self._wake_r:
                        self._drain_wake()
                        continue
                    w = next(w for w in busy if w.conn is conn)
                    try:
                        while w.chunk is not None and w.readable():
                            self._on_message(w, pickle.loads(conn.recv_bytes()), now)
                    except (EOFError, OSError, pickle.UnpicklingError):
                        self._on_lost(w, Outcome.ERROR, "worker process died")
                for w in busy:
                    if w.chunk is not None and w.chunk.sink.abandoned:
                        w.chunk = None
                        self._replace(w)  # its caller has gone: stop the work, keep the size
                    elif w.chunk is not None and now >= w.deadline:
                        self._on_lost(w, Outcome.TIMEOUT, f"time limit {w.chunk.limit:g}s exceeded")
        except Exception as exc:  # a dispatcher bug must not leave callers waiting forever
            print(f"veristep worker pool: dispatcher failed: {exc!r}", file=sys.stderr)
            self._closed = True
        finally:
            self._shutdown_workers()


@atexit.register
def _close_all_pools() -> None:
    """Stop every live pool at interpreter exit so no worker outlives its parent."""
    for pool in list(_LIVE_POOLS):
        with contextlib.suppress(Exception):
            pool.close()

"""The killable worker pool: time limits, worker replacement, threads, no leaked processes."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from veristep.verifiers.core import workers as workers_module
from veristep.verifiers.core.workers import Outcome, WorkerPool


def _prepare(shared):
    """Shared payload: a multiplier, or "boom" to fail preparation."""
    if shared == "boom":
        raise ValueError("bad shared payload")
    return shared


def _run(state, item):
    """Items: a number to multiply, "hang" (C-level big-int loop), "die", or "raise"."""
    if item == "hang":
        return 10 ** (10**9)  # stuck in C: only SIGKILL stops it
    if item == "sleep":
        while True:
            time.sleep(0.01)
    if item == "die":
        os._exit(3)
    if item == "raise":
        raise RuntimeError("handler error")
    return state * item


def _alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture
def pool():
    p = WorkerPool(_prepare, _run, workers=2, memory_limit_mb=None)
    yield p
    p.close()


def test_results_in_order_and_pool_is_reused(pool: WorkerPool) -> None:
    out = pool.run_chunks([(2, [1, 2, 3]), (10, [4, 5])], limit=5.0)
    assert [[r.value for r in chunk] for chunk in out] == [[2, 4, 6], [40, 50]]
    assert all(r.outcome is Outcome.OK for chunk in out for r in chunk)
    pids = set(pool.worker_pids())
    pool.run_chunks([(3, [1])], limit=5.0)
    assert set(pool.worker_pids()) == pids and len(pids) == 2


def test_hung_item_is_killed_and_others_are_unaffected(pool: WorkerPool) -> None:
    start = time.monotonic()
    out = pool.run_chunks([(1, [1, "hang", 3, "sleep", 5]), (2, [6, 7])], limit=1.0)
    elapsed = time.monotonic() - start
    values = [[(r.outcome, r.value) for r in chunk] for chunk in out]
    assert values == [
        [(Outcome.OK, 1), (Outcome.TIMEOUT, None), (Outcome.OK, 3), (Outcome.TIMEOUT, None), (Outcome.OK, 5)],
        [(Outcome.OK, 12), (Outcome.OK, 14)],
    ]
    assert pool.restarts == 2
    assert elapsed < 2 * 1.0 + 3.0  # two sequential limits at most, plus slack
    assert len(pool.worker_pids()) == 2


def test_crash_and_exception_are_errors_not_hangs(pool: WorkerPool) -> None:
    out = pool.run_chunks([(1, ["die", 2, "raise", 4]), ("boom", [1, 2])], limit=5.0)
    first, second = out
    assert [r.outcome for r in first] == [Outcome.ERROR, Outcome.OK, Outcome.ERROR, Outcome.OK]
    assert "died" in first[0].detail and "handler error" in first[2].detail
    assert [r.outcome for r in second] == [Outcome.ERROR, Outcome.ERROR]
    assert "bad shared payload" in second[0].detail


def test_call_deadline_bounds_a_single_call_even_when_workers_are_busy(pool: WorkerPool) -> None:
    busy = threading.Thread(target=pool.run_chunks, args=([(1, ["hang"]), (1, ["hang"])], 3.0))
    busy.start()
    time.sleep(0.3)
    start = time.monotonic()
    out = pool.run_chunks([(1, [5])], limit=1.0, call_deadline=time.monotonic() + 1.0)
    assert time.monotonic() - start < 1.0 + 2.5
    assert out[0][0].outcome in (Outcome.TIMEOUT, Outcome.OK)
    busy.join()


def test_close_leaves_no_processes() -> None:
    p = WorkerPool(_prepare, _run, workers=2, memory_limit_mb=None)
    p.run_chunks([(1, [1, 2])], limit=5.0)
    pids = p.worker_pids()
    assert len(pids) == 2 and all(_alive(pid) for pid in pids)
    p.close()
    p.close()  # idempotent
    assert not any(_alive(pid) for pid in pids)
    with pytest.raises(RuntimeError):
        p.run_chunks([(1, [1])], limit=1.0)


def test_invalid_configuration_raises() -> None:
    with pytest.raises(ValueError):
        WorkerPool(_prepare, _run, workers=0)


def test_unclosed_verifier_is_cleaned_up_at_interpreter_exit(tmp_path) -> None:
    script = tmp_path / "leave_open.py"
    script.write_text(textwrap.dedent(
        """
        from veristep.verifiers.math import MathVerifier
        v = MathVerifier(workers=2, timeout=20)  # a cold sympy call on a loaded machine took > 2 s
        r = v.verify("$\\\\boxed{x^2+2x+1}$", "(x+1)^2")
        print(r.status.value, *v.worker_pids(), flush=True)
        # no close(): exit must still stop the workers, and promptly
        """
    ))
    start = time.monotonic()
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    status, *pids = proc.stdout.split()
    assert status == "correct" and len(pids) == 2
    deadline = time.monotonic() + 5
    while any(_alive(int(pid)) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(int(pid)) for pid in pids)
    assert time.monotonic() - start < 60


def test_forked_child_builds_its_own_pool_and_leaves_the_parents_alone() -> None:
    from veristep.verifiers.math import MathVerifier

    with MathVerifier(workers=1, timeout=5) as v:
        assert v.verify("$\\boxed{x^2+2x+1}$", "(x+1)^2").correct
        parent_pids = v.worker_pids()
        assert len(parent_pids) == 1
        child = os.fork()
        if child == 0:  # the child verifies with a new pool, then exits without touching ours
            code = 0 if v.verify("$\\boxed{(x+2)^2}$", "x^2+4x+4").correct else 1
            code |= 0 if set(v.worker_pids()).isdisjoint(parent_pids) else 2
            v.close()
            os._exit(code)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert v.worker_pids() == parent_pids and all(_alive(p) for p in parent_pids)
        assert v.verify("$\\boxed{x^2+2x+1}$", "(x+1)^2").correct


def test_forked_workers_hold_no_inherited_descriptors(pool: WorkerPool) -> None:
    """A worker keeping another thread's pipe open made Popen wait forever (issue 20)."""
    read_end, write_end = os.pipe()  # stands for a Popen status pipe open while the pool forks
    try:
        pool.run_chunks([(1, [1]), (1, [2])], limit=5.0)  # both workers answer: both started up
        for pid in pool.worker_pids():
            targets = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
            mine = {os.readlink(f"/proc/self/fd/{fd}") for fd in (read_end, write_end)}
            assert not targets & mine
            assert sum(t.startswith("socket:") for t in targets) == 1  # its own connection only
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_dispatcher_that_cannot_start_fails_the_call_instead_of_hanging(monkeypatch) -> None:
    p = WorkerPool(_prepare, _run, workers=1, memory_limit_mb=None)

    def refuse(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    out = p.run_chunks([(1, [1, 2])], limit=1.0)
    monkeypatch.undo()
    assert [r.outcome for r in out[0]] == [Outcome.ERROR, Outcome.ERROR]
    assert "dispatcher thread" in out[0][0].detail
    assert not p.usable
    p.close()


def test_every_wait_has_a_deadline(monkeypatch) -> None:
    """A dispatcher that never answers costs the caller the worst case, then TIMEOUT."""
    monkeypatch.setattr(workers_module, "WAIT_GRACE_S", 0.5)
    p = WorkerPool(_prepare, _run, workers=1, memory_limit_mb=None)
    monkeypatch.setattr(p, "_dispatch_loop", lambda: time.sleep(30))
    start = time.monotonic()
    out = p.run_chunks([(1, [1, 2])], limit=0.5)
    assert time.monotonic() - start < 0.5 * 3 + 0.5 * 2 + 0.5 + 1.0
    assert [r.outcome for r in out[0]] == [Outcome.TIMEOUT, Outcome.TIMEOUT]
    assert not p.usable  # the verifier that owns it builds a new one


def test_an_interrupted_call_frees_its_worker_for_the_next(pool: WorkerPool) -> None:
    """A caller's SIGALRM handler raising mid-wait (verl's compute_score_timeout)."""

    class Alarm(Exception):
        pass

    def ring(*_):
        raise Alarm()

    old = signal.signal(signal.SIGALRM, ring)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(Alarm):
            pool.run_chunks([(1, ["hang"]), (1, ["hang"])], limit=60.0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    start = time.monotonic()
    out = pool.run_chunks([(2, [1, 2, 3])], limit=60.0)
    assert [r.value for r in out[0]] == [2, 4, 6]
    assert time.monotonic() - start < 10  # not behind two 60 s items nobody waits for


def test_works_inside_a_daemonic_process() -> None:
    """multiprocessing.Pool workers are daemonic and may not start multiprocessing children."""
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(1) as mp_pool:
        assert mp_pool.apply(_pool_in_child, (3,)) == [3, 6, 9]


def _pool_in_child(k: int) -> list[int]:
    with WorkerPool(_prepare, _run, workers=1, memory_limit_mb=None) as p:
        return [r.value for r in p.run_chunks([(k, [1, 2, 3])], limit=10.0)[0]]


def test_a_submission_queued_behind_slow_work_waits_for_it() -> None:
    """Callers that keep several submissions in flight (the CLI's line pool): the later one's
    deadline counts the chunks queued before it, so it gets real results, not time-outs."""
    p = WorkerPool(_prepare, _run, workers=1, memory_limit_mb=None)
    try:
        # 20 items that each run to the limit: about 6 s, more than the 0.3 s item's own
        # worst case plus the grace period
        slow = p.submit([(1, ["sleep"] * 20)], limit=0.3)
        quick = p.submit([(2, [21])], limit=0.3)
        out = p.wait(quick)
        assert [(r.outcome, r.value) for r in out[0]] == [(Outcome.OK, 42)]
        assert [r.outcome for r in p.wait(slow)[0]] == [Outcome.TIMEOUT] * 20
        assert p.usable
    finally:
        p.close()


# ---- issue 31.4: right-sized default pools ------------------------------------------------------
def _square(_shared: object, item: int) -> int:
    return item * item


def test_default_pool_size_takes_this_processes_share(monkeypatch: pytest.MonkeyPatch) -> None:
    # A 64-core node (faked): each of verl's reward workers used to fork one process per core.
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(64)), raising=False)
    for name in (workers_module.WORKERS_ENV, workers_module.PROCESSES_ENV):
        monkeypatch.delenv(name, raising=False)
    assert workers_module.available_cpus() == 64
    assert workers_module.default_pool_size() == workers_module.MAX_DEFAULT_WORKERS == 8
    monkeypatch.setenv(workers_module.PROCESSES_ENV, "16")
    assert workers_module.default_pool_size() == 4
    monkeypatch.setenv(workers_module.PROCESSES_ENV, "128")
    assert workers_module.default_pool_size() == 1
    monkeypatch.setenv(workers_module.WORKERS_ENV, "3")
    assert workers_module.default_pool_size() == 3
    for bad in ("0", "many", "-2"):
        monkeypatch.setenv(workers_module.WORKERS_ENV, bad)
        with pytest.raises(ValueError, match=workers_module.WORKERS_ENV):
            workers_module.default_pool_size()


def test_a_verl_recipe_on_a_64_core_node_forks_a_bounded_number_of_processes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from veristep.verifiers import adapters

    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(64)), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    for name in (workers_module.WORKERS_ENV, workers_module.PROCESSES_ENV):
        monkeypatch.delenv(name, raising=False)
    scorer = adapters.VerlScorer({"math": {"timeout": 3}})
    math = scorer.verifier("math")
    pool = math._get_pool()
    try:
        assert pool.size <= workers_module.MAX_DEFAULT_WORKERS
        assert scorer.verifier("tools").workers <= workers_module.MAX_DEFAULT_WORKERS
        assert scorer.verifier("format").workers <= workers_module.MAX_DEFAULT_WORKERS
        plain = WorkerPool(lambda shared: shared, _square)
        assert plain.size == 8
        plain.close()
    finally:
        scorer.close()


def test_workers_forked_beside_an_event_loop_print_no_stray_tracebacks() -> None:
    # verl's reward loop runs an asyncio loop whose self-pipe is the signal wake-up fd; a worker
    # forked from it closed that fd, and each signal then printed "OSError: [Errno 9] Bad file
    # descriptor" from the worker (issue 31.5).
    script = textwrap.dedent("""
        import asyncio, os, signal, time
        from veristep.verifiers.core.workers import WorkerPool

        def square(_shared, item):
            return item * item

        async def main():
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGUSR1, lambda: None)
            pool = WorkerPool(lambda shared: shared, square, 1)
            results = await loop.run_in_executor(
                None, lambda: pool.run_chunks([(None, [3])], limit=30.0))
            for pid in pool.worker_pids():
                os.kill(pid, signal.SIGUSR1)
            time.sleep(0.5)
            print("squared", [r.value for chunk in results for r in chunk])
            pool.close()

        asyncio.run(main())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert "squared [9]" in done.stdout, done.stderr[-2000:]
    assert "Bad file descriptor" not in done.stderr, done.stderr[-2000:]


def test_as_ready_gives_each_result_as_it_lands_across_submissions(pool: WorkerPool) -> None:
    listener = queue.SimpleQueue()
    hung = pool.submit([(1, [1, "hang", 3])], limit=1.0, listener=listener)
    quick = pool.submit([(2, [4, 5]), (3, [6])], limit=1.0, listener=listener)
    order = [(which, index, r.outcome, r.value)
             for group in pool.as_ready([hung, quick]) for which, index, r in group]
    assert sorted(order, key=lambda x: (x[0], x[1])) == [
        (0, 0, Outcome.OK, 1), (0, 1, Outcome.TIMEOUT, None), (0, 2, Outcome.OK, 3),
        (1, 0, Outcome.OK, 8), (1, 1, Outcome.OK, 10), (1, 2, Outcome.OK, 18)]
    # the other submission's items came before the hung item's verdict, not after it
    hung_at = order.index((0, 1, Outcome.TIMEOUT, None))
    assert all(order.index(x) < hung_at for x in order if x[0] == 1)


def test_as_ready_needs_one_listener_and_gives_up_at_the_deadline(monkeypatch) -> None:
    p = WorkerPool(_prepare, _run, workers=1, memory_limit_mb=None)
    try:
        with pytest.raises(ValueError, match="listener"):
            list(p.as_ready([p.submit([(1, [1])], limit=5.0)]))
        with pytest.raises(ValueError, match="listener"):
            list(p.as_ready([p.submit([(1, [1])], limit=5.0, listener=queue.SimpleQueue()),
                             p.submit([(1, [2])], limit=5.0, listener=queue.SimpleQueue())]))
    finally:
        p.close()
    # a dispatcher that never answers: the worst case, then TIMEOUT (as `wait` does)
    monkeypatch.setattr(workers_module, "WAIT_GRACE_S", 0.5)
    stalled = WorkerPool(_prepare, _run, workers=1, memory_limit_mb=None)
    monkeypatch.setattr(stalled, "_dispatch_loop", lambda: time.sleep(30))
    start = time.monotonic()
    sub = stalled.submit([(1, [1, 2])], limit=0.5, listener=queue.SimpleQueue())
    got = [(i, r.outcome) for group in stalled.as_ready([sub]) for _, i, r in group]
    assert time.monotonic() - start < 0.5 * 3 + 0.5 * 2 + 0.5 + 1.0
    assert got == [(0, Outcome.TIMEOUT), (1, Outcome.TIMEOUT)]
    assert not stalled.usable


def test_closing_as_ready_early_frees_the_workers(pool: WorkerPool) -> None:
    listener = queue.SimpleQueue()
    sub = pool.submit([(1, [1]), (1, ["hang"]), (1, ["hang"])], limit=60.0, listener=listener)
    stream = pool.as_ready([sub])
    first = next(stream)
    assert [(i, r.value) for _, i, r in first] == [(0, 1)]
    stream.close()
    start = time.monotonic()
    out = pool.run_chunks([(2, [1, 2])], limit=60.0)
    assert [r.value for r in out[0]] == [2, 4]
    assert time.monotonic() - start < 10  # not behind two 60 s items nobody reads

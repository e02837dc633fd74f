"""The sandbox layer: isolation levels, the unsandboxed opt-in, limits, sessions."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time

import pytest
from veristep.verifiers.code import CodeVerifier
from veristep.verifiers.code.sandbox import (
    Isolation,
    Limits,
    Sandbox,
    SandboxUnavailable,
)

WHOAMI = "import os\nprint(os.getuid(), os.getcwd(), sorted(os.environ))\n"


def test_limits_validate_and_serialise():
    with pytest.raises(ValueError):
        Limits(wall_s=0)
    with pytest.raises(ValueError):
        Limits(memory_mb=-1)
    with pytest.raises(ValueError):
        Limits(cpu_s=0)
    assert Limits(wall_s=2.5).to_wire()["cpu_s"] == 4  # wall + 1 s, rounded up
    assert Limits(wall_s=2.5, cpu_s=1.2).to_wire()["cpu_s"] == 2


def test_unsandboxed_execution_needs_an_explicit_opt_in():
    with pytest.raises(SandboxUnavailable, match="allow_unsandboxed=True"):
        Sandbox("rlimits-only")
    with pytest.raises(SandboxUnavailable, match="allow_unsandboxed=True"):
        CodeVerifier(isolation="rlimits-only")
    with pytest.raises(ValueError):
        Sandbox("chroot")


def test_rlimits_only_runs_with_opt_in_and_reports_it():
    verifier = CodeVerifier(isolation="rlimits-only", allow_unsandboxed=True, timeout=2.0)
    assert verifier.isolation is Isolation.RLIMITS_ONLY and not verifier.isolation.isolated
    result = verifier.verify("print(int(input()) * 2)", {"tests": [{"stdin": "21", "stdout": "42"}]})
    assert result.correct and result.extra["isolation"] == "rlimits-only+seccomp"
    with verifier.sandbox.session() as session:
        step = session.run({"main.py": WHOAMI}, Limits(), python_main="main.py")
        hostdir = session._process._hostdir
        # No PID namespace, so no compiled program is taken from a test process (see supervisor)
        again = session.run({"main.py": WHOAMI}, Limits(), python_main="main.py")
        assert not again.precompiled and again.stdout == step.stdout
    uid, cwd, env = step.stdout.split(" ", 2)
    assert int(uid) != 0  # root callers drop to uid 65534
    assert cwd.startswith(hostdir) and "SECRET" not in env and "PYTHONPATH" not in env
    verifier.close()
    assert not os.path.exists(hostdir)  # the private folder is removed on close


def test_namespaces_level_without_bubblewrap():
    try:
        sandbox = Sandbox("namespaces")
    except SandboxUnavailable as err:
        pytest.skip(f"unprivileged user namespaces unavailable: {err}")
    probe = (
        "import os, socket\n"
        "checks = [os.getuid() == 65534, not os.path.exists('/root'), not os.listdir('/tmp')]\n"
        "for path in ('/x', '/usr/x'):\n"
        "    try:\n"
        "        open(path, 'w')\n"
        "        checks.append(False)\n"
        "    except OSError:\n"
        "        checks.append(True)\n"
        "try:\n"
        "    socket.create_connection(('127.0.0.1', int(input())), timeout=0.5)\n"
        "    checks.append(False)\n"
        "except OSError:\n"
        "    checks.append(True)\n"
        "with open('/proc/self/status') as fh:\n"
        "    checks.append(all(int(l.split()[1], 16) == 0 for l in fh if l.startswith('CapEff')))\n"
        "print(checks, len([p for p in os.listdir('/proc') if p.isdigit()]))\n"
    )
    server = __import__("socket").create_server(("127.0.0.1", 0))
    try:
        with sandbox.session() as session:
            step = session.run({"main.py": probe}, Limits(wall_s=5), python_main="main.py",
                               stdin=str(server.getsockname()[1]))
    finally:
        server.close()
    assert step.ok, step.stderr
    checks, processes = step.stdout.rsplit(" ", 1)
    assert checks == str([True] * 7) and int(processes) == 2  # the supervisor and the program


def test_auto_detection_picks_bubblewrap(code_verifier):
    if code_verifier.isolation is not Isolation.BWRAP:
        pytest.skip("attack suite running at another isolation level")
    assert Sandbox().isolation is Isolation.BWRAP
    assert Sandbox(allow_unsandboxed=True).isolation is Isolation.BWRAP


AUTOGROUP = "import os\nprint(open('/proc/self/autogroup').read().split()[-1], os.getpriority(0, 0))\n"


@pytest.mark.skipif(not os.path.exists("/proc/self/autogroup"), reason="kernel without autogroup")
@pytest.mark.parametrize("isolation", ["bwrap", "namespaces", "rlimits-only"])
def test_a_sandbox_started_at_a_nice_value_gives_its_session_that_value(isolation):
    # A sandbox is a session of its own, so where autogroup is on it is one scheduling group,
    # weighed against all of the caller's threads by the group's nice value alone.
    seen: dict[int, object] = {}

    def start_and_probe(nice: int) -> None:
        os.nice(nice)  # this thread only (Linux)
        try:
            sandbox = Sandbox(isolation, allow_unsandboxed=True)
        except SandboxUnavailable as err:
            seen[nice] = err
            return
        try:
            with sandbox.session() as session:
                seen[nice] = session.run({"main.py": AUTOGROUP}, Limits(wall_s=10), python_main="main.py")
        finally:
            sandbox.close()

    for nice in (0, 7):
        thread = threading.Thread(target=start_and_probe, args=(nice,))
        thread.start()
        thread.join()
    if isinstance(seen[0], SandboxUnavailable):
        pytest.skip(f"{isolation} unavailable here: {seen[0]}")
    assert seen[0].ok and seen[0].stdout.split() == ["0", "0"], seen[0]
    assert seen[7].ok and seen[7].stdout.split() == ["7", "7"], seen[7]


def test_session_steps_are_fresh_but_compile_outputs_persist(code_verifier):
    sandbox = code_verifier.sandbox
    with sandbox.session() as session:
        assert session.isolation is sandbox.isolation and session.start_s > 0
        first = session.run({"main.py": WHOAMI}, Limits(), python_main="main.py")
        uid, cwd, env = first.stdout.split(" ", 2)
        assert int(uid) == 65534 and env.strip() == str(
            sorted(["HOME", "LANG", "LC_ALL", "PATH", "TMPDIR"])
        )
        built = session.compile(
            {"build.sh": "echo built > artifact; echo scratch > other"},
            ["/bin/sh", "build.sh"],
            ["artifact"],
            Limits(),
        )
        assert built.ok
        look = "import os\nprint(sorted(os.listdir('.')), open('artifact').read().strip())\n"
        step = session.run({"look.py": look}, Limits(), python_main="look.py")
        assert step.stdout.strip() == "['artifact', 'look.py'] built"
        step = session.run({}, Limits(), argv=["/bin/sh", "-c", "cat artifact; exit 3"])
        assert step.stdout == "built\n" and step.exit_code == 3 and not step.ok
        with pytest.raises(ValueError):
            session.run({}, Limits())


def test_later_python_tests_run_the_program_the_first_one_compiled(code_verifier):
    # The first test of a completion sends its compiled program to the supervisor before any
    # of it runs; later tests with the same source run that, uncompiled, in fresh processes.
    program = ("import os, sys\n"
               "try:\n    os.write(4, b'x')\nexcept OSError as e:\n    print('fd4', e.errno)\n"
               "print(__file__, sys._getframe().f_code.co_filename == __file__)\n"
               "if input() == 'boom':\n    raise KeyError('boom')\n")
    with code_verifier.sandbox.session() as session:
        steps = [session.run({"main.py": program}, Limits(), python_main="main.py", stdin=s)
                 for s in ("a", "b", "boom")]
        assert [s.precompiled for s in steps] == [False, True, True]
        first = steps[0].stdout
        assert first.startswith("fd4 9\n") and first.endswith(" True\n")  # EBADF: closed
        assert steps[1].stdout == first and steps[2].stdout == first
        assert steps[2].exit_code == 1 and "KeyError: 'boom'" in steps[2].stderr
        assert first.split()[2] in steps[2].stderr  # the traceback names the file run
        other = session.run({"main.py": "print(2)"}, Limits(), python_main="main.py")
        again = session.run({"main.py": "print(2)"}, Limits(), python_main="main.py")
        assert (other.precompiled, again.precompiled) == (False, True)
        assert other.stdout == again.stdout == "2\n"
        bad = [session.run({"main.py": "print(("}, Limits(), python_main="main.py")
               for _ in range(2)]
        assert [b.precompiled for b in bad] == [False, False]
        assert all(b.exit_code != 0 and "SyntaxError" in b.stderr for b in bad)
        calls = [session.call({"solution.py": "def f(x):\n    return x * 2\n"}, Limits(),
                              solution="solution.py", calls=[{"expr": "f(21)"}])
                 for _ in range(2)]
        assert [c.precompiled for c in calls] == [False, True]
        assert calls[0].report == calls[1].report == '{"index": 0, "value": "42"}\n'
    with code_verifier.sandbox.session() as session:  # a new completion compiles anew
        step = session.run({"main.py": "print(2)"}, Limits(), python_main="main.py")
        assert not step.precompiled and step.stdout == "2\n"


def test_step_result_flags(code_verifier):
    with code_verifier.sandbox.session() as session:
        slow = session.run({}, Limits(wall_s=0.5), argv=["/bin/sh", "-c", "sleep 5"])
        assert slow.timed_out and slow.wall_s < 3
        loud = session.run(
            {}, Limits(output_bytes=1000), argv=["/bin/sh", "-c", "yes | head -c 100000"]
        )
        assert loud.output_limited and len(loud.stdout) <= 1000
        killed = session.run({}, Limits(), argv=["/bin/sh", "-c", "kill -9 $$"])
        assert killed.signal == 9 and killed.exit_code is None


def test_each_completion_gets_a_fresh_container_in_the_threads_sandbox(make_code_verifier,
                                                                       sandbox_processes):
    verifier = make_code_verifier(timeout=2.0, workers=1)
    leave = "import os\nopen('/tmp/left', 'w').write('x')\nos.fork() or __import__('time').sleep(60)\n"
    look = (
        "import os\n"
        "print(sorted(os.listdir('.')), os.path.exists('/tmp/left'),"
        " sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
    )
    cpp = "#include <cstdio>\nint main() { std::puts(\"built\"); }"
    with verifier:
        verifier.verify(leave, {"tests": [{"stdout": ""}]})
        assert verifier.verify(cpp, {"language": "cpp", "tests": [{"stdout": "built"}]}).correct
        first = verifier.sandbox._local.process
        result = verifier.verify(look, {"tests": [{"stdout": "['main.py'] False [1, 2]"}]})
        assert result.correct, result.extra["tests"]
        assert verifier.sandbox._local.process is first  # the same sandbox, a new container
        # A failed build must not run the previous completion's binary.
        broken = verifier.verify("int main( {", {"language": "cpp", "tests": [{"stdout": "built"}]})
        assert broken.status.value == "compile_error"
        results = verifier.verify_batch([look] * 4, [{"tests": [{"stdout": "['main.py'] False [1, 2]"}]}] * 4)
        assert all(r.correct for r in results)
        # This verifier's sandboxes, every process in them (not other users' sandboxes on
        # the machine, which come and go while this runs). An orphan stays inside its
        # sandbox's PID namespace, so inside this tree.
        ours = _process_tree([p.pid for _, p in verifier.sandbox._processes])
        assert len(ours) >= 2  # at least a launcher (bwrap) and its zygote
    assert sandbox_processes() == []
    # close() stopped this verifier's sandboxes (their last processes may take a moment to go).
    deadline = time.monotonic() + 10
    while _still_running(ours) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _still_running(ours) == set()


def _process_tree(roots: list[int]) -> set[tuple[int, str]]:
    """(pid, start time) of `roots` and of every live descendant of theirs."""
    children: dict[int, list[int]] = {}
    started: dict[int, str] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(name))
                started[int(name)] = fields[19]
    tree, todo = set(), [pid for pid in roots if pid in started]
    while todo:
        pid = todo.pop()
        tree.add((pid, started[pid]))
        todo += children.get(pid, [])
    return tree


def _still_running(processes: set[tuple[int, str]]) -> set[tuple[int, str]]:
    """Those of `processes` still running (same pid and start time, not a zombie)."""
    left = set()
    for pid, start in processes:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and fields[19] == start:
            left.add((pid, start))
    return left


# ---- issue 20: no orphans, no hang at start ----------------------------------------------------
_PARENT = r"""
import os, sys
from veristep.verifiers.code import CodeVerifier

marker = os.environ["VERISTEP_TEST_MARKER"]  # not in this process's own command line
verifier = CodeVerifier(isolation=sys.argv[1], allow_unsandboxed=True, timeout=60.0, workers=2)
program = f"import os\nos.execv('/bin/sh', ['sh', '-c', 'sleep 120; : {marker}'])\n"
print("verifying", flush=True)
verifier.verify_batch([program] * 2, [{"tests": [{"stdout": ""}]}] * 2)
"""


def _descendants(root: int) -> set[int]:
    """Live (not zombie) processes below `root`, found by walking parent links in /proc."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents[int(name)] = int(fields[1])
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_sandboxes_die_with_their_parent(code_verifier, sandbox_processes, sig):
    marker = f"veristep-orphan-{secrets.token_hex(6)}"
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, code_verifier.isolation.value],
                              env=dict(os.environ, VERISTEP_TEST_MARKER=marker))
    try:
        deadline = time.monotonic() + 60
        while len(sandbox_processes(marker.encode())) < 2:  # both programs are running
            assert time.monotonic() < deadline and parent.poll() is None, "never started"
            time.sleep(0.1)
        tree = _descendants(parent.pid)
        assert len(tree) >= 8  # launcher, zygote, container and program, twice
        parent.send_signal(sig)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 10
        while _alive(tree) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _alive(tree) == [] and sandbox_processes(marker.encode()) == []
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def _alive(pids: set[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] != "Z":
                    alive.append(pid)
        except OSError:
            pass
    return alive


def test_a_sandbox_start_does_not_hang_while_another_thread_forks(code_verifier):
    # subprocess.Popen waits for its exec-status pipe to close; a child forked meanwhile by
    # another thread inherits the pipe and held the start for as long as it lived.
    sandbox = Sandbox(code_verifier.isolation, allow_unsandboxed=True)
    stop = threading.Event()

    def fork_forever() -> None:
        while not stop.is_set():
            pid = os.fork()
            if pid == 0:
                time.sleep(8)
                os._exit(0)
            threading.Thread(target=os.waitpid, args=(pid, 0), daemon=True).start()
            time.sleep(0.003)

    def start_once(times: list[float]) -> None:
        t0 = time.monotonic()
        with sandbox.session() as session:
            session.run({"main.py": "print(1)"}, Limits(), python_main="main.py")
        times.append(time.monotonic() - t0)

    forker = threading.Thread(target=fork_forever, daemon=True)
    forker.start()
    times: list[float] = []
    try:
        for _ in range(20):  # a new thread: a new sandbox process each time
            thread = threading.Thread(target=start_once, args=(times,))
            thread.start()
            thread.join()
    finally:
        stop.set()
        forker.join()
        sandbox.close()
    assert len(times) == 20 and max(times) < 6.0, times  # a hang lasts the 8 s of a child


def test_a_forked_copy_of_the_caller_starts_its_own_sandbox(make_code_verifier):
    verifier = make_code_verifier(timeout=2.0, workers=1)
    reference = {"tests": [{"stdout": "1"}]}
    assert verifier.verify("print(1)", reference).correct
    mine = verifier.sandbox._local.process
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child inherited the parent's sandbox object, not its sandbox
        status = 1
        try:
            os.close(read)
            result = verifier.verify("print(1)", reference)
            os.write(write, result.status.value.encode())
            verifier.close()
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    with os.fdopen(read) as fh:
        child_status = fh.read()
    assert os.waitpid(pid, 0)[1] == 0 and child_status == "correct"
    assert verifier.sandbox._local.process is mine and mine.alive
    assert verifier.verify("print(1)", reference).correct
    verifier.close()

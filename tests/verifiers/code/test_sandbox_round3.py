"""Issue 29 (red team, round 3): what a program can make the host do, or make itself unjudged.

Each test here failed on the code before the fix it names: a returned value whose `repr` raises,
a report the host could not decode, a limit set on the container's supervisor, kernel memory
outside the budget.
"""

from __future__ import annotations

import json
import textwrap

from veristep.verifiers import Status

BENIGN = "a, b = map(int, input().split())\nprint(a + b)\n"


def _judged(result, *statuses: Status) -> None:
    assert result.judged, (result.status, result.detail)
    assert result.status in statuses, (result.status, result.detail)


# ---- (a) a failure the program can cause is the program's verdict ----------------------------
def test_a_returned_value_too_large_to_print_is_wrong(code_verifier):
    huge = "def f(x):\n    return 10**5000\n"
    result = code_verifier.verify(huge, {"asserts": ["assert f(1) == 2"]})
    _judged(result, Status.WRONG)
    assert "<int of 16610 bits>" in result.detail
    nested = "def f(x):\n    v = []\n    for _ in range(60):\n        v = [v]\n    return v\n"
    result = code_verifier.verify(nested, {"asserts": ["assert f(1) == 2"]})
    _judged(result, Status.WRONG)
    assert len(result.detail) < 400


def test_a_report_line_nested_too_deeply_is_ignored_not_a_crash(code_verifier):
    # The program writes its own line on the report channel (fd 3) before the call.
    code = "import os\nos.write(3, b'[' * 200000 + b'\\n')\ndef f(x):\n    return 3\n"
    result = code_verifier.verify(code, {"asserts": ["assert f(1) == 2"]})
    _judged(result, Status.WRONG)
    honest = "import os\nos.write(3, b'{\"index\": ' + b'[' * 200000 + b'\\n')\ndef f(x):\n    return 2\n"
    _judged(code_verifier.verify(honest, {"asserts": ["assert f(1) == 2"]}), Status.CORRECT)


def test_colliding_keys_in_a_report_are_rejected_in_linear_time(timed_verify):
    # Integer hashes are not randomised: 24,000 multiples of 2**61 - 1 all hash to 0, and a
    # set of them takes seconds to build. Faked report lines with colliding indexes too.
    code = """
        import json, os
        keys = [k * ((1 << 61) - 1) for k in range(1, 24001)]
        line = json.dumps({"index": 0, "value": json.dumps({"$set": keys})})
        junk = "".join('{"index": %d}\\n' % k for k in keys)
        os.write(3, (line + "\\n" + junk).encode())
        os._exit(0)
    """
    result, elapsed = timed_verify(code, {"asserts": ["assert f(1) == {1}"]}, timeout=10.0)
    _judged(result, Status.WRONG)
    assert "one hash value" in result.detail
    assert elapsed < 8.0, f"{elapsed:.1f}s"


def _prlimit_programs() -> dict[str, tuple[str, str]]:
    python = """
        import ctypes, os, resource
        libc = ctypes.CDLL(None, use_errno=True)
        hit = []
        for which, value in ((resource.RLIMIT_NOFILE, 0), (resource.RLIMIT_AS, 1 << 20),
                             (resource.RLIMIT_NPROC, 0), (resource.RLIMIT_CPU, 1)):
            try:
                resource.prlimit(1, which, (value, value))
                hit.append(which)
            except OSError:
                pass
        try:
            os.sched_setscheduler(1, os.SCHED_IDLE, os.sched_param(0))
            hit.append("idle")
        except OSError:
            pass
        try:
            os.setpriority(os.PRIO_PROCESS, 1, 19)
            hit.append("nice")
        except OSError:
            pass
        try:
            os.setpriority(os.PRIO_USER, 0, 19)
            hit.append("nice user")
        except OSError:
            pass
        resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32))  # its own limits stay settable
        os.setpriority(os.PRIO_PROCESS, 0, os.getpriority(os.PRIO_PROCESS, 0) + 1)
        a, b = map(int, input().split())
        print(a + b if not hit else f"hit {hit}")
    """
    cpp = r"""
        ```cpp
        #include <sys/resource.h>
        #include <cstdio>
        int main() {
            struct rlimit r = {0, 0};
            int hit = prlimit(1, RLIMIT_NOFILE, &r, 0) == 0;
            long a, b;
            if (scanf("%ld %ld", &a, &b) != 2) return 1;
            if (hit) printf("hit\n"); else printf("%ld\n", a + b);
        }
        ```
    """
    return {"python": ("python", python), "cpp": ("cpp", cpp)}


def test_limits_set_on_the_containers_supervisor_are_refused(code_verifier):
    # The program and the container's supervisor (PID 1) run as the same uid: prlimit(1, ...)
    # used to crash the supervisor (sandbox_error, unjudged); now only the program's own
    # limits and scheduling can be changed, and every test of the completion still runs.
    tests = [{"stdin": "1 2", "stdout": "3"}, {"stdin": "4 5", "stdout": "9"}]
    for name, (language, code) in _prlimit_programs().items():
        result = code_verifier.verify(textwrap.dedent(code), {"language": language, "tests": tests})
        assert result.status is Status.CORRECT, (name, result.status, result.detail)
        assert result.extra["passed"] == 2


# ---- (d) kernel memory outside the budget -----------------------------------------------------
def test_sysv_message_queues_semaphores_and_big_pipes_are_denied(make_code_verifier):
    # Each of these is kernel memory the watchdog cannot see: a 64 MiB program used them to
    # hold hundreds of MiB. Denied before the program starts; SysV shared memory (counted)
    # still works.
    verifier = make_code_verifier(timeout=5.0, memory_mb=64, workers=1)
    code = """
        import ctypes, errno, fcntl, os
        libc = ctypes.CDLL(None, use_errno=True)
        got = []
        if libc.msgget(0, 0o1000 | 0o600) >= 0:  # IPC_PRIVATE | IPC_CREAT
            got.append("msg")
        if libc.semget(0, 100, 0o1000 | 0o600) >= 0:
            got.append("sem")
        r, w = os.pipe()
        try:
            fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ
            got.append("pipe")
        except OSError:
            pass
        shm = libc.shmget(0, 4096, 0o1000 | 0o600)
        print("LEAK " + " ".join(got) if got or shm < 0 else "denied")
    """
    try:
        result = verifier.verify(textwrap.dedent(code), {"tests": [{"stdout": "denied"}]})
    finally:
        verifier.close()
    assert result.correct, result.detail


def test_queued_messages_cannot_hold_memory_past_the_budget(make_code_verifier):
    # The red team's program: fill message queues with 461 MiB; it must not score.
    verifier = make_code_verifier(timeout=5.0, memory_mb=64, workers=1)
    code = """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        buf = ctypes.create_string_buffer(8 + 8192)
        buf[0] = 1
        held = 0
        for _ in range(32000):
            q = libc.msgget(0, 0o1000 | 0o600)
            if q < 0:
                break
            while libc.msgsnd(q, buf, 8192, 0o4000) == 0:  # IPC_NOWAIT
                held += 8192
        print("LEAK" if held > 128 << 20 else "held %d" % held)
    """
    try:
        result = verifier.verify(textwrap.dedent(code), {"tests": [{"stdout": "LEAK"}]})
    finally:
        verifier.close()
    assert result.reward == 0.0 and result.status is Status.WRONG, result.detail


def test_the_report_is_never_trusted_for_the_compile_error_either(code_verifier):
    # A program that exits 102 after writing a fake, huge compile error: still bounded.
    code = "import os, json\nos.write(3, (json.dumps({'compile_error': 'x' * 10**6}) + '\\n').encode())\nos._exit(102)\n"
    result = code_verifier.verify(code, {"tests": [{"stdout": "1"}]})
    assert result.judged and len(result.detail) <= 2 * code_verifier.stderr_chars + 100
    assert json.dumps(result.extra)  # serialisable


# ---- (c) unfakeable by construction ----------------------------------------------------------
def test_checks_not_on_a_direct_candidate_call_are_marked_fakeable(code_verifier):
    # The red team's fakes: a wrong function scored 1.0 and the result did not say fakeable.
    lying = "class A:\n    def __eq__(self, other):\n        return True\n" \
            "    def __sub__(self, other):\n        return 0\n" \
            "    def startswith(self, prefix):\n        return True\n" \
            "def f(x):\n    return A()\n"
    patched = "import cmath\ncmath.isclose = lambda *a, **k: True\ndef f(x):\n    return 99.0\n"
    cases = [
        ("import operator\n" + lying, "assert operator.eq(f(1), 2)"),
        (patched, "assert cmath.isclose(f(1), 2.0)"),
        (lying, "assert f(1) - 2 == 0"),
        (lying, "assert f(1).startswith('ab')"),
    ]
    for code, assertion in cases:
        result = code_verifier.verify(code, {"asserts": [assertion], "setup": "import cmath"})
        assert result.judged, (assertion, result.detail)
        assert not result.correct or result.extra.get("fakeable") is True, (assertion, result.extra)
        assert result.extra.get("fakeable") is True and result.extra["tests"][0]["fakeable"]
    # The unfakeable form: a direct call with literal arguments, compared here.
    for code in (lying, patched):
        result = code_verifier.verify(code, {"asserts": ["assert f(1) == 2",
                                                         "assert math.isclose(f(1), 2.0)"],
                                             "setup": "import math"})
        assert not result.correct and "fakeable" not in result.extra, result.detail


def test_socket_buffers_and_tmpfs_inodes_stay_bounded(code_verifier):
    code = """
        import os, resource, socket
        got = []
        a, b = socket.socketpair()
        for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            try:
                a.setsockopt(socket.SOL_SOCKET, option, 1 << 24)
                got.append(option)
            except OSError:
                pass
        a.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)  # other options still work
        st = os.statvfs("/tmp")
        if not 0 < st.f_files <= st.f_blocks * st.f_frsize // 4096 + 1024:
            got.append("inodes %d" % st.f_files)
        if resource.getrlimit(resource.RLIMIT_MSGQUEUE)[1] > 819200:
            got.append("mqueue")
        print("LEAK %s" % got if got else "bounded")
    """
    assert code_verifier.verify(textwrap.dedent(code), {"tests": [{"stdout": "bounded"}]}).correct


# ---- (e) a PID namespace per test, on request ---------------------------------------------------
def test_a_pid_namespace_per_test_on_request(make_code_verifier):
    # Off by default (it about doubles the time of a short test: benchmarks/code_verify_bench.py
    # --compare-pid-namespace). With it each test's program is PID 2 of a namespace of its own,
    # whatever earlier tests did, and sees no process of another test.
    code = """
        import os
        if input().strip() == "fork":
            for _ in range(30):
                pid = os.fork()
                if pid == 0:
                    os._exit(0)
                os.waitpid(pid, 0)
            print("forked")
        else:
            print(os.getpid(), os.getppid())
    """
    tests = [{"stdin": "fork", "stdout": "forked"}, {"stdin": "look", "stdout": "2 1"}]
    shared = make_code_verifier(timeout=2.0, workers=1)
    fresh = make_code_verifier(timeout=2.0, workers=1, pid_namespace_per_test=True)
    try:
        assert shared.verify(textwrap.dedent(code), {"tests": tests}).extra["passed"] == 1
        assert fresh.verify(textwrap.dedent(code), {"tests": tests}).correct
        # Verdicts are the same as without it: exit codes, signals, CPU limit, budgets.
        cases = [
            ("import sys\nsys.exit(3)", Status.RUNTIME_ERROR, "exit status 3"),
            ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", Status.RUNTIME_ERROR,
             "killed by signal SIGSEGV"),
            ("while True:\n    pass", Status.TIMEOUT, ""),
            ("import os, time\nfor _ in range(200):\n    if os.fork() == 0:\n"
             "        time.sleep(30)\n        os._exit(0)", Status.PROCESS_LIMIT, ""),
            ("block = bytearray(8 * 1024 ** 3)", Status.MEMORY_LIMIT, ""),
            ("print(1)", Status.CORRECT, ""),
        ]
        for program, status, detail in cases:
            for verifier in (shared, fresh):
                result = verifier.verify(program, {"tests": [{"stdout": "1"}]})
                assert result.status is status, (program, verifier is fresh, result.detail)
                assert detail in result.detail
        cpp = "#include <cstdio>\nint main() { std::puts(\"7\"); }"
        assert fresh.verify(cpp, {"language": "cpp", "tests": [{"stdout": "7"}] * 2}).correct
        assert fresh.verify("def f(x):\n    return x\n", {"asserts": ["assert f(2) == 2"]}).correct
    finally:
        shared.close()
        fresh.close()

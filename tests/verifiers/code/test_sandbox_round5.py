"""A fifth red team: host CPU spent on the report channel, kernel memory and host-wide kernel
counts outside every budget (file locks, POSIX timers and message queues, pseudo-terminals,
extended attributes), and a program too big for its folder.

Each test here failed on the code before its fix (the files of verifiers/code at the commit
before, with these tests): a million parse attempts for a megabyte of empty report lines, locks,
96,363 timers, a message queue, a pty and a 64 KiB extended attribute all granted,
sandbox_error for a program larger than its folder.
"""

from __future__ import annotations

import json
import textwrap
import types

import pytest
from veristep.verifiers import Status
from veristep.verifiers.code import verifier as verifier_module
from veristep.verifiers.code.sandbox import Limits, Sandbox, SandboxUnavailable
from veristep.verifiers.code.verifier import (
    CODE_MAX_BYTES,
    REPORT_EXTRA_LINES,
    _read_report,
)


def _judged(result, *statuses: Status) -> None:
    assert result.judged, (result.status, result.detail)
    assert result.status in statuses, (result.status, result.detail)


# ---- the report channel: read once, and only as far as the calls need ------------------------
@pytest.fixture
def json_loads_calls(monkeypatch):
    """Count the host's parse attempts of report lines (every one held the interpreter lock)."""
    calls = [0]

    def loads(text, *args, **kwargs):
        calls[0] += 1
        return json.loads(text, *args, **kwargs)

    monkeypatch.setattr(verifier_module, "json", types.SimpleNamespace(loads=loads))
    return calls


_EMPTY_LINES = """
    import os
    def write(fd, data):
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    write(3, b"\\n" * (1 << 20))
    def f(x):
        return 3
"""
_THREE = {"asserts": ["assert f(1) == 2", "assert f(2) == 3", "assert f(3) == 4"]}


@pytest.mark.parametrize("case", ["wrong", "exit 102", "three tests, all run"])
def test_empty_report_lines_are_not_parsed_one_by_one(make_code_verifier, json_loads_calls,
                                                      case):
    # 8 MiB of b"\n" on fd 3 cost 44 s of host CPU under the GIL (a parse attempt per line),
    # twice with exit status 102, once per test with stop_on_first_failure=False.
    code = textwrap.dedent(_EMPTY_LINES)
    reference: dict = {"asserts": ["assert f(1) == 2"]}
    config = {}
    if case == "exit 102":
        code = code.replace("def f(x):", "import atexit; atexit.register(os._exit, 102)\ndef f(x):")
    elif case == "three tests, all run":
        reference, config = _THREE, {"stop_on_first_failure": False}
    verifier = make_code_verifier(timeout=5.0, workers=1, **config)
    try:
        result = verifier.verify(code, reference)
    finally:
        verifier.close()
    _judged(result, Status.RUNTIME_ERROR, Status.WRONG)
    tests = len(reference["asserts"]) if config else 1
    assert len(result.extra["tests"]) == tests
    assert json_loads_calls[0] <= tests * (1 + REPORT_EXTRA_LINES), json_loads_calls[0]


def test_a_few_lines_of_the_programs_own_before_its_reports_still_count(code_verifier):
    code = """
        import os
        os.write(3, b"noise\\n" * {lines})
        def f(x):
            return x + 1
    """
    few = textwrap.dedent(code.format(lines=REPORT_EXTRA_LINES - 1))
    _judged(code_verifier.verify(few, _THREE), Status.CORRECT)
    many = textwrap.dedent(code.format(lines=1000))
    result = code_verifier.verify(many, _THREE)
    _judged(result, Status.RUNTIME_ERROR)
    assert "exited before" in result.detail


def test_the_report_reader_stops_at_every_calls_report_and_at_its_line_cap():
    reports = "".join(json.dumps({"index": k, "value": str(k)}) + "\n" for k in range(3))
    forged = json.dumps({"index": 1, "value": "99"}) + "\n"
    read = _read_report(forged + reports + "x\n" * 10**6, 3)
    assert sorted(read.calls) == [0, 1, 2] and read.calls[1]["value"] == "99"
    assert _read_report("\n" * (REPORT_EXTRA_LINES + 3) + reports, 3).calls == {}
    error = json.dumps({"compile_error": "SyntaxError"}) + "\n"
    assert _read_report(error + error.replace("Syntax", "Other"), 0).compile_error == "SyntaxError"
    assert _read_report(reports.rstrip("\n"), 3).calls[2]["value"] == "2"  # no final newline
    assert _read_report("", 2).calls == {} and _read_report("", 2).compile_error is None


# ---- kernel memory that no budget counts --------------------------------------------------------
def test_file_locks_and_leases_are_refused(code_verifier):
    # 1.7 M byte-range locks on files kept open by 1-page mappings: SUnreclaim +328 MiB from a
    # 64 MiB program (RLIMIT_LOCKS is not enforced; lock records are not charged anywhere).
    code = """
        import errno, fcntl, os, struct
        fd = os.open("/tmp/locked", os.O_RDWR | os.O_CREAT, 0o600)
        got = []
        def refused(call, *args):
            try:
                call(*args)
            except OSError as err:
                return err.errno == errno.EPERM
            return False
        record = struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, 0, 1, 0)
        checks = {
            "lockf": (fcntl.lockf, fd, fcntl.LOCK_EX | fcntl.LOCK_NB),
            "flock": (fcntl.flock, fd, fcntl.LOCK_EX | fcntl.LOCK_NB),
            "F_SETLK": (fcntl.fcntl, fd, fcntl.F_SETLK, record),
            "F_SETLKW": (fcntl.fcntl, fd, fcntl.F_SETLKW, record),
            "F_OFD_SETLK": (fcntl.fcntl, fd, 37, record),
            "F_OFD_SETLKW": (fcntl.fcntl, fd, 38, record),
            "F_SETLEASE": (fcntl.fcntl, os.open("/tmp/locked", os.O_RDONLY), 1024, fcntl.F_RDLCK),
        }
        leaks = [name for name, (call, *args) in checks.items() if not refused(call, *args)]
        unlocked = struct.unpack("hhqqi4x", fcntl.fcntl(fd, fcntl.F_GETLK, record))[0]
        print("LEAK " + " ".join(leaks) if leaks else "refused", unlocked == fcntl.F_UNLCK)
    """
    _judged(code_verifier.verify(textwrap.dedent(code), {"tests": [{"stdout": "refused True"}]}),
            Status.CORRECT)


def test_sqlite_works_in_memory_and_fails_at_once_on_a_file(code_verifier):
    # With ENOLCK SQLite took the refused lock for a busy one and retried until its timeout.
    code = """
        import sqlite3
        memory = sqlite3.connect(":memory:")
        memory.execute("create table t(x)")
        memory.execute("insert into t values (41)")
        print(memory.execute("select x + 1 from t").fetchone()[0])
        try:
            on_file = sqlite3.connect("/tmp/db.sqlite")
            on_file.execute("create table t(x)")
            on_file.commit()
            print("LEAK")
        except sqlite3.Error as err:
            print(type(err).__name__)
    """
    result = code_verifier.verify(textwrap.dedent(code),
                                  {"tests": [{"stdout": "42\nOperationalError"}]})
    _judged(result, Status.CORRECT)


def test_a_cpp_program_compiles_and_gets_no_locks(code_verifier):
    code = """```cpp
#include <cerrno>
#include <cstdio>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
int main() {
  int fd = open("/tmp/l", O_RDWR | O_CREAT, 0600);
  struct flock fl = {};
  fl.l_type = F_WRLCK; fl.l_whence = SEEK_SET; fl.l_start = 0; fl.l_len = 1;
  int a = fcntl(fd, F_SETLK, &fl) == -1 && errno == EPERM;
  int b = fcntl(fd, F_OFD_SETLK, &fl) == -1 && errno == EPERM;
  int c = flock(fd, LOCK_EX) == -1 && errno == EPERM;
  std::printf("%s\\n", a && b && c ? "refused" : "LEAK");
}
```"""
    _judged(code_verifier.verify(code, {"language": "cpp", "tests": [{"stdout": "refused"}]}),
            Status.CORRECT)


def test_extended_attributes_are_refused(code_verifier):
    # user.* values on the completion's tmpfs folders: about 16 MiB per folder that the
    # watchdog's count of used blocks does not see; POSIX ACLs are extended attributes too.
    code = """
        import errno, os, struct
        open("/tmp/x", "w").close()
        acl = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, 6, i)
                                              for tag, i in ((1, 0), (4, 0), (0x20, 0)))
        leaks = []
        for path in ("/tmp/x", "/sandbox", "/dev/shm"):
            for name, value in (("user.k", b"x" * 65000), ("system.posix_acl_access", acl)):
                try:
                    os.setxattr(path, name, value)
                    leaks.append(path + " " + name)
                except OSError as err:
                    if err.errno != errno.EOPNOTSUPP:
                        leaks.append(f"{path} {name} {err}")
        print("LEAK " + ", ".join(leaks) if leaks else "refused")
    """
    _judged(code_verifier.verify(textwrap.dedent(code), {"tests": [{"stdout": "refused"}]}),
            Status.CORRECT)


# ---- host-wide kernel counts shared by every sandbox ----------------------------------------
def test_posix_timers_are_bounded_per_completion(code_verifier):
    # Bounded only by RLIMIT_SIGPENDING, which counts per host uid beyond the completion's own
    # user namespace: one completion's ~96,000 timers made another's timer_create fail.
    code = """
        import ctypes, resource
        libc = ctypes.CDLL(None, use_errno=True)
        class SigEvent(ctypes.Structure):
            _fields_ = [("value", ctypes.c_void_p), ("signo", ctypes.c_int),
                        ("notify", ctypes.c_int), ("pad", ctypes.c_char * 48)]
        event, timer = SigEvent(None, 0, 1), ctypes.c_void_p()  # SIGEV_NONE
        made = 0
        while made < 5000 and libc.timer_create(1, ctypes.byref(event), ctypes.byref(timer)) == 0:
            made += 1
        limit = resource.getrlimit(resource.RLIMIT_SIGPENDING)
        print("bounded" if made <= 256 and limit == (256, 256) else f"LEAK {made} {limit}")
    """
    _judged(code_verifier.verify(textwrap.dedent(code), {"tests": [{"stdout": "bounded"}]}),
            Status.CORRECT)


def test_posix_message_queues_are_refused(code_verifier):
    # Their bytes count per host uid beyond the completion's user namespace, against the
    # kernel's default 800 KiB: a completion holding nine queues made another's mq_open fail
    # (EMFILE), besides being kernel memory outside the budget.
    code = """
        import ctypes, errno, os
        rt = ctypes.CDLL("librt.so.1", use_errno=True)
        queue = rt.mq_open(b"/veristep", os.O_RDWR | os.O_CREAT, 0o600, None)
        print("refused" if queue < 0 and ctypes.get_errno() == errno.EPERM else "LEAK")
    """
    _judged(code_verifier.verify(textwrap.dedent(code), {"tests": [{"stdout": "refused"}]}),
            Status.CORRECT)


def test_no_pseudo_terminal_can_be_opened_and_the_other_devices_work(code_verifier):
    # 48 processes opened 2,880 ptys of the host-wide kernel.pty.max (4096): SUnreclaim +91 MiB.
    code = """
        import os
        leaks = []
        for path in ("/dev/ptmx", "/dev/pts/ptmx"):
            try:
                os.open(path, os.O_RDWR | os.O_NOCTTY)
                leaks.append(path)
            except OSError:
                pass
        try:
            os.openpty()
            leaks.append("openpty")
        except OSError:
            pass
        null = os.open("/dev/null", os.O_RDWR)
        works = (os.write(null, b"abc") == 3 and os.read(null, 3) == b""
                 and open("/dev/zero", "rb").read(4) == bytes(4)
                 and len(open("/dev/urandom", "rb").read(16)) == 16 and len(os.urandom(8)) == 8)
        print("LEAK " + " ".join(leaks) if leaks else "none", works)
    """
    _judged(code_verifier.verify(textwrap.dedent(code), {"tests": [{"stdout": "none True"}]}),
            Status.CORRECT)


# ---- a program larger than its folder --------------------------------------------------------
def test_a_program_larger_than_its_folder_is_judged(code_verifier):
    # 65 MiB of source: the supervisor's write of main.py failed (ENOSPC) and the container
    # crashed, sandbox_error (unjudged).
    code = "```python\nprint(3)\n" + ("#" * 1023 + "\n") * (65 * 1024) + "```\n"
    result = code_verifier.verify(code, {"tests": [{"stdin": "1 2", "stdout": "3"}]})
    _judged(result, Status.COMPILE_ERROR)
    assert "too large" in result.detail and str(CODE_MAX_BYTES) in result.detail
    assert result.reward == 0.0
    right = "```python\nprint(3)\n" + "#" * 1000 + "\n```\n"
    _judged(code_verifier.verify(right, {"tests": [{"stdin": "1 2", "stdout": "3"}]}),
            Status.CORRECT)


def test_files_that_do_not_fit_in_the_folder_fail_the_step_not_the_sandbox():
    # Below the verifier's size cap, the supervisor's own write is the last line: a 2 MiB
    # program in a 1 MiB folder is a failed step, and the next step runs in the same sandbox.
    try:
        sandbox = Sandbox("bwrap", tmpfs_mb=1)
    except SandboxUnavailable as err:
        pytest.skip(f"bubblewrap sandbox unavailable here: {err}")
    try:
        with sandbox.session() as session:
            big = session.run({"main.py": "print(1)\n" + "#" * (2 << 20)}, Limits(wall_s=5),
                              python_main="main.py")
            small = session.run({"main.py": "print(1)\n"}, Limits(wall_s=5),
                                python_main="main.py")
    finally:
        sandbox.close()
    assert big.exit_code == 1 and "do not fit" in big.stderr, big
    assert small.ok and small.stdout == "1\n", small

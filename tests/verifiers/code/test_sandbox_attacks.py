"""Hostile programs. Each prints the expected answer only if its attack works, so a sandbox
leak shows up as a passing test (reward > 0) and fails the assertion here. After every attack
the verifier must have returned within its limits, left no process behind, and still pass a
benign program.

Run once without isolation to watch the attacks succeed (they must then fail here):
    VERISTEP_ATTACK_ISOLATION=rlimits-only pytest tests/verifiers/test_sandbox_attacks.py
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest
from veristep.verifiers import Status

BENIGN = "a, b = map(int, input().split())\nprint(a + b)\n"


@pytest.fixture
def attack(code_verifier, sandbox_processes):
    """Run one hostile program and check the aftermath; returns the VerifyResult."""

    def run(code: str, tests: list[dict], language: str = "python", markers: tuple = ()):
        reference = {"language": language, "tests": tests}
        started = time.monotonic()
        result = code_verifier.verify(textwrap.dedent(code), reference)
        elapsed = time.monotonic() - started
        bound = len(tests) * (code_verifier.test_limits.wall_s + 5) + 30
        assert elapsed < bound, f"verify took {elapsed:.1f}s"
        assert result.extra["isolation"] == code_verifier.sandbox.description
        assert result.status is not Status.SANDBOX_ERROR, result.detail
        assert sandbox_processes(*markers) == [], "a sandboxed process outlived its run"
        benign = code_verifier.verify(BENIGN, {"tests": [{"stdin": "2 3", "stdout": "5"}]})
        assert benign.correct, benign.detail
        return result

    return run


def _leak_test(stdin: str = "") -> list[dict]:
    return [{"stdin": stdin, "stdout": "LEAK"}]


def test_network_connections_fail(attack):
    server = socket.create_server(("0.0.0.0", 0))
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted: list[object] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    hosts = ["127.0.0.1", _host_address()]
    code = """
        import socket
        port, *hosts = input().split()
        ok = False
        for host in hosts:
            try:
                socket.create_connection((host, int(port)), timeout=0.5).close()
                ok = True
            except OSError:
                pass
        try:
            socket.getaddrinfo("example.com", 80)
            ok = True
        except OSError:
            pass
        print("LEAK" if ok else "offline")
    """
    try:
        result = attack(code, _leak_test(f"{port} {' '.join(h for h in hosts if h)}"))
    finally:
        stop.set()
        thread.join()
        server.close()
    assert result.reward == 0.0 and result.status is Status.WRONG
    assert accepted == []


def test_files_written_outside_the_workdir_do_not_persist(attack, code_verifier):
    token = secrets.token_hex(6)
    host_dir = tempfile.mkdtemp(prefix="veristep-attack-")
    os.chmod(host_dir, 0o777)  # writable by anyone, so only isolation can stop the write
    paths = [
        f"/tmp/veristep-mark-{token}",
        f"/dev/shm/veristep-mark-{token}",
        f"/var/tmp/veristep-mark-{token}",
        f"/veristep-mark-{token}",
        f"../veristep-mark-{token}",
        f"{host_dir}/mark",
    ]
    code = """
        import os, sys
        paths = sys.stdin.read().split()
        if any(os.path.exists(p) for p in paths):
            print("LEAK")
        else:
            for p in paths:
                try:
                    with open(p, "w") as fh:
                        fh.write("x")
                except OSError:
                    pass
            print("written")
    """
    stdin = "\n".join(paths)
    try:
        # Within one completion: test 1 writes, test 2 would find the files.
        result = attack(code, [{"stdin": stdin, "stdout": "written"}, *_leak_test(stdin)])
        assert result.extra["passed"] == 1 and result.extra["tests"][1]["status"] == "wrong"
        # Across completions: a second sandbox would find them.
        again = attack(code, _leak_test(stdin))
        assert again.reward == 0.0
        assert not [p for p in paths if p.startswith("/") and os.path.exists(p)]
        assert os.listdir(host_dir) == []
    finally:
        shutil.rmtree(host_dir, ignore_errors=True)
        for p in paths[:3]:
            if os.path.exists(p):
                os.unlink(p)


def test_parent_environment_is_not_visible(attack, monkeypatch):
    token = secrets.token_hex(8)
    monkeypatch.setenv("VERISTEP_SECRET", token)
    code = """
        import os
        found = os.environ.get("VERISTEP_SECRET")
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/environ", "rb") as fh:
                        for entry in fh.read().split(b"\\0"):
                            if entry.startswith(b"VERISTEP_SECRET="):
                                found = entry.split(b"=", 1)[1].decode()
                except OSError:
                    pass
        print(found or "none")
    """
    result = attack(code, [{"stdin": "", "stdout": token}])
    assert result.reward == 0.0 and result.status is Status.WRONG


def test_root_shadow_and_host_tmp_are_unreadable(attack):
    fd, secret_path = tempfile.mkstemp(prefix="veristep-secret-", dir="/tmp")
    os.write(fd, b"secret")
    os.close(fd)
    os.chmod(secret_path, 0o644)
    code = """
        import os
        leaked = []
        for path in ("/etc/shadow", input().strip()):
            try:
                with open(path) as fh:
                    leaked.append(fh.read())
            except OSError:
                pass
        for folder in ("/root", "/home"):
            try:
                leaked.extend(os.listdir(folder))
            except OSError:
                pass
        print("LEAK" if leaked else "nothing")
    """
    try:
        result = attack(code, _leak_test(secret_path))
    finally:
        os.unlink(secret_path)
    assert result.reward == 0.0 and result.status is Status.WRONG


def test_host_processes_are_invisible_and_unsignalable(attack):
    marker = f"veristep-victim-{secrets.token_hex(6)}"
    identity = {"user": 65534, "group": 65534, "extra_groups": []} if os.geteuid() == 0 else {}
    victim = subprocess.Popen(  # its own group: the finally below kills the sleep as well
        ["/bin/sh", "-c", "sleep 120; :", marker], start_new_session=True, **identity
    )
    code = """
        import os, signal
        marker = input().strip().encode()
        seen = False
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as fh:
                        cmdline = fh.read()
                except OSError:
                    continue
                if marker in cmdline:
                    seen = True
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except OSError:
                        pass
        try:
            os.kill(-1, signal.SIGKILL if seen else signal.SIGTERM)
        except OSError:
            pass
        print("LEAK" if seen else "alone")
    """
    try:
        result = attack(code, _leak_test(marker))
        assert victim.poll() is None, "the sandboxed program killed a host process"
    finally:
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()
    assert result.reward == 0.0


def test_program_is_not_root_and_has_no_capabilities(attack):
    code = """
        import os
        with open("/proc/self/status") as fh:
            caps = [l.split()[1] for l in fh if l.startswith(("CapEff", "CapPrm"))]
        root = os.getuid() == 0 or os.geteuid() == 0
        print("LEAK" if root or any(int(c, 16) for c in caps) else "nobody")
    """
    result = attack(code, _leak_test())
    assert result.reward == 0.0 and result.status is Status.WRONG


def test_supervisor_pipes_cannot_be_hijacked(attack):
    code = """
        import os, signal
        opened = []
        for path in ("/proc/1/fd/1", "/proc/1/fd/0", "/proc/1/mem", "/proc/1/environ"):
            try:
                os.close(os.open(path, os.O_RDWR if "fd" in path else os.O_RDONLY))
                opened.append(path)
            except OSError:
                pass
        try:
            os.kill(1, signal.SIGKILL)
        except OSError:
            pass
        print("LEAK" if opened else "sealed")
    """
    result = attack(code, _leak_test())
    assert result.reward == 0.0 and result.status is Status.WRONG


def test_fork_bombs_are_capped_and_cleaned_up(attack):
    counting = """
        import os, time
        n = 0
        for _ in range(1000):
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            n += 1
        print("LEAK" if n >= 1000 else "capped")
    """
    result = attack(counting, _leak_test())
    assert result.reward == 0.0 and result.status is Status.PROCESS_LIMIT
    exponential = """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """
    result = attack(exponential, _leak_test())
    assert result.reward == 0.0 and result.status is Status.PROCESS_LIMIT


def test_memory_bombs_hit_the_memory_limit(attack):
    result = attack("block = bytearray(8 * 1024 ** 3)\nprint('LEAK')\n", _leak_test())
    assert result.status is Status.MEMORY_LIMIT and result.reward == 0.0
    cpp = """
        #include <cstdio>
        int main() {
            const long n = 8L << 30;
            volatile char *block = new char[n];  // volatile: the allocation cannot be elided
            for (long i = 0; i < n; i += 4096) block[i] = 1;
            std::puts("LEAK");
        }
    """
    result = attack(cpp, _leak_test(), language="cpp")
    assert result.status is Status.MEMORY_LIMIT and result.reward == 0.0


def test_disk_fill_is_capped(attack):
    free_before = shutil.disk_usage(tempfile.gettempdir()).free
    one_file = """
        with open("big", "wb") as fh:
            for _ in range(4096):
                fh.write(b"\\0" * (1 << 20))
        print("LEAK")
    """
    result = attack(one_file, _leak_test())
    assert result.status is Status.OUTPUT_LIMIT and result.reward == 0.0
    many_files = """
        import os, signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        total = 0
        for folder in (".", "/tmp", "/dev/shm", os.path.expanduser("~")):
            for i in range(128):
                try:
                    with open(os.path.join(folder, f"fill{i}"), "wb") as fh:
                        fh.write(b"\\0" * (8 << 20))
                    total += 8 << 20
                except OSError:
                    break
        print("LEAK" if total >= 1 << 30 else "capped")
    """
    result = attack(many_files, _leak_test())
    assert result.reward == 0.0
    # Capped writes land in the sandbox's tmpfs; a leak to disk would take gigabytes.
    assert shutil.disk_usage(tempfile.gettempdir()).free > free_before - (1 << 30)


def test_infinite_output_hits_the_output_cap(attack):
    # The answer comes first, then endless blank lines that a whitespace-tolerant comparison
    # would accept if the output were not capped.
    stdout_flood = """
        import sys
        print("LEAK")
        while True:
            sys.stdout.write(" \\n" * 4096)
    """
    result = attack(stdout_flood, _leak_test())
    assert result.status is Status.OUTPUT_LIMIT and result.reward == 0.0
    stderr_flood = """
        import sys
        print("LEAK", flush=True)
        while True:
            sys.stderr.write("x" * 4096)
    """
    result = attack(stderr_flood, _leak_test())
    assert result.status is Status.OUTPUT_LIMIT and result.reward == 0.0


def test_sleeping_forever_times_out(attack, code_verifier):
    started = time.monotonic()
    result = attack("import time\nprint('LEAK', flush=True)\ntime.sleep(10 ** 6)\n", _leak_test())
    assert result.status is Status.TIMEOUT and result.reward == 0.0
    assert time.monotonic() - started < code_verifier.test_limits.wall_s + 10


def test_ignoring_sigterm_and_daemonising_do_not_survive(attack):
    stubborn = """
        import signal, time
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
        print("LEAK", flush=True)
        while True:
            time.sleep(0.01)
    """
    result = attack(stubborn, _leak_test())
    assert result.status is Status.TIMEOUT and result.reward == 0.0
    # Test 1 leaves a detached daemon that would write the answer into test 2's stdout.
    daemon = """
        import os, signal, time
        if input().strip() == "1":
            if os.fork() == 0:
                os.setsid()
                for sig in (signal.SIGTERM, signal.SIGHUP):
                    signal.signal(sig, signal.SIG_IGN)
                if os.fork():
                    os._exit(0)
                time.sleep(0.3)
                end = time.time() + 15
                while time.time() < end:
                    for pid in os.listdir("/proc"):
                        if pid.isdigit() and int(pid) not in (1, os.getpid()):
                            try:
                                fd = os.open(f"/proc/{pid}/fd/1", os.O_WRONLY)
                                os.write(fd, b"LEAK\\n")
                                os.close(fd)
                            except OSError:
                                pass
                    time.sleep(0.02)
                os._exit(0)
            print("first")
        else:
            time.sleep(0.6)
    """
    result = attack(daemon, [{"stdin": "1", "stdout": "first"}, *_leak_test("2")])
    assert result.extra["passed"] == 1 and result.extra["tests"][1]["status"] == "wrong"


def test_spawned_shells_are_contained(attack):
    marker = f"veristep-shell-{secrets.token_hex(6)}"
    fd, secret_path = tempfile.mkstemp(prefix="veristep-secret-", dir="/tmp")
    os.close(fd)
    os.chmod(secret_path, 0o644)
    code = f"""
        import os, subprocess
        os.system("(sleep 30; : {marker}) &")
        out = subprocess.run(
            ["/bin/sh", "-c",
             "if cat {secret_path} || ls /root/ || cat /etc/shadow; then echo LEAK; "
             "else echo contained; fi 2>/dev/null; (sleep 30; : {marker}) >/dev/null 2>&1 &"],
            capture_output=True, text=True).stdout
        print("LEAK" if "LEAK" in out else "contained")
    """
    try:
        result = attack(code, _leak_test(), markers=(marker.encode(),))
    finally:
        os.unlink(secret_path)
    assert result.reward == 0.0 and result.status is Status.WRONG


def _host_address() -> str:
    """This host's non-loopback address, or "" when it has none."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.255.255.255", 1))
        return probe.getsockname()[0]
    except OSError:
        return ""
    finally:
        probe.close()


def test_kernel_objects_do_not_outlive_a_test(attack):
    # Test 1 leaves a System V shared-memory segment, a message queue and a key in the
    # session and user keyrings; test 2 would read any of them back.
    code = r"""
        import ctypes, os, platform
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        first = input().strip() == "1"
        found = []
        shmid = libc.shmget(4242, 4096, (0o1000 if first else 0) | 0o600)
        if shmid >= 0:
            addr = libc.shmat(shmid, None, 0)
            if first:
                ctypes.memmove(addr, b"LEAK", 4)
            elif ctypes.string_at(addr, 4) == b"LEAK":
                found.append("shm")
        rt = ctypes.CDLL("librt.so.1", use_errno=True)
        mq = rt.mq_open(b"/veristep", os.O_RDWR | (os.O_CREAT if first else 0), 0o600, None)
        if mq >= 0 and not first:
            found.append("mqueue")
        add_key, keyctl = {"x86_64": (248, 250), "aarch64": (217, 219)}[platform.machine()]
        for ring in (-3, -4, -5):
            if first:
                libc.syscall(add_key, b"user", b"veristep", b"LEAK", 4, ring)
            elif libc.syscall(keyctl, 10, ring, b"user", b"veristep", 0) > 0:
                found.append(f"key {ring}")
        print("first" if first else ("LEAK" if found else "clean"))
    """
    result = attack(code, [{"stdin": "1", "stdout": "first"}, *_leak_test("2")])
    assert result.extra["passed"] == 1 and result.extra["tests"][1]["status"] == "wrong"


# ---- issue 17: state shared between completions, host kernel objects, limits, fakes -----------
_KEYRING_PROBE = r"""
import ctypes, json, sys, threading, time
from veristep.verifiers.code import CodeVerifier

libc = ctypes.CDLL(None, use_errno=True)
ADD_KEY, KEYCTL = {"x86_64": (248, 250), "aarch64": (217, 219)}[__import__("platform").machine()]
libc.syscall(KEYCTL, 1, None)  # this script's own anonymous session keyring, not pytest's


def read(name):
    key = libc.syscall(KEYCTL, 10, -3, b"user", name, 0)  # KEYCTL_SEARCH the session keyring
    buf = ctypes.create_string_buffer(64)
    size = libc.syscall(KEYCTL, 11, key, buf, 64) if key > 0 else -1  # KEYCTL_READ
    return buf.raw[:size].decode() if size > 0 else None


libc.syscall(ADD_KEY, b"user", b"before", b"kept-before", 11, -3)
program = sys.argv[1]
verifier = CodeVerifier(isolation=sys.argv[2], allow_unsandboxed=True, timeout=5.0, workers=1)
late = threading.Timer(0.5, lambda: libc.syscall(ADD_KEY, b"user", b"during", b"SECRET", 6, -3))
late.start()
result = verifier.verify(program, {"tests": [{"stdout": "SECRET"}]})
late.join()
benign = verifier.verify("print(1)", {"tests": [{"stdout": "1"}]})
print(json.dumps({
    "status": result.status.value, "benign": benign.status.value,
    "before": read(b"before"), "during": read(b"during"), "planted": read(b"planted"),
}))
"""


def test_the_callers_session_keyring_is_never_read_written_or_cleared(code_verifier):
    # A key the caller adds during the run cannot be read, a planted key does not reach the
    # caller, and the caller's keys survive (the old supervisor cleared them before each step).
    program = r"""
        import ctypes, time
        libc = ctypes.CDLL(None, use_errno=True)
        add_key, keyctl = {"x86_64": (248, 250), "aarch64": (217, 219)}[__import__("platform").machine()]
        libc.syscall(add_key, b"user", b"planted", b"x", 1, -3)
        for ring in (-3, -4, -5):
            libc.syscall(keyctl, 7, ring)  # KEYCTL_CLEAR
        listed = open("/proc/keys").read()  # descriptions of every key the process may view
        found = "SECRET" if "before" in listed or "during" in listed else ""
        end = time.time() + 1.5
        while time.time() < end and "SECRET" not in found:
            key = libc.syscall(keyctl, 10, -3, b"user", b"during", 0)
            buf = ctypes.create_string_buffer(64)
            if key > 0 and libc.syscall(keyctl, 11, key, buf, 64) > 0:
                found = buf.value.decode()
            time.sleep(0.02)
        print("SECRET" if "SECRET" in found else "nothing")
    """
    done = subprocess.run(
        [sys.executable, "-c", _KEYRING_PROBE, textwrap.dedent(program),
         code_verifier.isolation.value],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"status": "wrong", "benign": "correct", "before": "kept-before",
                      "during": "SECRET", "planted": None}


def test_a_completion_finds_nothing_of_earlier_completions_in_memory(attack):
    # The old pooled supervisor forked tests from a heap that still held earlier completions'
    # code, stdin and output (found through /proc/self/mem).
    token = secrets.token_hex(8)
    earlier = f"secret = 'VSTOKEN-{token}'\nprint(input(), 'VSTOKEN-{token[::-1]}')\n"
    assert attack(earlier, [{"stdin": f"VSTOKEN-{token.upper()}", "stdout": "x"}]).reward == 0.0
    scavenger = r"""
        import re
        found = set()
        with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
            for line in maps:
                fields = line.split()
                if not fields[1].startswith("r"):
                    continue
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                try:
                    mem.seek(lo)
                    chunk = mem.read(hi - lo)
                except (OSError, OverflowError, ValueError):
                    continue
                found.update(re.findall(rb"VSTOKEN-([0-9a-fA-F]{16})", chunk))
        print("LEAK" if found else "nothing")
    """
    result = attack(scavenger, _leak_test())
    assert result.reward == 0.0 and result.status is Status.WRONG


def test_deep_trees_and_full_folders_do_not_reach_later_tests_or_completions(attack,
                                                                            code_verifier):
    # The old wipe built absolute paths, which fail below ~2,050 levels: the files survived.
    # Folders by their environment: under rlimits-only they are private host folders.
    program = """
        import os, signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        folders = {"tmp": os.environ["TMPDIR"], "home": os.environ["HOME"]}

        def planted(root):
            stack = [os.open(root, os.O_RDONLY | os.O_DIRECTORY)]
            while stack:
                fd = stack.pop()
                for name in os.listdir(fd):
                    if name == "token":
                        return True
                    if name.startswith(("d", "s")):
                        try:
                            stack.append(os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd))
                        except OSError:
                            pass
            return False

        command, where = input().split()
        if command == "plant":
            os.chdir(folders[where])
            for _ in range(3000):  # far deeper than PATH_MAX from the folder's root
                os.mkdir("d")
                os.chdir("d")
            open("token", "w").write("planted")
            for n in range(8):  # and fill the folder's tmpfs
                try:
                    with open(f"fill{n}", "wb") as fh:
                        for _ in range(15):
                            fh.write(bytes(1 << 20))
                except OSError:
                    break
            print("planted")
        else:
            free = min(os.statvfs(p).f_bavail * os.statvfs(p).f_frsize for p in folders.values())
            found = any(planted(p) for p in folders.values())
            print("LEAK" if found or free < 32 << 20 else "clean")
    """
    for where in ("tmp", "home"):
        within = attack(program, [{"stdin": f"plant {where}", "stdout": "planted"},
                                  {"stdin": "look -", "stdout": "clean"}])
        assert within.correct, within.extra["tests"]  # test 2 of the same completion
        assert attack(program, [{"stdin": f"plant {where}", "stdout": "planted"}]).correct
        assert attack(program, [{"stdin": "look -", "stdout": "clean"}]).correct
        cpp = "#include <cstdio>\nint main() { std::puts(\"7\"); }"
        assert code_verifier.verify(cpp, {"language": "cpp", "tests": [{"stdout": "7"}]}).correct


def test_persistent_keyrings_and_other_kernel_objects_are_out_of_reach(attack):
    plant = r"""
        import ctypes, platform
        libc = ctypes.CDLL(None, use_errno=True)
        add_key, keyctl = {"x86_64": (248, 250), "aarch64": (217, 219)}[platform.machine()]
        ring = libc.syscall(keyctl, 22, -1, -3)  # KEYCTL_GET_PERSISTENT, linked into the session
        key = libc.syscall(add_key, b"user", b"carry", b"LEAK", 4, ring)
        print("planted" if key > 0 else "refused")
    """
    look = r"""
        import ctypes, platform
        libc = ctypes.CDLL(None, use_errno=True)
        keyctl = {"x86_64": 250, "aarch64": 219}[platform.machine()]
        ring = libc.syscall(keyctl, 22, -1, -3)
        key = libc.syscall(keyctl, 10, ring, b"user", b"carry", 0)
        print("LEAK" if key > 0 else "nothing")
    """
    assert attack(plant, [{"stdout": "refused"}]).correct
    assert attack(look, _leak_test()).status is Status.WRONG


def test_seccomp_denies_what_programs_never_need(attack, code_verifier):
    import platform

    from veristep.verifiers.code import seccomp

    arch = seccomp.machine_arch()
    if arch is None:
        pytest.skip(f"no seccomp tables for {platform.machine()}")
    n = arch.numbers
    denied = sorted({n[name] for name in seccomp.SANDBOX_DENIED + seccomp.PROGRAM_DENIED
                     if name in n})
    # Calls that work for an unprivileged program without the filter: the filter is on.
    would_work = [(n["keyctl"], 1, 0), (n["add_key"], 0, 0), (n["memfd_create"], 0, 0),
                  (n["unshare"], 0x10000000, 0), (n["ptrace"], 0, 0)]
    code = f"""
        import ctypes, errno
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.argtypes = None
        name = ctypes.c_char_p(b"x")
        bad = []
        for number in {denied!r}:
            ctypes.set_errno(0)
            if libc.syscall(number, 0, 0, 0, 0, 0) != -1 or ctypes.get_errno() != errno.EPERM:
                bad.append(number)
        for number, a, b in {would_work!r}:
            ctypes.set_errno(0)
            if libc.syscall(number, a, name if b == 0 and number == {n["add_key"]} else b, 0, 0,
                            0) != -1 or ctypes.get_errno() != errno.EPERM:
                bad.append(number)
        ctypes.set_errno(0)
        if libc.syscall({n["clone3"]}, 0, 0) != -1 or ctypes.get_errno() != errno.ENOSYS:
            bad.append("clone3")
        filters = [l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp")]
        print("denied" if not bad and filters == ["2", "2"] else f"allowed {{bad}} {{filters}}")
    """
    assert attack(code, [{"stdout": "denied"}]).correct
    assert code_verifier.sandbox.description.endswith("+seccomp")
    if arch.x32_bit is not None:  # a call of the x32 ABI kills the process
        x32 = f"""
            import ctypes
            ctypes.CDLL(None).syscall({arch.x32_bit | 39})
            print("LEAK")
        """
        result = attack(x32, _leak_test())
        assert result.extra["tests"][0]["detail"] == "killed by signal SIGSYS"


def test_the_memory_budget_covers_all_processes_and_scratch_files(make_code_verifier,
                                                                  sandbox_processes):
    verifier = make_code_verifier(timeout=10.0, memory_mb=128, workers=1)
    children = """
        import os, time
        for _ in range(12):
            if os.fork() == 0:
                block = bytearray(60 << 20)
                for i in range(0, len(block), 4096):
                    block[i] = 1
                time.sleep(5)
                os._exit(0)
        time.sleep(6)
        print("LEAK")
    """
    scratch = """
        import os, signal, time
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        for folder in ("/tmp", "/dev/shm", "."):
            for n in range(4):
                try:
                    with open(os.path.join(folder, f"fill{n}"), "wb") as fh:
                        for _ in range(15):
                            fh.write(b"\\1" * (1 << 20))
                except OSError:
                    pass
        time.sleep(2)
        print("LEAK")
    """
    memfd = "import os\ntry:\n    os.memfd_create('x')\n    print('LEAK')\nexcept OSError:\n    print('denied')\n"
    with verifier:
        for code in (children, scratch):
            result = verifier.verify(textwrap.dedent(code), {"tests": _leak_test()})
            assert result.status is Status.MEMORY_LIMIT, result.detail
            assert "across the completion" in result.detail
        assert verifier.verify(memfd, {"tests": [{"stdout": "denied"}]}).correct
        # Eight forks of a 40 MiB process share its pages: 360 MiB resident, 40 MiB in fact.
        forks = """
            import os, time
            block = bytearray(40 << 20)
            for i in range(0, len(block), 4096):
                block[i] = 1
            pids = []
            for _ in range(8):
                pid = os.fork()
                if pid == 0:
                    time.sleep(1)
                    os._exit(0)
                pids.append(pid)
            for pid in pids:
                os.waitpid(pid, 0)
            print("ok")
        """
        assert verifier.verify(textwrap.dedent(forks), {"tests": [{"stdout": "ok"}]}).correct
    assert sandbox_processes() == []


def test_the_process_budget_covers_all_processes(make_code_verifier):
    verifier = make_code_verifier(timeout=5.0, max_processes=16, workers=1)
    bomb = """
        import os, time
        for _ in range(100):
            try:
                if os.fork() == 0:
                    time.sleep(3)
                    os._exit(0)
            except OSError:
                pass
        time.sleep(1)
        print("LEAK")
    """
    with verifier:
        result = verifier.verify(textwrap.dedent(bomb), {"tests": _leak_test()})
        assert result.status is Status.PROCESS_LIMIT and result.reward == 0.0
        threads = "import threading\nts = [threading.Thread(target=lambda: None) for _ in range(8)]\n" \
                  "[t.start() for t in ts]\n[t.join() for t in ts]\nprint('ok')\n"
        assert verifier.verify(threads, {"tests": [{"stdout": "ok"}]}).correct


def test_one_bad_row_does_not_sink_the_batch(code_verifier):
    good = {"tests": [{"stdout": "1"}]}
    references = [good, {"language": "cobol", "tests": [{"stdout": "1"}]},
                  {"tests": [{"stdout": 1}]}, {"tests": []}, "not json", None, good]
    results = code_verifier.verify_batch(["print(1)"] * len(references), references)
    assert [r.status for r in results] == [Status.CORRECT] + [Status.BAD_REFERENCE] * 5 + [
        Status.CORRECT]
    assert all(not r.judged for r in results[1:-1])
    assert "cobol" in results[1].detail


def test_function_tests_cannot_be_faked(attack, code_verifier):
    reference = {"asserts": ["assert add(2, 2) == 4", "assert add(1, 5) == 6"]}
    fakes = {
        "patched compile": "import builtins\n_c = builtins.compile\n"
        "builtins.compile = lambda s, f, m, *a, **k: _c('0', f, m) if f == 'test' else _c(s, f, m, *a, **k)\n"
        "def add(a, b):\n    return 0\n",
        "early exit": "import os, sys\nprint('veristep-asserts-done')\nsys.stdout.flush()\nos._exit(0)\n",
        "lying __eq__": "class A:\n    def __eq__(self, other):\n        return True\n"
        "def add(a, b):\n    return A()\n",
        "lying int": "class A(int):\n    def __eq__(self, other):\n        return True\n"
        "def add(a, b):\n    return A(0)\n",
    }
    for name, code in fakes.items():
        result = code_verifier.verify(code, reference)
        assert result.reward == 0.0 and not result.correct, (name, result.detail)
        assert "fakeable" not in result.extra
    honest = code_verifier.verify("def add(a, b):\n    return a + b\n", reference)
    assert honest.correct and "fakeable" not in honest.extra
    # An assertion of another form still runs as code, and the result says so.
    loose = {"asserts": ["assert add(1, 1) in (2, 3)"]}
    result = code_verifier.verify(fakes["lying __eq__"], loose)
    assert result.extra["fakeable"] is True and result.extra["tests"][0]["fakeable"] is True


def test_a_new_completion_gets_a_fresh_pid_namespace(attack):
    forker = """
        import os
        for _ in range(100):
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
        print("forked")
    """
    assert attack(forker, [{"stdout": "forked"}]).correct
    look = "import os\nprint(os.getpid(), sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
    assert attack(look, [{"stdout": "2 [1, 2]"}]).correct

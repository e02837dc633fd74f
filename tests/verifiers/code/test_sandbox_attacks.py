"""Hostile programs. Each prints the expected answer only if its attack works, so a sandbox
leak shows up as a passing test (reward > 0) and fails the assertion here. After every attack
the verifier must have returned within its limits, left no process behind, and still pass a
benign program.

Run once without isolation to watch the attacks succeed (they must then fail here):
    VERISTEP_ATTACK_ISOLATION=rlimits-only pytest tests/verifiers/test_sandbox_attacks.py
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
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
        assert result.extra["isolation"] == code_verifier.isolation.value
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
    assert result.reward == 0.0 and result.status is Status.WRONG_ANSWER
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
        assert result.extra["passed"] == 1 and result.extra["tests"][1]["status"] == "wrong_answer"
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
    assert result.reward == 0.0 and result.status is Status.WRONG_ANSWER


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
    assert result.reward == 0.0 and result.status is Status.WRONG_ANSWER


def test_host_processes_are_invisible_and_unsignalable(attack):
    marker = f"veristep-victim-{secrets.token_hex(6)}"
    identity = {"user": 65534, "group": 65534, "extra_groups": []} if os.geteuid() == 0 else {}
    victim = subprocess.Popen(
        ["/bin/sh", "-c", "sleep 120; :", marker], **identity
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
        victim.kill()
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
    assert result.reward == 0.0 and result.status is Status.WRONG_ANSWER


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
    assert result.reward == 0.0 and result.status is Status.WRONG_ANSWER


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
    assert result.reward == 0.0 and result.status is Status.WRONG_ANSWER
    exponential = """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """
    result = attack(exponential, _leak_test())
    assert result.reward == 0.0 and result.status is Status.TIMEOUT


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
    assert result.extra["passed"] == 1 and result.extra["tests"][1]["status"] == "wrong_answer"


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
    assert result.reward == 0.0 and result.status is Status.WRONG_ANSWER


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
    assert result.extra["passed"] == 1 and result.extra["tests"][1]["status"] == "wrong_answer"

"""Run untrusted programs isolated and resource-limited: bubblewrap, or rlimits-only on opt-in.

A `Sandbox` keeps one long-lived sandbox process per thread (one bubblewrap container, or one
unprivileged process tree) whose supervisor (verifiers/code/supervisor.py) is a zygote: it never
sees any completion's data, and forks for every completion a fresh container (new user,
mount, PID, IPC and network namespaces, fresh tmpfs folders, /proc and mqueue). That
container serves the completion's compile and test steps, each in a fresh process with fresh
folders, and every process it made dies before the next step. `Sandbox.session()` is one
completion. Starting the sandbox is paid once per thread; a completion's container costs a few
milliseconds.

Isolation levels, strongest first:

- ``bwrap``: bubblewrap with new user, PID, network, IPC, UTS and cgroup namespaces; only
  /usr (and the interpreter's prefix or virtual environment) bound read-only; a read-only root;
  no environment from the caller; a seccomp filter (verifiers/code/seccomp.py); the program runs as
  uid 65534 without capabilities (as host uid 65534 too when the caller is root), in a
  completion container of its own, and the sandbox dies with the thread that started it.
- ``namespaces``: the same without bubblewrap: util-linux ``unshare`` creates the namespaces,
  the supervisor builds the root itself (bind mounts, tmpfs, pivot_root) and installs the
  seccomp filter. Needs unprivileged user namespaces.
- ``rlimits-only``: resource limits, a private working folder, a clean environment, a
  dropped uid when the caller is root, the seccomp filter, and process-group kill. It is no
  security boundary: the program sees the host's files, processes and network, and its memory
  and process limits are per process. Used only with ``allow_unsandboxed=True``.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import functools
import marshal
import math
import os
import secrets
import selectors
import shutil
import signal
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import seccomp

#: Unprivileged uid/gid the program runs as (the traditional "nobody").
SANDBOX_UID = 65534
SANDBOX_GID = 65534
#: Working folder inside a bwrap or namespaces sandbox.
SANDBOX_WORKDIR = "/sandbox"

_HERE = Path(__file__).parent
# plain_data.py first: the supervisor encodes function-call results with it.
_SUPERVISOR_SOURCE = (_HERE / "plain_data.py").read_text(encoding="utf-8") + "\n" + (
    _HERE / "supervisor.py"
).read_text(encoding="utf-8")
# util-linux unshare: the supervisor starts as root of new user, mount, PID, network, IPC and
# UTS namespaces and builds its root itself (see supervisor._confine).
_UNSHARE = [
    "unshare", "--user", "--map-root-user", "--mount", "--propagation", "private", "--pid",
    "--fork", "--kill-child", "--net", "--ipc", "--uts", "--",
]  # fmt: skip
# Host-side slack on top of a step's own wall limit before the whole sandbox counts as hung.
_HOST_SLACK_S = 10.0
_START_TIMEOUT_S = 20.0
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


class Isolation(str, enum.Enum):
    """How strongly a sandbox separates the program from the host."""

    BWRAP = "bwrap"
    NAMESPACES = "namespaces"
    RLIMITS_ONLY = "rlimits-only"

    def __str__(self) -> str:
        return self.value

    @property
    def isolated(self) -> bool:
        """Whether this level puts the program in its own namespaces."""
        return self is not Isolation.RLIMITS_ONLY


class SandboxError(RuntimeError):
    """The sandbox itself failed (could not start, hung, broke protocol): not the program's fault."""


class SandboxUnavailable(ValueError):
    """No acceptable isolation level can run here with the given configuration."""


@dataclass(frozen=True)
class Limits:
    """Resource limits for one step (one compile or one test run).

    `memory_mb` and `processes` hold for all of the completion's processes together (at the
    bwrap and namespaces levels; per process at rlimits-only); `memory_mb` also caps each
    process's address space.
    """

    wall_s: float = 2.0
    cpu_s: float | None = None
    memory_mb: int = 512
    processes: int = 64
    file_mb: int = 16
    open_files: int = 64
    output_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        for name in ("wall_s", "memory_mb", "processes", "file_mb", "open_files", "output_bytes"):
            if not getattr(self, name) > 0:
                raise ValueError(f"Limits.{name} must be positive, got {getattr(self, name)!r}")
        if self.cpu_s is not None and not self.cpu_s > 0:
            raise ValueError(f"Limits.cpu_s must be positive or None, got {self.cpu_s!r}")

    def to_wire(self) -> dict[str, Any]:
        """Return the form the supervisor reads; CPU defaults to the wall limit + 1 s."""
        cpu = self.cpu_s if self.cpu_s is not None else self.wall_s + 1
        return {
            "wall_s": float(self.wall_s),
            "cpu_s": max(1, math.ceil(cpu)),
            "memory_mb": int(self.memory_mb),
            "processes": int(self.processes),
            "file_mb": int(self.file_mb),
            "open_files": int(self.open_files),
            "output_bytes": int(self.output_bytes),
        }


@dataclass
class StepResult:
    """What one process run inside the sandbox did."""

    exit_code: int | None
    signal: int | None
    stdout: str
    stderr: str
    wall_s: float
    timed_out: bool
    output_limited: bool
    #: JSON lines the supervisor's Python driver wrote (compile errors, call results).
    report: str = ""
    #: "memory", "mappings" (more memory mappings than `mapping_limit`) or "processes" when
    #: the watchdog stopped the completion at its budget.
    limit: str | None = None
    peak_memory_bytes: int | None = None
    #: Memory mappings the completion's processes may hold together: one per 4 KiB of memory_mb.
    mapping_limit: int | None = None
    #: A Python step ran the program as an earlier step of this completion compiled it.
    precompiled: bool = False

    @property
    def ok(self) -> bool:
        """Exited with status 0 within its limits."""
        return (self.exit_code == 0 and not self.timed_out and not self.output_limited
                and self.limit is None)


class _SandboxProcess:
    """One started sandbox: its launcher process, pipes and the zygote's nonce."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self.pid: int | None = None
        self._stdin: int | None = None
        self._stdout: int | None = None
        self._stderr: int | None = None
        self._selector: selectors.BaseSelector | None = None
        # Appended to in place: a reply of tens of MiB arrives in pipe-sized chunks, and
        # `bytes +=` would copy all that came before for each one (quadratic, holding the GIL).
        self._buffer = bytearray()
        self._hostdir: str | None = None
        self._nonce = secrets.token_hex(16)
        self._owner = os.getpid()  # a forked copy of this process must not touch the sandbox
        self.python_version = ""
        self.start_s = 0.0

    def start(self) -> None:
        """Launch the sandbox (posix_spawn, so no pipe of ours waits on a fork) and wait for it."""
        t0 = time.perf_counter()
        argv, init, filter_bytes = self.sandbox._launch_plan(self)
        init["nonce"] = self._nonce
        try:
            self.pid, self._stdin, self._stdout, self._stderr = _spawn(argv, filter_bytes)
        except OSError as err:
            self.close()
            raise SandboxError(f"could not start the sandbox: {err}") from err
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._stdout, selectors.EVENT_READ)
        reply = self.request(init, _START_TIMEOUT_S)
        self.python_version = str(reply.get("python", ""))
        self.start_s = time.perf_counter() - t0

    @property
    def alive(self) -> bool:
        """Whether the sandbox process is still running."""
        if self.pid is None or os.getpid() != self._owner:
            return False
        try:
            return os.waitpid(self.pid, os.WNOHANG) == (0, 0)
        except ChildProcessError:
            return False

    def send(self, message: dict[str, Any]) -> None:
        """Write one frame."""
        if self._stdin is None:
            raise SandboxError("the sandbox is not running")
        data = marshal.dumps(message)
        view = memoryview(struct.pack("<I", len(data)) + data)
        try:
            while view:
                view = view[os.write(self._stdin, view):]
        except OSError as err:
            self.fail(f"sandbox closed its input ({err})")

    def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send one frame and return the reply (SandboxError on any failure)."""
        self.send(message)
        frame = self._read_frame(time.monotonic() + timeout)
        try:
            reply = marshal.loads(frame)
        except (EOFError, ValueError, TypeError):
            self.fail("unreadable supervisor reply")
        if not isinstance(reply, dict) or reply.get("nonce") != self._nonce:
            self.fail("supervisor reply without this sandbox's nonce")
        if "error" in reply:
            self.fail(str(reply["error"]))
        return reply

    def close(self) -> None:
        """Stop the sandbox and everything in it; idempotent."""
        pid, self.pid = self.pid, None
        if os.getpid() != self._owner:
            pid = None  # only the process that started the sandbox stops it
        if self._stdin is not None:
            os.close(self._stdin)
            self._stdin = None
        if pid is not None:
            # On end of input the zygote exits at once and its namespaces (tmpfs and every
            # process) go with it; wait briefly for that, then kill whatever is left.
            if not _wait_pid(pid, 2.0):
                _kill_group(pid)
        for fd in (self._stdout, self._stderr):
            if fd is not None:
                os.close(fd)
        self._stdout = self._stderr = None
        if self._selector is not None:
            self._selector.close()
            self._selector = None
        if self._hostdir is not None:
            _remove_tree(self._hostdir)
            self._hostdir = None

    def fail(self, why: str) -> None:
        """Kill the sandbox and raise SandboxError with its last stderr."""
        stderr = b""
        if self.pid is not None and os.getpid() == self._owner:
            _kill_group(self.pid)
            self.pid = None
        if self._stderr is not None:
            os.set_blocking(self._stderr, False)
            try:
                stderr = os.read(self._stderr, 4096)
            except OSError:
                pass
        self.close()
        tail = stderr.decode("utf-8", "replace").strip()
        raise SandboxError(f"{why}" + (f": {tail}" if tail else ""))

    def _read_frame(self, deadline: float) -> bytes:
        """Read one length-prefixed frame from the supervisor before `deadline`."""
        if self._stdout is None or self._selector is None:
            raise SandboxError("the sandbox is not running")
        size: int | None = None
        while True:
            if size is None and len(self._buffer) >= 4:
                (size,) = struct.unpack("<I", self._buffer[:4])
            if size is not None and len(self._buffer) >= 4 + size:
                frame = bytes(self._buffer[4 : 4 + size])
                del self._buffer[: 4 + size]
                return frame
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.fail("sandbox did not answer in time")
            if not self._selector.select(remaining):
                continue
            chunk = os.read(self._stdout, 1 << 20)
            if not chunk:
                self.fail("sandbox exited")
            self._buffer += chunk


class SandboxSession:
    """One completion's container: `run`/`compile`/`call` any number of steps, then close."""

    def __init__(self, process: _SandboxProcess, opened: dict[str, Any]) -> None:
        self._process = process
        self.isolation = process.sandbox.isolation
        self.python_version = str(opened.get("python", ""))
        self.start_s = process.start_s

    def run(
        self,
        files: dict[str, str],
        limits: Limits,
        *,
        argv: list[str] | None = None,
        python_main: str | None = None,
        stdin: str = "",
    ) -> StepResult:
        """Run one step in a fresh folder holding `files` plus earlier compile outputs.

        Give either `argv` (executed) or `python_main` (a file run as ``__main__`` by the
        sandbox's own interpreter in a forked child, which skips interpreter start-up; a
        syntax error is reported before any of it runs).
        """
        if (argv is None) == (python_main is None):
            raise ValueError("give exactly one of argv or python_main")
        request: dict[str, Any] = {"op": "run", "files": files, "stdin": stdin,
                                   "limits": limits.to_wire()}
        if argv is not None:
            request["argv"] = list(argv)
        else:
            request["python_main"] = python_main
        return self._step(request, limits)

    def call(
        self,
        files: dict[str, str],
        limits: Limits,
        *,
        solution: str,
        calls: list[dict[str, Any]],
        prelude: str = "",
        setup: str = "",
        fn_name: str | None = None,
    ) -> StepResult:
        """Run `solution` as module ``solution`` after `prelude`, then `setup`, then evaluate
        each call (``{"expr": source}``, or ``{"args": plain}`` applied to `fn_name`); each
        return value comes back as plain data in `StepResult.report`."""
        request = {
            "op": "run", "files": files, "stdin": "", "limits": limits.to_wire(),
            "python_calls": {"solution": solution, "calls": calls, "prelude": prelude,
                             "setup": setup, "fn_name": fn_name},
        }  # fmt: skip
        return self._step(request, limits)

    def compile(
        self, files: dict[str, str], argv: list[str], keep: list[str], limits: Limits
    ) -> StepResult:
        """Run a compiler; on success the files named in `keep` appear in every later step."""
        request = {
            "op": "compile",
            "files": files,
            "argv": list(argv),
            "keep": list(keep),
            "limits": limits.to_wire(),
        }
        return self._step(request, limits)

    def _step(self, request: dict[str, Any], limits: Limits) -> StepResult:
        reply = self._process.request(request, limits.wall_s + _HOST_SLACK_S)
        try:
            return StepResult(
                exit_code=reply["exit_code"],
                signal=reply["signal"],
                stdout=reply["stdout"],
                stderr=reply["stderr"],
                wall_s=float(reply["wall_s"]),
                timed_out=bool(reply["timed_out"]),
                output_limited=bool(reply["output_limited"]),
                report=str(reply.get("report", "")),
                limit=reply.get("limit"),
                peak_memory_bytes=reply.get("peak_memory_bytes"),
                mapping_limit=reply.get("mapping_limit"),
                precompiled=bool(reply.get("precompiled", False)),
            )
        except (KeyError, TypeError, ValueError) as err:
            self._process.fail(f"malformed supervisor reply ({err})")
            raise  # unreachable: fail() raises


class Sandbox:
    """Sandboxes at one isolation level, chosen (and probed) at construction; one per thread.

    `isolation=None` picks the strongest level that works here. Without namespace isolation
    the constructor raises `SandboxUnavailable` unless `allow_unsandboxed=True`. `python`
    chooses the interpreter programs run with: an executable, or a virtual environment or
    prefix folder (its ``bin/python3``); it and its packages are mounted read-only. The
    default is the interpreter veristep runs on, without veristep's virtual environment
    (the standard library and the system's packages).
    """

    def __init__(
        self,
        isolation: Isolation | str | None = None,
        *,
        allow_unsandboxed: bool = False,
        python: str | os.PathLike[str] | None = None,
        tmpfs_mb: int = 64,
        test_pid_namespace: bool = False,
    ) -> None:
        if tmpfs_mb <= 0:
            raise ValueError(f"tmpfs_mb must be positive, got {tmpfs_mb!r}")
        self.tmpfs_mb = int(tmpfs_mb)
        #: Each test in PID (and user) namespaces of its own (off by default: it costs about
        #: 20 ms per test, benchmarks/code_verify_bench.py); off where the kernel refuses
        #: the nested namespaces (the probe then retries without).
        self.test_pid_namespace = bool(test_pid_namespace)
        self.allow_unsandboxed = allow_unsandboxed
        self._init_threads()
        requested = Isolation(isolation) if isolation is not None else None
        if requested is Isolation.RLIMITS_ONLY and not allow_unsandboxed:
            raise SandboxUnavailable(
                "isolation='rlimits-only' runs untrusted code without namespace isolation; "
                "pass allow_unsandboxed=True to accept that"
            )
        candidates = [resolve_python(python)] if python else _python_candidates()
        levels = [requested] if requested else list(Isolation)
        failures: list[str] = []
        for level in levels:
            if level is Isolation.RLIMITS_ONLY and not allow_unsandboxed:
                failures.append(
                    "rlimits-only: refused (no namespace isolation); pass allow_unsandboxed=True"
                )
                continue
            # A host-unprivileged program beats a preferred interpreter: try every
            # interpreter as uid 65534 before any as a mapped root.
            for drop in _drop_choices():
                for exe in candidates:
                    error = _probe(level, exe, drop, self.tmpfs_mb, self.test_pid_namespace)
                    if error is not None and self.test_pid_namespace and level.isolated:
                        if _probe(level, exe, drop, self.tmpfs_mb, False) is None:
                            error, self.test_pid_namespace = None, False
                    if error is None:
                        self.isolation, self.python, self._drop = level, exe, drop
                        return
                    failures.append(f"{level} with {exe}{' as uid 65534' if drop else ''}: {error}")
        raise SandboxUnavailable(
            "no sandbox can run untrusted code here. Install bubblewrap (Debian/Ubuntu: "
            "apt-get install bubblewrap) for isolated runs, or pass allow_unsandboxed=True "
            "to accept rlimits-only execution. Tried:\n  " + "\n  ".join(failures)
        )

    @classmethod
    def _configured(cls, level: Isolation, python: str, drop: bool, tmpfs_mb: int,
                    test_pid_namespace: bool = False) -> Sandbox:
        """A sandbox with its settings given, not probed (what the probe itself starts)."""
        sandbox = cls.__new__(cls)
        sandbox.isolation, sandbox.python, sandbox._drop = level, python, drop
        sandbox.tmpfs_mb, sandbox.allow_unsandboxed = tmpfs_mb, True
        sandbox.test_pid_namespace = test_pid_namespace
        sandbox._init_threads()
        return sandbox

    def _init_threads(self) -> None:
        self._local = threading.local()
        self._lock = threading.Lock()
        self._processes: list[tuple[threading.Thread, _SandboxProcess]] = []

    @property
    def seccomp(self) -> bool:
        """Whether programs run under the seccomp filters (every supported machine)."""
        return seccomp.machine_arch() is not None

    @property
    def description(self) -> str:
        """The isolation level and the seccomp filter, e.g. ``bwrap+seccomp``."""
        return f"{self.isolation.value}{'+seccomp' if self.seccomp else ''}"

    @contextlib.contextmanager
    def session(self) -> Iterator[SandboxSession]:
        """One completion's fresh container, in this thread's sandbox (started if needed)."""
        process, opened = self._open()
        try:
            yield SandboxSession(process, opened)
        except BaseException:
            # A step may be half-way through the protocol: this sandbox is not reused.
            self._discard(process)
            raise
        try:
            process.send({"op": "close"})  # no reply: the zygote reads the next "open"
        except SandboxError:
            self._discard(process)

    def close(self) -> None:
        """Stop every sandbox of every thread."""
        with self._lock:
            processes, self._processes = self._processes, []
        for _, process in processes:
            process.close()
        self._local = threading.local()

    def _open(self) -> tuple[_SandboxProcess, dict[str, Any]]:
        for attempt in range(2):  # a sandbox that died between completions is replaced once
            process = self._thread_process()
            try:
                return process, process.request({"op": "open"}, _START_TIMEOUT_S)
            except SandboxError:
                self._discard(process)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _thread_process(self) -> _SandboxProcess:
        process: _SandboxProcess | None = getattr(self._local, "process", None)
        if process is not None and process.alive:
            return process
        if process is not None:
            self._discard(process)
        process = _SandboxProcess(self)
        process.start()
        self._local.process = process
        with self._lock:
            # A sandbox dies with the thread that started it; release the pipes of those.
            ended = [p for t, p in self._processes if not t.is_alive()]
            self._processes = [(t, p) for t, p in self._processes if t.is_alive()]
            self._processes.append((threading.current_thread(), process))
        for stale in ended:
            stale.close()
        return process

    def _discard(self, process: _SandboxProcess) -> None:
        process.close()
        if getattr(self._local, "process", None) is process:
            self._local.process = None
        with self._lock:
            self._processes = [(t, p) for t, p in self._processes if p is not process]

    # ---- launch plans ----------------------------------------------------------------------
    def _launch_plan(
        self, process: _SandboxProcess
    ) -> tuple[list[str], dict[str, Any], bytes | None]:
        argv, init, filter_bytes = _launch_plan(self.isolation, self.python, self._drop,
                                                self.tmpfs_mb, process)
        init["test_pid_namespace"] = self.test_pid_namespace
        return argv, init, filter_bytes


def _launch_plan(
    level: Isolation, python: str, drop: bool, tmpfs_mb: int, process: _SandboxProcess | None
) -> tuple[list[str], dict[str, Any], bytes | None]:
    """argv, the init frame, and the sandbox filter bubblewrap loads (None: none, or sent)."""
    # No -S: programs expect what `site` provides (exit(), quit(), dist-packages).
    supervisor = [python, "-I", "-c", _SUPERVISOR_SOURCE]
    filters = seccomp.machine_arch() is not None
    sandbox_filter = seccomp.sandbox_filter() if filters else None
    init: dict[str, Any] = {"program_filter": seccomp.program_filter() if filters else None}
    if level is Isolation.BWRAP or level is Isolation.NAMESPACES:
        env = dict(_ENV, HOME=SANDBOX_WORKDIR, TMPDIR="/tmp")
        init.update({
            "workroot": SANDBOX_WORKDIR,
            "scratch": ["/tmp", "/dev/shm", "/dev/mqueue"],
            "env": env,
            "layout": {"tmpfs": [SANDBOX_WORKDIR, "/tmp", "/dev/shm"],
                       "tmpfs_bytes": tmpfs_mb * 1024 * 1024,
                       "keep": _interpreter_binds(python)},
        })  # fmt: skip
        if level is Isolation.BWRAP:
            bwrap = _bwrap_argv(python, drop, env, seccomp_fd=3 if filters else None)
            return _launched(bwrap + supervisor, drop), init, sandbox_filter
        init["confine"] = {"workroot": SANDBOX_WORKDIR, "binds": _interpreter_binds(python)}
        init["sandbox_filter"] = sandbox_filter
        return _launched(_UNSHARE + supervisor, drop), init, None
    hostdir = tempfile.mkdtemp(prefix="veristep-sandbox-")
    work, tmp = os.path.join(hostdir, "work"), os.path.join(hostdir, "tmp")
    for folder in (work, tmp):
        os.mkdir(folder, 0o700)
    if drop:
        for folder in (hostdir, work, tmp):
            os.chown(folder, SANDBOX_UID, SANDBOX_GID)
    if process is not None:
        process._hostdir = hostdir
    env = dict(_ENV, HOME=work, TMPDIR=tmp)
    init.update({"workroot": work, "scratch": [tmp], "env": env, "sandbox_filter": sandbox_filter})
    return _launched(supervisor, drop), init, None


# Run by this process's own interpreter in front of the sandbox: become uid 65534 (when asked),
# die with the thread that started us (the parent-death signal survives the exec that
# follows), then exec the sandbox. Nothing is imported after the uid switch: the interpreter's
# own files may be unreadable to uid 65534.
_LAUNCHER = f"""\
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
parent, drop = int(sys.argv[1]), sys.argv[2] == "1"
if drop:
    os.setgroups([])
    os.setresgid({SANDBOX_GID}, {SANDBOX_GID}, {SANDBOX_GID})
    os.setresuid({SANDBOX_UID}, {SANDBOX_UID}, {SANDBOX_UID})
libc.prctl(1, 9, 0, 0, 0)
if os.getppid() != parent:
    os._exit(1)
os.execv(sys.argv[3], sys.argv[3:])
"""


def _launched(command: list[str], drop: bool) -> list[str]:
    """`command` behind the launcher: as uid 65534 when `drop`, killed when our thread dies
    (PR_SET_PDEATHSIG: `unshare` has no --die-with-parent of its own)."""
    return [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(os.getpid()), "1" if drop else "0",
            shutil.which(command[0]) or command[0], *command[1:]]


def _bwrap_argv(python: str, drop: bool, env: dict[str, str], seccomp_fd: int | None) -> list[str]:
    argv = [
        "bwrap", "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--as-pid-1",
        "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID), "--hostname", "sandbox",
        "--ro-bind", "/usr", "/usr",
    ]  # fmt: skip
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    for etc in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives"):
        argv += ["--ro-bind-try", etc, etc]
    for folder in _interpreter_binds(python):
        argv += ["--ro-bind", folder, folder]
    # Each completion mounts its own tmpfs over these folders and its own mqueue and /proc;
    # user namespaces stay allowed for that, and the program seccomp filter denies them.
    argv += ["--proc", "/proc", "--dev", "/dev", "--mqueue", "/dev/mqueue"]
    # No pseudo-terminals: this devpts instance is the sandbox's, shared by its completions,
    # and every pty counts against the host's kernel.pty.max. A bind without device access
    # over the multiplexer (/dev/ptmx links to it) makes opening it EACCES.
    argv += ["--ro-bind", "/dev/null", "/dev/pts/ptmx"]
    for folder in (SANDBOX_WORKDIR, "/tmp", "/dev/shm"):
        argv += ["--dir", folder]
    if not drop:
        argv += ["--cap-drop", "ALL"]
    argv += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/", "--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return argv


def resolve_python(python: str | os.PathLike[str]) -> str:
    """The interpreter for a `python=` option: an executable, or a folder's ``bin/python3``."""
    path = os.path.abspath(os.fspath(python))
    if os.path.isdir(path):
        for name in ("python3", "python"):
            candidate = os.path.join(path, "bin", name)
            if os.access(candidate, os.X_OK):
                return candidate
        raise SandboxUnavailable(f"python={python!s}: no bin/python3 in that folder")
    if not os.access(path, os.X_OK):
        raise SandboxUnavailable(f"python={python!s}: not an executable")
    return path


def _interpreter_binds(python: str) -> list[str]:
    """Folders to mount read-only for an interpreter: its virtual environment (found by
    pyvenv.cfg, as Python finds it) and the prefix of the real executable outside /usr."""
    binds: list[str] = []
    venv = os.path.dirname(os.path.dirname(python))
    if os.path.exists(os.path.join(venv, "pyvenv.cfg")) and not venv.startswith("/usr/"):
        binds.append(venv)
    real = os.path.realpath(python)
    if not real.startswith("/usr/"):
        prefix = os.path.dirname(os.path.dirname(real))
        if prefix not in binds:
            binds.append(prefix)
    return binds


def _python_candidates() -> list[str]:
    """Interpreters to try inside the sandbox: this one first, then the system's."""
    seen: list[str] = []
    for exe in (
        getattr(sys, "_base_executable", None),
        sys.executable,
        "/usr/bin/python3",
        "/usr/local/bin/python3",
    ):
        if exe and os.path.exists(exe):
            real = os.path.realpath(exe)
            if real not in seen:
                seen.append(real)
    return seen


def _drop_choices() -> list[bool]:
    """Run as uid 65534 on the host when we are root; fall back to a mapped uid otherwise."""
    return [True, False] if os.geteuid() == 0 else [False]


@functools.cache
def _probe(level: Isolation, python: str, drop: bool, tmpfs_mb: int,
           test_pid_namespace: bool = False) -> str | None:
    """Start a sandbox and run a tiny program; return why it failed, or None if it works."""
    tools = {Isolation.BWRAP: ["bwrap"], Isolation.NAMESPACES: ["unshare"]}.get(level, [])
    for tool in tools:
        if shutil.which(tool) is None:
            return f"{tool} not found on PATH"
    sandbox = Sandbox._configured(level, python, drop, tmpfs_mb, test_pid_namespace)
    probe = "import os\nprint('ok', os.getuid())\n"
    try:
        with sandbox.session() as session:
            result = session.run({"probe.py": probe}, Limits(wall_s=10), python_main="probe.py")
    except (SandboxError, OSError) as err:
        return str(err).splitlines()[0] if str(err) else type(err).__name__
    finally:
        sandbox.close()
    if not result.ok or not result.stdout.startswith("ok "):
        return f"probe program failed: {result.stderr.strip()[-300:] or result.exit_code}"
    if result.stdout.split()[1] == "0":
        return "program would run as root"
    return None


def _spawn(argv: list[str], seccomp_filter: bytes | None) -> tuple[int, int, int, int]:
    """posix_spawn `argv` in a new session with pipes on 0-2 and the filter on fd 3.

    No fork of this (possibly large, threaded) process, no exec-status pipe, and the filter in
    a memory file rather than a pipe (bubblewrap reads it to its end): nothing the launch waits
    for can be held open by a process another thread forks meanwhile.
    """
    opened: list[int] = []

    def high(fd: int) -> int:  # keep the sources clear of the targets 0-3
        moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(fd)
        opened.append(moved)
        return moved

    try:
        in_r, in_w = (high(fd) for fd in os.pipe())
        out_r, out_w = (high(fd) for fd in os.pipe())
        err_r, err_w = (high(fd) for fd in os.pipe())
        actions = [(os.POSIX_SPAWN_DUP2, in_r, 0), (os.POSIX_SPAWN_DUP2, out_w, 1),
                   (os.POSIX_SPAWN_DUP2, err_w, 2)]
        if seccomp_filter is not None:
            filter_fd = high(os.memfd_create("veristep-seccomp", os.MFD_CLOEXEC))
            os.write(filter_fd, seccomp_filter)
            os.lseek(filter_fd, 0, os.SEEK_SET)
            actions.append((os.POSIX_SPAWN_DUP2, filter_fd, 3))
        path = shutil.which(argv[0]) or argv[0]
        pid = os.posix_spawn(path, argv, dict(_ENV), file_actions=actions, setsid=True)
    except BaseException:
        for fd in opened:
            os.close(fd)
        raise
    for fd in opened:
        if fd not in (in_w, out_r, err_r):
            os.close(fd)
    return pid, in_w, out_r, err_r


def _wait_pid(pid: int, timeout: float) -> bool:
    """Reap `pid` within `timeout` seconds; True once it is gone."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return True
        if done:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.002)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    _wait_pid(pid, 5.0)


def _remove_tree(path: str) -> None:
    def _unlock(func: Any, target: str, _exc: Any) -> None:
        try:
            os.chmod(os.path.dirname(target), 0o700)
            os.chmod(target, 0o700)
            func(target)
        except OSError:
            pass

    shutil.rmtree(path, onerror=_unlock)


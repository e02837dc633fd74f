"""Run untrusted programs isolated and resource-limited: bubblewrap, or rlimits-only on opt-in.

One `SandboxSession` is one sandbox (one bubblewrap container, or one unprivileged process
tree) with a supervisor inside (verifiers/code/supervisor.py) that runs each compile or test
step in a fresh process, with fresh scratch folders, and kills everything the step left
behind before the next one starts. Starting the sandbox is paid once per session, so a
completion's tests share it without sharing state.

Isolation levels, strongest first:

- ``bwrap``: bubblewrap with new user, PID, network, IPC, UTS and cgroup namespaces; only
  /usr (and the interpreter's prefix) bound read-only; tmpfs for the working folder, /tmp and
  /dev/shm with a size cap; a read-only root; no environment from the caller; the program runs
  as uid 65534 without capabilities (as host uid 65534 too when the caller is root), cannot
  create further user namespaces, and dies with its parent.
- ``namespaces``: the same layout without bubblewrap: util-linux ``unshare`` creates the
  namespaces and the supervisor builds the root itself (bind mounts, tmpfs, pivot_root), then
  drops to uid 65534 in a nested user namespace. Needs unprivileged user namespaces.
- ``rlimits-only``: resource limits, a private working folder, a clean environment, a
  dropped uid when the caller is root, and process-group kill. It is no security boundary:
  the program sees the host's files, processes and network. Used only with
  ``allow_unsandboxed=True``.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import marshal
import math
import os
import secrets
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Unprivileged uid/gid the program runs as (the traditional "nobody").
SANDBOX_UID = 65534
SANDBOX_GID = 65534
#: Working folder inside a bwrap or namespaces sandbox.
SANDBOX_WORKDIR = "/sandbox"

_SUPERVISOR_SOURCE = (Path(__file__).with_name("supervisor.py")).read_text(encoding="utf-8")
# util-linux unshare: the supervisor starts as root of new user, mount, PID, network, IPC and
# UTS namespaces, builds its root and drops to uid 65534 itself (see supervisor._confine).
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
    """Resource limits for one step (one compile or one test run)."""

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
        """Return the JSON form the supervisor reads; CPU defaults to the wall limit + 1 s."""
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

    @property
    def ok(self) -> bool:
        """Exited with status 0 within its limits."""
        return self.exit_code == 0 and not self.timed_out and not self.output_limited


class SandboxSession:
    """One running sandbox; use as a context manager, then `run`/`compile` any number of steps."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self.isolation = sandbox.isolation
        self._proc: subprocess.Popen[bytes] | None = None
        self._selector: selectors.BaseSelector | None = None
        self._buffer = b""
        self._hostdir: str | None = None
        self._nonce = secrets.token_hex(16)
        self.python_version = ""
        self.start_s = 0.0
        self.completions = 0  # completions run in this session (SandboxCache replaces it after max_uses)

    def __enter__(self) -> SandboxSession:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the sandbox and wait for its supervisor to answer."""
        t0 = time.perf_counter()
        argv, cwd, init = self.sandbox._launch_plan(self)
        try:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=cwd,
                env=dict(_ENV),
                start_new_session=True,
                close_fds=True,
                **self.sandbox._popen_identity(),
            )
        except OSError as err:
            self.close()
            raise SandboxError(f"could not start the sandbox: {err}") from err
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._proc.stdout, selectors.EVENT_READ)
        init["nonce"] = self._nonce
        reply = self._request(init, _START_TIMEOUT_S)
        self.python_version = str(reply.get("python", ""))
        self.start_s = time.perf_counter() - t0

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
        sandbox's own interpreter in a forked child, which skips interpreter start-up).
        """
        if (argv is None) == (python_main is None):
            raise ValueError("give exactly one of argv or python_main")
        request = {"op": "run", "files": files, "stdin": stdin, "limits": limits.to_wire()}
        if argv is not None:
            request["argv"] = list(argv)
        else:
            request["python_main"] = python_main
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

    def reset(self) -> None:
        """Drop compile outputs and wipe the sandbox so that a new completion can use it."""
        self._request({"op": "reset"}, _HOST_SLACK_S)

    @property
    def alive(self) -> bool:
        """Whether the sandbox process is still running."""
        return self._proc is not None and self._proc.poll() is None

    def close(self) -> None:
        """Stop the sandbox and everything in it; idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                proc.stdin.close()
            except OSError:
                pass
            # On end of input the supervisor exits at once, and its namespaces (tmpfs and any
            # process) go with it; waiting for that makes the teardown finished on return.
            try:
                proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                pass
            _kill_group(proc)
            for stream in (proc.stdout, proc.stderr):
                stream.close()
        if self._selector is not None:
            self._selector.close()
            self._selector = None
        if self._hostdir is not None:
            _remove_tree(self._hostdir)
            self._hostdir = None

    # ---- internals -----------------------------------------------------------------------
    def _step(self, request: dict[str, Any], limits: Limits) -> StepResult:
        reply = self._request(request, limits.wall_s + _HOST_SLACK_S)
        try:
            return StepResult(
                exit_code=reply["exit_code"],
                signal=reply["signal"],
                stdout=reply["stdout"],
                stderr=reply["stderr"],
                wall_s=float(reply["wall_s"]),
                timed_out=bool(reply["timed_out"]),
                output_limited=bool(reply["output_limited"]),
            )
        except (KeyError, TypeError, ValueError) as err:
            self._fail(f"malformed supervisor reply ({err})")

    def _request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        if self._proc is None:
            raise SandboxError("the sandbox is not running")
        data = marshal.dumps(message)
        try:
            self._proc.stdin.write(struct.pack("<I", len(data)) + data)
            self._proc.stdin.flush()
        except OSError as err:
            self._fail(f"sandbox closed its input ({err})")
        frame = self._read_frame(time.monotonic() + timeout)
        try:
            reply = marshal.loads(frame)
        except (EOFError, ValueError, TypeError):
            self._fail("unreadable supervisor reply")
        if not isinstance(reply, dict) or reply.get("nonce") != self._nonce:
            self._fail("supervisor reply without this session's nonce")
        if "error" in reply:
            self._fail(str(reply["error"]))
        return reply

    def _read_frame(self, deadline: float) -> bytes:
        """Read one length-prefixed frame from the supervisor's stdout before `deadline`."""
        assert self._proc is not None and self._selector is not None
        fd = self._proc.stdout.fileno()
        size: int | None = None
        while True:
            if size is None and len(self._buffer) >= 4:
                (size,) = struct.unpack("<I", self._buffer[:4])
            if size is not None and len(self._buffer) >= 4 + size:
                frame, self._buffer = self._buffer[4 : 4 + size], self._buffer[4 + size :]
                return frame
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._fail("sandbox did not answer in time")
            if not self._selector.select(remaining):
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                self._fail("sandbox exited")
            self._buffer += chunk

    def _fail(self, why: str) -> None:
        proc = self._proc
        stderr = b""
        if proc is not None:
            _kill_group(proc)
            try:
                stderr = proc.stderr.read(4096) or b""
            except (OSError, ValueError):
                pass
        self.close()
        tail = stderr.decode("utf-8", "replace").strip()
        raise SandboxError(f"{why}" + (f": {tail}" if tail else ""))


class Sandbox:
    """Factory of sandbox sessions at one isolation level, chosen (and probed) at construction.

    `isolation=None` picks the strongest level that works here. Without namespace isolation
    the constructor raises `SandboxUnavailable` unless `allow_unsandboxed=True`.
    """

    def __init__(
        self,
        isolation: Isolation | str | None = None,
        *,
        allow_unsandboxed: bool = False,
        python: str | None = None,
        tmpfs_mb: int = 64,
    ) -> None:
        if tmpfs_mb <= 0:
            raise ValueError(f"tmpfs_mb must be positive, got {tmpfs_mb!r}")
        self.tmpfs_mb = int(tmpfs_mb)
        self.allow_unsandboxed = allow_unsandboxed
        requested = Isolation(isolation) if isolation is not None else None
        if requested is Isolation.RLIMITS_ONLY and not allow_unsandboxed:
            raise SandboxUnavailable(
                "isolation='rlimits-only' runs untrusted code without namespace isolation; "
                "pass allow_unsandboxed=True to accept that"
            )
        candidates = [python] if python else _python_candidates()
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
                    error = _probe(level, exe, drop, self.tmpfs_mb)
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
    def _configured(cls, level: Isolation, python: str, drop: bool, tmpfs_mb: int) -> Sandbox:
        """A sandbox with its settings given, not probed (what the probe itself starts)."""
        sandbox = cls.__new__(cls)
        sandbox.isolation, sandbox.python, sandbox._drop = level, python, drop
        sandbox.tmpfs_mb, sandbox.allow_unsandboxed = tmpfs_mb, True
        return sandbox

    def session(self) -> SandboxSession:
        """Return a new, not yet started, session (use it as a context manager)."""
        return SandboxSession(self)

    # ---- launch plans ----------------------------------------------------------------------
    def _popen_identity(self) -> dict[str, Any]:
        if self._drop:
            return {"user": SANDBOX_UID, "group": SANDBOX_GID, "extra_groups": []}
        return {}

    def _launch_plan(self, session: SandboxSession) -> tuple[list[str], str | None, dict[str, Any]]:
        return _launch_plan(self.isolation, self.python, self._drop, self.tmpfs_mb, session)


class SandboxCache:
    """Started sessions reused across completions, one per thread, reset in between.

    A cache, not a pool: a session is never handed to another thread. A sandbox is bound to
    the thread that started it (bubblewrap's --die-with-parent follows the spawning thread), so
    each thread keeps its own. The reset between completions is the same one that separates
    tests: fresh folders, wiped scratch space, IPC and keyrings, and no process left. After
    `max_uses` completions a session is replaced anyway.
    """

    def __init__(self, sandbox: Sandbox, max_uses: int = 256) -> None:
        if max_uses < 1:
            raise ValueError(f"max_uses must be >= 1, got {max_uses!r}")
        self.sandbox = sandbox
        self.max_uses = max_uses
        self._local = threading.local()
        self._lock = threading.Lock()
        self._sessions: list[tuple[threading.Thread, SandboxSession]] = []

    @contextlib.contextmanager
    def session(self) -> Iterator[SandboxSession]:
        """Yield a started, clean session; on a sandbox failure it is discarded, not reused."""
        session = self._take()
        try:
            yield session
        except BaseException:
            self._discard(session)
            raise
        session.completions += 1
        if session.completions >= self.max_uses:
            self._discard(session)

    def close(self) -> None:
        """Stop every cached sandbox."""
        with self._lock:
            sessions, self._sessions = self._sessions, []
        for _, session in sessions:
            session.close()
        self._local = threading.local()

    def _take(self) -> SandboxSession:
        session: SandboxSession | None = getattr(self._local, "session", None)
        if session is not None:
            try:
                if not session.alive:
                    raise SandboxError("reused sandbox exited")
                session.reset()
                return session
            except SandboxError:
                self._discard(session)
        session = self.sandbox.session()
        session.start()
        self._local.session = session
        with self._lock:
            # Sandboxes of threads that have ended died with them; release their pipes.
            ended = [s for t, s in self._sessions if not t.is_alive()]
            self._sessions = [(t, s) for t, s in self._sessions if t.is_alive()]
            self._sessions.append((threading.current_thread(), session))
        for stale in ended:
            stale.close()
        return session

    def _discard(self, session: SandboxSession) -> None:
        session.close()
        if getattr(self._local, "session", None) is session:
            self._local.session = None
        with self._lock:
            self._sessions = [(t, s) for t, s in self._sessions if s is not session]


def _launch_plan(
    level: Isolation, python: str, drop: bool, tmpfs_mb: int, session: SandboxSession | None
) -> tuple[list[str], str | None, dict[str, Any]]:
    # No -S: programs expect what `site` provides (exit(), quit(), dist-packages).
    supervisor = [python, "-I", "-c", _SUPERVISOR_SOURCE]
    if level is Isolation.BWRAP or level is Isolation.NAMESPACES:
        env = dict(_ENV, HOME=SANDBOX_WORKDIR, TMPDIR="/tmp")
        init: dict[str, Any] = {
            "workroot": SANDBOX_WORKDIR,
            "scratch": ["/tmp", "/dev/shm", "/dev/mqueue"],
            "env": env,
        }
        if level is Isolation.BWRAP:
            return _bwrap_argv(python, drop, tmpfs_mb, env) + supervisor, None, init
        init["confine"] = {
            "workroot": SANDBOX_WORKDIR,
            "tmpfs_bytes": tmpfs_mb * 1024 * 1024,
            "python_prefix": _interpreter_prefix(python),
        }
        return _UNSHARE + supervisor, "/", init
    hostdir = tempfile.mkdtemp(prefix="veristep-sandbox-")
    work, tmp = os.path.join(hostdir, "work"), os.path.join(hostdir, "tmp")
    for folder in (work, tmp):
        os.mkdir(folder, 0o700)
    if drop:
        for folder in (hostdir, work, tmp):
            os.chown(folder, SANDBOX_UID, SANDBOX_GID)
    if session is not None:
        session._hostdir = hostdir
    env = dict(_ENV, HOME=work, TMPDIR=tmp)
    init = {"workroot": work, "scratch": [tmp], "env": env}
    return supervisor, hostdir, init


def _bwrap_argv(python: str, drop: bool, tmpfs_mb: int, env: dict[str, str]) -> list[str]:
    features = _bwrap_features()
    size = ["--size", str(tmpfs_mb * 1024 * 1024)] if "--size" in features else []
    argv = [
        "bwrap", "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--as-pid-1",
        "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID), "--hostname", "sandbox",
        "--ro-bind", "/usr", "/usr",
    ]  # fmt: skip
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    for etc in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives"):
        argv += ["--ro-bind-try", etc, etc]
    prefix = _interpreter_prefix(python)
    if prefix is not None:
        argv += ["--ro-bind", prefix, prefix]
    argv += ["--proc", "/proc", "--dev", "/dev", "--mqueue", "/dev/mqueue"]
    for folder in (SANDBOX_WORKDIR, "/tmp", "/dev/shm"):
        argv += [*size, "--tmpfs", folder]
    if "--disable-userns" in features:
        argv += ["--disable-userns"]
    if not drop:
        argv += ["--cap-drop", "ALL"]
    argv += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", SANDBOX_WORKDIR, "--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return argv


@functools.lru_cache(maxsize=1)
def _bwrap_features() -> frozenset[str]:
    """Options this bwrap build knows (older releases lack --size and --disable-userns)."""
    try:
        text = subprocess.run(
            ["bwrap", "--help"], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    return frozenset(word for word in text.split() if word.startswith("--"))


def _interpreter_prefix(python: str) -> str | None:
    """Folder to bind for an interpreter living outside /usr (pyenv, conda), else None."""
    real = os.path.realpath(python)
    if real.startswith("/usr/"):
        return None
    return os.path.dirname(os.path.dirname(real))


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
def _probe(level: Isolation, python: str, drop: bool, tmpfs_mb: int) -> str | None:
    """Start a sandbox and run a tiny program; return why it failed, or None if it works."""
    tool = {Isolation.BWRAP: "bwrap", Isolation.NAMESPACES: "unshare"}.get(level)
    if tool is not None and shutil.which(tool) is None:
        return f"{tool} not found on PATH"
    sandbox = Sandbox._configured(level, python, drop, tmpfs_mb)
    probe = "import os\nprint('ok', os.getuid())\n"
    try:
        with sandbox.session() as session:
            result = session.run({"probe.py": probe}, Limits(wall_s=10), python_main="probe.py")
    except (SandboxError, OSError) as err:
        return str(err).splitlines()[0] if str(err) else type(err).__name__
    if not result.ok or not result.stdout.startswith("ok "):
        return f"probe program failed: {result.stderr.strip()[-300:] or result.exit_code}"
    if result.stdout.split()[1] == "0":
        return "program would run as root"
    return None


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _remove_tree(path: str) -> None:
    def _unlock(func: Any, target: str, _exc: Any) -> None:
        try:
            os.chmod(os.path.dirname(target), 0o700)
            os.chmod(target, 0o700)
            func(target)
        except OSError:
            pass

    shutil.rmtree(path, onerror=_unlock)

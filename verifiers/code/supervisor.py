"""In-sandbox supervisor: a zygote that gives every completion a fresh, clean container.

This file is not imported by veristep. Its source (after verifiers/code/plain_data.py) is passed to the
sandbox interpreter with `python -I -c`, so it must use the standard library only and run on
any Python >= 3.8.

Three kinds of process:

- the zygote, started once per sandbox. It joins a new anonymous session keyring before
  anything else, and never reads a byte of any completion's data: it reads only "open" frames,
  each of which it answers by forking a container, then waits until that container signals
  that it has stopped reading;
- per completion, a container: the zygote's fork moves into new user, mount, PID, IPC and
  network namespaces, mounts fresh tmpfs folders, a fresh /proc and mqueue, drops every
  capability and, as PID 1 of its namespace, serves that completion's compile and test steps
  from the same pipe. Forked from the zygote, it holds nothing of any earlier completion;
- per step, a test process forked from the container, limited by rlimits and the program
  seccomp filter, run under a watchdog that sums the memory of every process of the
  completion and counts them, and kills them all at the budget.

Protocol: length-prefixed marshal frames (4-byte little-endian size, then the dict), every
reply stamped with the nonce of the first request, read with exact-length reads so that a
container never consumes the zygote's next frame. Expected outputs never enter the sandbox.
"""

import atexit
import builtins
import ctypes
import errno
import fcntl
import gc
import io
import json
import marshal
import os
import resource
import select
import signal
import stat
import struct
import sys
import time
import traceback
import types

_PR_SET_DUMPABLE, _PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 4, 38, 22, 2
_PR_SET_CHILD_SUBREAPER = 36
_COMPILE_ERROR_EXIT = 102  # also stated in the report; mirrored in verifiers/code/verifier.py
_STDERR_KEEP = 4096
_WATCH_INTERVAL_S = 0.01  # how often the watchdog samples a running step
_LAST_SAMPLE_S = 1.0  # how long past its wall limit a step's last sample may take
# Memory mappings: at most one per 4 KiB of memory_mb, all processes of the completion together
# (each pins a few hundred bytes of kernel memory that no resident size shows). A process holds
# at most one per page of its VmSize, so its mappings are counted from /proc/PID/maps only when
# those bounds add up to more than the limit, and a count is reused for _MAPS_RECOUNT_S or
# longer (see _Watchdog._too_many_mappings).
_MAPPING_BYTES = 4096
_MAPS_RECOUNT_S = 0.1
_CODE_FD = 4  # where a Python test process hands its compiled program back, before running it
_CODE_MAX_BYTES = 1 << 20  # a bigger compiled program is compiled again by every test

try:
    _libc = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - static interpreters
    _libc = None


def _check(result, what):
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _set_dumpable(flag):
    if _libc is not None:
        _libc.prctl(_PR_SET_DUMPABLE, int(flag), 0, 0, 0)


class _Fprog(ctypes.Structure):
    """struct sock_fprog: the filter's length in instructions and its address."""

    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


def _filter_prog(program):
    """The sock_fprog of a filter (a struct sock_filter array); it keeps `program` alive.

    Built once per sandbox, before any fork: each test process only installs it.
    """
    return _Fprog(len(program) // 8, program)


def _install_filter(prog):
    """Stack a seccomp filter (a `_filter_prog`) on this thread and its children."""
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    _check(_libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0), "seccomp")


# ---- frames ----------------------------------------------------------------------------------
def _read_exact(fd, size):
    chunks = []
    while size:
        data = os.read(fd, size)
        if not data:
            return None
        chunks.append(data)
        size -= len(data)
    return b"".join(chunks)


def _read_frame(fd):
    header = _read_exact(fd, 4)
    if header is None:
        return None
    body = _read_exact(fd, struct.unpack("<I", header)[0])
    return None if body is None else marshal.loads(body)


def _write_frame(fd, message):
    data = marshal.dumps(message)
    view = memoryview(struct.pack("<I", len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


# ---- the zygote ------------------------------------------------------------------------------
_KEYCTL_JOIN_SESSION_KEYRING = 1
_SYS_KEYCTL = {"x86_64": 250, "aarch64": 219, "riscv64": 219, "ppc64le": 271, "s390x": 280}


def _join_new_session_keyring():
    """Leave the caller's session keyring for a new anonymous one (as runc does per container)."""
    number = _SYS_KEYCTL.get(os.uname().machine)
    if _libc is None or number is None:
        return "no keyctl"
    if _libc.syscall(number, _KEYCTL_JOIN_SESSION_KEYRING, None) < 0:
        return os.strerror(ctypes.get_errno())
    return None


_AUTOGROUP_TRIES = 20  # the kernel takes one such write per 0.1 s from unprivileged callers


def _autogroup_at_own_nice():
    """Give this session's scheduling group (Linux autogroup) this process's own nice value.

    The sandbox runs in a session of its own, and where autogroup is on, each session is one
    scheduling group weighed against the caller's whole session by the group's nice value,
    not its processes' (a new group starts at 0). Without this, a sandbox started at nice 10
    gets as much CPU as all of the caller's threads together. A program can set the group
    back to 0 (any value >= 0 is its own to set), which is only the weight it had before.
    """
    try:
        nice = os.getpriority(os.PRIO_PROCESS, 0)
    except OSError:
        return
    if nice <= 0:
        return  # a new group already starts at 0
    for _ in range(_AUTOGROUP_TRIES):
        try:
            fd = os.open("/proc/self/autogroup", os.O_WRONLY)
        except OSError:
            return  # no autogroup in this kernel, or no /proc
        try:
            os.write(fd, str(nice).encode())
            return
        except OSError as err:
            if err.errno != errno.EAGAIN:
                return
        finally:
            os.close(fd)
        time.sleep(0.05)


def main():
    _autogroup_at_own_nice()  # while dumpable: /proc/self of a non-dumpable process is root's
    _set_dumpable(False)
    # Whatever the launcher left open beyond the protocol pipes belongs to the caller.
    os.closerange(3, _max_fd())
    # Outside a PID namespace the supervisor must outlive SIGTERM/SIGINT a program sends it.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    keyring_error = _join_new_session_keyring()  # before anything else, keyrings are the caller's
    init = _read_frame(0)
    if init is None:
        os._exit(0)
    nonce = init["nonce"]
    try:
        if keyring_error is not None:
            raise OSError(errno.EPERM, "cannot join a new session keyring: " + keyring_error)
        if init.get("sandbox_filter"):  # no bubblewrap to install it for us
            _install_filter(_filter_prog(init["sandbox_filter"]))
        if "confine" in init:
            # The zygote keeps its capabilities in this user namespace: mapping its uid 0 into
            # a completion's namespace needs CAP_SETFCAP. Each container drops them all.
            _confine(init["confine"])
            _set_dumpable(False)
    except OSError as err:
        _write_frame(1, {"nonce": nonce, "error": f"sandbox set-up: {err}"})
        os._exit(1)
    _preimport()
    # Set up once here, for every completion and test forked from us: the programs'
    # environment and the program filter's structure (making them in each test process cost
    # a good share of a short test).
    if init.get("program_filter"):
        init["program_fprog"] = _filter_prog(init["program_filter"])
    os.environ.clear()
    os.environ.update(init["env"])
    _write_frame(1, {"nonce": nonce, "ready": True, "python": sys.version.split()[0]})
    while True:
        req = _read_frame(0)
        _reap_all()
        if req is None or req.get("op") != "open":
            os._exit(0)  # end of input, or a frame that is not ours to read: stop everything
        done_r, done_w = os.pipe()
        gc.freeze()
        pid = os.fork()
        if pid == 0:
            os.close(done_r)
            _container_main(init, done_w)  # never returns
        os.close(done_w)
        # It forks the container's PID 1 and exits: reap it now, or as a zombie it would
        # count against the container's process limit (RLIMIT_NPROC counts per user namespace).
        os.waitpid(pid, 0)
        # Until the container has read its last frame the pipe is its: block here, not on stdin.
        clean = os.read(done_r, 1) == b"1"
        os.close(done_r)
        if not clean:
            os._exit(1)  # it died mid-completion; the host discards this sandbox


# Modules most test programs import: loaded once here, every test forks with them in memory.
_PREIMPORT = ("typing", "collections", "math", "re", "itertools", "functools", "heapq",
              "bisect", "string", "traceback")


def _preimport():
    for name in _PREIMPORT:
        try:
            __import__(name)
        except ImportError:
            pass
    # Without one compile here, every completion's first test maps a fresh 1 MiB allocator
    # arena to compile the program in: 1.36 ms of that test against 0.12 ms after this (staged
    # timings of the forked test process, one worker; the mmap seen with strace).
    compile("def _(x):\n    return [x, {x: (1.5, 'x')}]\n", "<warm-up>", "exec",
            dont_inherit=True)


def _max_fd():
    try:
        return min(resource.getrlimit(resource.RLIMIT_NOFILE)[0], 1 << 16)
    except (OSError, ValueError):
        return 1 << 16


# ---- one completion's container ----------------------------------------------------------------
_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWUSER = 0x20000, 0x08000000, 0x10000000
_CLONE_NEWPID, _CLONE_NEWNET = 0x20000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_SANDBOX_ID = 65534


def _container_main(init, done_w):
    """Build this completion's container and serve its steps; exits, never returns."""
    nonce = init["nonce"]
    try:
        layout = init.get("layout")
        if layout is not None:
            _enter_fresh_namespaces(layout)
            if os.fork() != 0:
                os._exit(0)  # the zygote adopts the container (PID 1 of the new namespace)
            _mount_fresh_proc()
            _drop_capabilities()
        else:  # rlimits-only: no namespaces; the host folders, emptied
            for folder in init["scratch"] + [init["workroot"]]:
                _clear_folder(folder)
            # Orphaned processes come to us, so that their zombies are ours to reap.
            _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        _set_dumpable(False)
        supervisor = Supervisor(init)
    except Exception as err:  # noqa: BLE001 - reported to the host, which discards the sandbox
        _write_frame(1, {"nonce": nonce, "error": f"completion set-up: {err}"})
        os._exit(1)
    _write_frame(1, {"nonce": nonce, "opened": True, "python": sys.version.split()[0],
                     "pid1": supervisor.is_pid1})
    while True:
        req = _read_frame(0)
        if req is None or req.get("op") == "close":
            break
        _write_frame(1, supervisor.step(req))
    supervisor.kill_all()
    os.write(done_w, b"1")
    os._exit(0)


def _enter_fresh_namespaces(layout):
    uid, gid = os.getuid(), os.getgid()
    # /proc/self/*_map of a non-dumpable process belong to root: writable only while dumpable.
    # No program runs yet; the container turns it off again before it reads any step.
    _set_dumpable(True)
    _check(_libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWIPC
                         | _CLONE_NEWNET), "unshare")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{_SANDBOX_ID} {uid} 1"),
                       ("gid_map", f"{_SANDBOX_ID} {gid} 1")):
        # os-level writes: with text-file objects the three took 0.40 ms here, not 0.14.
        _write("/proc/self/" + name, text.encode(), 0o600)
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    # Inodes and dentries are kernel memory the watchdog does not see: one per page at most.
    size = (f"size={layout['tmpfs_bytes']},nr_inodes={max(layout['tmpfs_bytes'] // 4096, 1024)},"
            "mode=0700")
    for folder in layout["tmpfs"]:
        # An interpreter's folder below a scratch folder (a virtual environment in /tmp) is
        # bound again on top of the fresh tmpfs, read-only like the mount it comes from.
        kept = [(path, os.open(path, os.O_PATH)) for path in layout.get("keep", [])
                if path.startswith(folder.rstrip("/") + "/")]
        _mount("tmpfs", folder, "tmpfs", _MS_NOSUID | _MS_NODEV, size)
        for path, fd in kept:
            os.makedirs(path, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC)
            os.close(fd)
    if os.path.isdir("/dev/mqueue"):
        _mount("mqueue", "/dev/mqueue", "mqueue", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)


def _mount_fresh_proc():
    """/proc of this PID namespace only, with the kernel-wide key lists hidden."""
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    for path in ("/proc/keys", "/proc/key-users"):
        if os.path.exists(path):
            _mount("/dev/null", path, None, _MS_BIND)


class Supervisor:
    """Runs one completion's steps, each in a fresh process with fresh folders."""

    def __init__(self, init):
        self.nonce = init["nonce"]
        self.workroot = init["workroot"]
        self.scratch = list(init["scratch"])
        self.env = dict(init["env"])
        self.program_filter = init.get("program_fprog")  # built by the zygote (see main)
        self.artifacts = {}
        self.counter = 0
        # (path, source bytes, code object): the program as this completion's first Python test
        # compiled it, so that its later tests skip the compiler (a third of a short test's CPU,
        # mostly copy-on-write page faults in the forked process).
        self.compiled = None
        self.is_pid1 = os.getpid() == 1
        # Each test in a PID namespace of its own (inside a user namespace of its own, which
        # needs no privilege): its processes cannot see or signal another test's.
        self.test_pid_ns = self.is_pid1 and bool(init.get("test_pid_namespace", False))

    def step(self, req):
        self._reset_folders()
        self.counter += 1
        # One path for every step, so that a compiled program (its file name is in it) fits
        # them all; a new one if an earlier step left this one behind.
        workdir = os.path.join(self.workroot, "run")
        if os.path.lexists(workdir):
            workdir = os.path.join(self.workroot, f"run{self.counter}")
        os.mkdir(workdir, 0o700)
        try:
            for name, data in self.artifacts.items():
                _write(os.path.join(workdir, name), data, 0o700)
            for name, text in req.get("files", {}).items():
                _write(os.path.join(workdir, name), text.encode("utf-8", "surrogatepass"), 0o600)
        except OSError as err:
            # The program's own size (ENOSPC in the work folder): a failed step, not a crash.
            return self._unwritten(err)
        reply = self._run(req, workdir)
        if req.get("op") == "compile" and reply["exit_code"] == 0 and not reply["timed_out"]:
            for name in req.get("keep", []):
                try:
                    with open(os.path.join(workdir, name), "rb") as fh:
                        self.artifacts[name] = fh.read()
                except OSError as err:
                    reply["exit_code"] = 1
                    reply["stderr"] += f"\nveristep: compiler produced no {name} ({err})"
        return reply

    def _unwritten(self, err):
        """The reply of a step whose files did not fit in its folder: exit status 1."""
        return {
            "nonce": self.nonce, "exit_code": 1, "signal": None, "stdout": "",
            "stderr": f"veristep: the program's files do not fit in its folder ({err.strerror})",
            "report": "", "wall_s": 0.0, "timed_out": False, "output_limited": False,
            "limit": None, "peak_memory_bytes": None, "precompiled": False,
        }

    def _run(self, req, workdir):
        limits = req["limits"]
        stdin_fd = _stdin_file(req.get("stdin", "").encode("utf-8", "surrogatepass"))
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        rep_r, rep_w = os.pipe()
        source = _python_source(req, workdir)
        code = code_r = code_w = None
        # Only as PID 1: then no process of the completion but the test's own is alive while it
        # compiles (without a PID namespace a leftover that left the process group could
        # write on the pipe through /proc/PID/fd).
        if source is not None and self.is_pid1:
            if self.compiled is not None and self.compiled[:2] == source:
                code = self.compiled[2]
            else:
                code_r, code_w = os.pipe()  # for the compiled program, from the test process
        start = time.monotonic()
        # The child would otherwise copy every page its first garbage collection touches.
        gc.freeze()
        pid = os.fork()
        if pid == 0:
            _child(req, workdir, limits, (stdin_fd, out_w, err_w, rep_w, code_w), self.env,
                   self.program_filter, self.test_pid_ns, source, code)  # never returns
        for fd in (stdin_fd, out_w, err_w, rep_w, code_w):
            if fd is not None:
                os.close(fd)
        watch = _Watchdog(self, limits, 2 if self.test_pid_ns else 0) if self.is_pid1 else None
        streams, timed_out, over = _collect(pid, (out_r, err_r, rep_r),
                                            start + limits["wall_s"], limits["output_bytes"],
                                            watch, code_r)
        if code_r is not None:
            self._keep_compiled(source, streams.pop())
        if self.test_pid_ns and not (timed_out or over or (watch and watch.exceeded)):
            # The outer process ends just after the program (it relays the program's status):
            # wait for it, up to the wall limit, before anything is killed.
            timed_out = not _await_exit(pid, start + limits["wall_s"], watch)
        if watch is not None and watch.exceeded is None:
            # Once more before the exited program is reaped: it and what it left running.
            watch.over_budget(max(time.monotonic(), start + limits["wall_s"]) + _LAST_SAMPLE_S)
        status = _wait_or_kill(pid)
        wall = time.monotonic() - start
        self.kill_all(pid)
        out, err, report = streams
        return {
            "nonce": self.nonce,
            "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
            "stdout": out.decode("utf-8", "replace"),
            "stderr": err[-_STDERR_KEEP:].decode("utf-8", "replace"),
            "report": report.decode("utf-8", "replace"),
            "wall_s": wall,
            "timed_out": timed_out,
            "output_limited": over,
            "limit": watch.exceeded if watch is not None else None,
            "peak_memory_bytes": watch.peak_memory if watch is not None else None,
            "mapping_limit": watch.mapping_limit if watch is not None else None,
            "precompiled": code is not None,
        }

    def _keep_compiled(self, source, data):
        """Keep the code object a test process sent (whole, before any program code ran)."""
        size = struct.unpack("<Q", data[:8])[0] if len(data) >= 8 else -1
        if size != len(data) - 8:
            return  # none sent (too big, a compile error), or cut short by a kill
        try:
            code = marshal.loads(data[8:])
        except (EOFError, ValueError, TypeError):
            return
        if isinstance(code, types.CodeType):
            self.compiled = (*source, code)

    # ---- hygiene between the steps of one completion -------------------------------------
    def kill_all(self, pid=None):
        """Kill every process this completion left (all but us when we are PID 1; without a
        PID namespace, the step's process group, until it is empty)."""
        if not self.is_pid1:
            for _ in range(1000 if pid is not None else 0):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    break  # the group is gone
                _reap_all()
                time.sleep(0.001)
            _reap_all()
            return
        # Kill until none is left: a fork bomb may be mid-fork while the first kill goes out.
        for _ in range(1000):
            try:
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
            _reap_all()
            if not any(name.isdigit() and name != "1" for name in os.listdir("/proc")):
                return
            time.sleep(0.001)

    def _reset_folders(self):
        for folder in self.scratch + [self.workroot]:
            _clear_folder(folder)
        if self.is_pid1:  # this IPC namespace is the completion's alone
            _clear_sysv_ipc()


class _Watchdog:
    """Samples every process of the completion (we are PID 1: /proc lists just them)."""

    def __init__(self, supervisor, limits, helpers=0):
        self.memory_budget = limits["memory_mb"] * 1024 * 1024
        # The test's own namespace adds two processes of ours (see _enter_test_namespace).
        self.process_budget = limits["processes"] + helpers
        self.folders = supervisor.scratch + [supervisor.workroot]
        self.mapping_limit = self.memory_budget // _MAPPING_BYTES
        self.mapping_counts = {}  # pid -> (mappings, time.monotonic() when to count again)
        self.recount_at = 0.0  # no count is read again before (see _too_many_mappings)
        self.exceeded = None
        self.peak_memory = 0

    def over_budget(self, deadline):
        """Measure; on a breach remember which budget and return True.

        A pass still running at `deadline` stops, unfinished, without a breach: the step is
        then past its wall limit. (Processes that starve the supervisor of CPU, a fork bomb's,
        made one pass take seconds, and the step answer after the host gave up on it.)
        """
        sizes = {}
        usage = _completion_usage(self.folders, self.memory_budget, self.process_budget,
                                  deadline, sizes)
        if usage is None:
            return False
        memory, tasks = usage
        if memory is not None:
            self.peak_memory = max(self.peak_memory, memory)
        if tasks > self.process_budget:
            self.exceeded = "processes"
        elif memory > self.memory_budget:
            self.exceeded = "memory"
        elif self._too_many_mappings(sizes, deadline):
            self.exceeded = "mappings"
        return self.exceeded is not None

    def _too_many_mappings(self, sizes, deadline):
        """Whether the processes (pid -> VmSize in kB) hold more than mapping_limit mappings.

        Each process's bound (one mapping per page of its VmSize, and one for [vsyscall]) is
        replaced by its count, counts still fresh first, then largest bound first, until the
        bounds left and the counts add up to at most the limit (none over), or the counts
        alone pass it. A process not counted yet is always read; a count is read again after
        _MAPS_RECOUNT_S (a program can split a mapping without growing its VmSize), and
        not before ten times as long as the last pass spent reading (at most 1 s) has passed:
        counting again takes a tenth of the watchdog's time at most.
        """
        limit = self.mapping_limit
        if sum(sizes.values()) * 1024 // _MAPPING_BYTES + len(sizes) <= limit:
            return False  # the usual case: no reading
        now = time.monotonic()
        known = self.mapping_counts
        recount = now >= self.recount_at
        order = sorted(((pid not in known or (recount and known[pid][1] <= now),
                         -(kb * 1024 // _MAPPING_BYTES + 1), pid) for pid, kb in sizes.items()))
        rest = -sum(bound for _, bound, _ in order)
        counted = 0
        reading = 0.0
        try:
            for stale, bound, pid in order:
                if counted + rest <= limit or time.monotonic() > deadline:
                    return False
                rest += bound
                if stale:
                    started = time.monotonic()
                    count = _mappings(pid, limit - counted + 1, -bound)
                    reading += time.monotonic() - started
                    known[pid] = (count, started + _MAPS_RECOUNT_S)
                else:
                    count = known[pid][0]
                counted += count
                if counted > limit:
                    return True
            return False
        finally:
            if reading:
                self.recount_at = time.monotonic() + min(10 * reading, 1.0)


def _completion_usage(folders, budget, task_budget, deadline, sizes=None):
    """Bytes of memory and number of tasks of every process but PID 1 in this namespace, or
    None when `deadline` (time.monotonic) passes before the measurement is done; `sizes`, when
    given, gets each process's VmSize in kB (pid -> kB).

    Memory: each process's resident anonymous and shared pages, the blocks used in the
    completion's tmpfs folders, and System V shared memory (memfd_create is denied). Resident
    sizes count a page shared after fork once per process, so a total over `budget` is
    measured again with proportional sizes (PSS) before it counts; not when the tasks are
    over `task_budget` already (memory is then None): that breach decides.
    """
    resident = {}
    tasks = 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or name == "1":
            continue
        if time.monotonic() > deadline:
            return None
        try:
            with open(f"/proc/{name}/status", "rb") as fh:
                text = fh.read()
        except OSError:
            continue  # exited meanwhile
        size = 0
        for line in text.split(b"\n"):
            if line.startswith((b"RssAnon:", b"RssShmem:")):
                size += int(line.split()[1]) * 1024
            elif line.startswith(b"Threads:"):
                tasks += int(line.split()[1])
        resident[name] = size
        if sizes is not None:
            at = text.find(b"\nVmSize:")  # none in a zombie's
            if at >= 0:
                sizes[name] = int(text[at + 8:text.find(b"\n", at + 8)].split()[0])
    other = 0
    for folder in folders:
        try:
            st = os.statvfs(folder)
        except OSError:
            continue
        other += (st.f_blocks - st.f_bfree) * st.f_frsize
    try:
        with open("/proc/sysvipc/shm", "rb") as fh:
            rows = fh.read().split(b"\n")[1:]
        for row in rows:
            fields = row.split()
            if len(fields) > 14:
                other += int(fields[14])  # resident bytes of the segment
    except (OSError, ValueError):
        pass
    memory = other + sum(resident.values())
    if memory > budget:
        if tasks > task_budget:
            return None, tasks
        memory = other
        for pid, size in resident.items():
            if time.monotonic() > deadline:
                return None
            memory += _proportional(pid, size)
    return memory, tasks


def _mappings(pid, most, hidden):
    """Number of memory mappings of `pid`, counted up to `most` (a count that reaches it may
    be short); 0 once it has exited, `hidden` when it hides its memory map (non-dumpable)."""
    count = 0
    try:
        with open(f"/proc/{pid}/maps", "rb", buffering=0) as fh:
            while count < most:
                data = fh.read(65536)
                if not data:
                    break
                count += data.count(b"\n")
    except (ProcessLookupError, FileNotFoundError):
        return 0
    except OSError:
        return hidden
    return count


def _proportional(pid, resident):
    """Proportional anonymous + shared resident bytes of `pid`: 0 once it has exited, its
    resident size when it hides its memory map (a program can make itself non-dumpable)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            text = fh.read()
    except (ProcessLookupError, FileNotFoundError):
        return 0  # exiting: its memory is being freed
    except OSError:
        return resident
    size = None
    for line in text.split(b"\n"):
        if line.startswith((b"Pss_Anon:", b"Pss_Shmem:")):
            size = (size or 0) + int(line.split()[1]) * 1024
    return resident if size is None else size


def _python_source(req, workdir):
    """(path, source bytes) of the program a Python step compiles, or None for other steps."""
    name = req.get("python_main") or (req.get("python_calls") or {}).get("solution")
    text = req.get("files", {}).get(name) if name else None
    if not isinstance(text, str):
        return None  # read from the folder (a file of an earlier step): compiled each time
    return os.path.join(workdir, name), text.encode("utf-8", "surrogatepass")


def _child(req, workdir, limits, fds, env, program_filter, test_pid_ns=False, source=None,
           code=None):
    """A step's process: limits, the program filter, then the program (never returns).

    A Python step runs `code` when the supervisor has it (compiled by an earlier test of this
    completion); else it compiles `source` (`_python_source`, or None: the file in the folder)
    and, when the supervisor asked (a pipe at fds[4]), sends the result back on fd 4 before any
    of it runs.
    """
    stdin_fd, out_w, err_w, rep_w, code_w = fds
    try:
        os.setpgid(0, 0)
        if test_pid_ns:
            _enter_test_namespace()  # returns in the test's PID 2 only
        os.dup2(stdin_fd, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.dup2(rep_w, 3)
        if code_w is not None:
            os.dup2(code_w, _CODE_FD)
        os.closerange(_CODE_FD if code_w is None else _CODE_FD + 1, _max_fd())
        os.chdir(workdir)
        # Ignored signals stay ignored across exec: give the program default dispositions
        # (a Python step sets SIGPIPE, SIGXFSZ and SIGINT itself, as an interpreter does).
        python = req.get("python_main") or req.get("python_calls")
        for sig in ((signal.SIGXCPU, signal.SIGTERM, signal.SIGHUP) if python else
                    (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGXCPU, signal.SIGINT,
                     signal.SIGTERM, signal.SIGHUP)):
            signal.signal(sig, signal.SIG_DFL)
        _set_limits(limits, 3 if test_pid_ns else 2)
        if program_filter:
            _install_filter(program_filter)
        _set_dumpable(True)
        if req.get("python_main"):
            _run_python(workdir, req["python_main"], None, source, code, code_w is not None)
        if req.get("python_calls"):
            _run_python(workdir, req["python_calls"]["solution"], req["python_calls"], source,
                        code, code_w is not None)
        os.close(3)
        argv = req["argv"]
        os.execve(_which(argv[0], env), argv, env)
    except BaseException:  # noqa: B036 - a forked child must never return into the supervisor
        try:
            os.write(2, ("veristep sandbox: " + traceback.format_exc()).encode("utf-8", "replace"))
        finally:
            os._exit(127)


_MSGQUEUE_BYTES = 819200
_SIGPENDING = 256


def _at_most(which, value):
    """(value, value), or the current hard limit when that is lower (it cannot be raised)."""
    hard = resource.getrlimit(which)[1]
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    return value, value


_CLONE_NEWUSER_PID = 0x10000000 | 0x20000000


def _enter_test_namespace():
    """Move this step into new user and PID namespaces; return in the program's process.

    Three processes: this one (the container's child) stays outside and ends the way the
    program ends; the first child is PID 1 of the new namespace (a reaper, never the program:
    PID 1 ignores default-action signals, SIGXCPU included); its child, PID 2, is the program.
    """
    uid, gid = os.getuid(), os.getgid()
    _set_dumpable(True)  # /proc/self/*_map are writable only while dumpable
    _check(_libc.unshare(_CLONE_NEWUSER_PID), "unshare")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                       ("gid_map", f"{gid} {gid} 1")):
        _write("/proc/self/" + name, text.encode(), 0o600)
    _set_dumpable(False)
    status_r, status_w = os.pipe()
    init = os.fork()
    if init == 0:
        os.close(status_r)
        program = os.fork()
        if program == 0:
            os.close(status_w)
            _drop_capabilities()  # the new user namespace gave us all of them
            return
        _reaper(program, status_w)  # never returns
    os.close(status_w)
    os.closerange(0, status_r)  # the test's pipes are the program's alone now
    os.closerange(status_r + 1, _max_fd())
    data = _read_exact(status_r, 4)
    status = struct.unpack("<i", data)[0] if data else 9  # no word: as if killed
    # Not waiting for the reaper: its namespace's teardown is the container's to reap.
    if os.WIFEXITED(status):
        os._exit(os.WEXITSTATUS(status))
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else signal.SIGKILL
    try:
        signal.signal(sig, signal.SIG_DFL)
    except (OSError, ValueError):
        pass  # SIGKILL keeps its default
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)


def _reaper(program, status_w):
    """PID 1 of a test's namespace: when the program ends, pass on how; then wait to be killed.

    Nothing is reaped (WNOWAIT), as the container reaps nothing while a step runs: the program
    and what it left running stay visible to the watchdog's last look and are killed with the
    rest, exactly as without a namespace of the test's own.
    """
    try:
        os.closerange(0, status_w)
        os.closerange(status_w + 1, _max_fd())
        info = os.waitid(os.P_PID, program, os.WEXITED | os.WNOWAIT)
        if info.si_code == os.CLD_EXITED:
            status = (info.si_status & 0xFF) << 8
        else:  # CLD_KILLED, CLD_DUMPED: the signal, as a wait status has it
            status = info.si_status & 0x7F
        _write_all(status_w, struct.pack("<i", status))
        os.close(status_w)
        while True:
            time.sleep(60)
    finally:
        os._exit(0)  # the kernel then kills whatever else runs in this namespace


def _set_limits(limits, helpers=2):
    cpu = int(limits["cpu_s"])
    mem = limits["memory_mb"] * 1024 * 1024
    fsize = limits["file_mb"] * 1024 * 1024
    # Per user and user namespace: in the namespace the program runs in this caps all its
    # processes together. `helpers` above the budget: ours counted with them (the container's
    # supervisor, or a test namespace's outer process and reaper) and one spare, so that the
    # watchdog sees a breach rather than only a failed fork.
    nproc = limits["processes"] + helpers
    for which, value in (
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_AS, (mem, mem)),
        (resource.RLIMIT_NPROC, (nproc, nproc)),
        (resource.RLIMIT_FSIZE, (fsize, fsize)),
        (resource.RLIMIT_NOFILE, (limits["open_files"], limits["open_files"])),
        # 1, not 0: a core_pattern that pipes to a helper ignores the limit, except 1.
        (resource.RLIMIT_CORE, (1, 1)),
        # POSIX message queues are kernel memory outside the budget (the program filter denies
        # mq_open; this is the cap where there is no filter): the kernel's default.
        (resource.RLIMIT_MSGQUEUE, _at_most(resource.RLIMIT_MSGQUEUE, _MSGQUEUE_BYTES)),
        # POSIX timers and queued signals are kernel memory outside the budget, and beyond the
        # completion's own user namespace they count per host uid, shared by every sandbox.
        (resource.RLIMIT_SIGPENDING, _at_most(resource.RLIMIT_SIGPENDING, _SIGPENDING)),
    ):
        resource.setrlimit(which, value)


# ---- Python programs run in this forked interpreter ---------------------------------------------
def _report(message):
    """One JSON line on the report pipe (fd 3): compile errors and function-call results."""
    data = (json.dumps(message, ensure_ascii=True) + "\n").encode()
    view = memoryview(data)
    while view:
        view = view[os.write(3, view):]


def _run_python(workdir, filename, calls, source=None, code=None, send_code=False):
    """Run `filename` as __main__ (calls=None), or as module `solution` and then evaluate the
    calls, reporting each return value as plain data; then exit like python would.

    `code` is the program compiled by an earlier test; without it `source` is compiled, the
    (path, bytes) the supervisor just wrote to `filename`, which nothing else can have changed
    (None: the file is read from the folder), and with `send_code` the result goes to the
    supervisor before any of it runs.
    """
    path = os.path.join(workdir, filename)
    # What a fresh interpreter sets up at start: EPIPE/EFBIG as exceptions, Ctrl-C as one.
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.argv = [path]
    sys.path[:] = [p for p in sys.path if p]
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(
        io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8",
        errors="surrogateescape")
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8",
        errors="surrogateescape")
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)), encoding="utf-8",
        errors="backslashreplace", line_buffering=True)
    try:
        if code is None:
            if source is None:
                with open(path, "rb") as fh:
                    source = (path, fh.read())
            code = compile(source[1], path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:  # ValueError: null bytes in the source
        message = "".join(traceback.format_exception_only(type(exc), exc))
        _report({"compile_error": message})
        sys.stderr.write(message)
        _exit_interpreter(_COMPILE_ERROR_EXIT)
    finally:
        if send_code:
            _send_code(code)
    module = type(sys)("__main__" if calls is None else "solution")
    module.__file__ = path
    module.__builtins__ = builtins
    sys.modules[module.__name__] = module
    status = 0
    try:
        if calls is None:
            os.close(3)  # nothing to report: the program cannot write there either
            exec(code, module.__dict__)
        else:
            _run_calls(code, module.__dict__, calls)
    except SystemExit as exc:
        status = _exit_code(exc.code)
    except BaseException as exc:  # noqa: B036 - the program's own uncaught exception
        # sys.excepthook: CPython's own printer, bounded like a fresh interpreter's.
        tb = _program_frames(exc.__traceback__)
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        status = 1
    _exit_interpreter(status)


def _send_code(code):
    """The compiled program, length-prefixed, on fd 4, which is then closed (nothing when the
    compiler failed or the program is too big)."""
    try:
        data = marshal.dumps(code) if code is not None else b""
        if 0 < len(data) <= _CODE_MAX_BYTES:
            _write_all(_CODE_FD, struct.pack("<Q", len(data)) + data)
    except (OSError, ValueError):
        pass  # the supervisor keeps nothing and the next test compiles again
    finally:
        os.close(_CODE_FD)


def _program_frames(tb):
    """The traceback without the supervisor's own frames (its source is "<string>")."""
    while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
        tb = tb.tb_next
    return tb


def _run_calls(code, namespace, calls):
    if calls.get("prelude"):
        exec(compile(calls["prelude"], "prelude", "exec"), namespace)
    exec(code, namespace)
    if calls.get("setup"):
        exec(compile(calls["setup"], "setup", "exec"), namespace)
    target = None
    if calls.get("fn_name"):
        target = _call_target(namespace, calls["fn_name"])
    for index, call in enumerate(calls["calls"]):
        if "exec" in call:  # assertion code as is: the program could fake this one
            try:
                exec(compile(call["exec"], "test", "exec"), namespace)
            except AssertionError:
                _report({"index": index, "assertion_failed": True})
                raise
            _report({"index": index, "done": True})
            continue
        if "expr" in call:
            value = eval(compile(call["expr"], "test", "eval"), namespace)
        else:
            value = target(*decode_plain(call["args"]))  # noqa: F821 - plain_data.py comes first
        try:
            text = encode_plain(value)  # noqa: F821
        except NotPlainData as exc:  # noqa: F821
            _report({"index": index, "not_plain": str(exc)})
            continue
        _report({"index": index, "value": text})


def _call_target(namespace, name):
    """APPS call-based items: a method of `Solution` when the program defines that class."""
    cls = namespace.get("Solution")
    if isinstance(cls, type) and hasattr(cls, name):
        return getattr(cls(), name)
    if name in namespace:
        return namespace[name]
    raise NameError(f"the program defines no function {name!r}")


def _exit_interpreter(status):
    if "threading" in sys.modules:
        try:
            sys.modules["threading"]._shutdown()
        except BaseException:  # noqa: B036
            pass
    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: B036
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: B036
            status = status or 120
    os._exit(status)


def _exit_code(value):
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    try:
        sys.stderr.write(str(value) + "\n")
    except BaseException:  # noqa: B036
        pass
    return 1


# ---- collecting a step's output ------------------------------------------------------------------
def _collect(pid, fds, deadline, cap, watch, side=None):
    """Read the pipes until the child exits, or the deadline, output cap or a budget is hit.

    `side`, when given, is one more pipe (the compiled program): read along, kept up to
    _CODE_MAX_BYTES + 8 bytes, never an output limit; its bytes come last in the result.
    """
    caps = dict.fromkeys(fds, cap)
    if side is not None:
        fds = (*fds, side)
        caps[side] = _CODE_MAX_BYTES + 8
    chunks = {fd: [] for fd in fds}
    sizes = dict.fromkeys(fds, 0)
    open_fds = set(fds)
    timed_out = over = False
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    poller = select.poll()
    for fd in open_fds:
        poller.register(fd, select.POLLIN)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    exited = False
    # The first sample one interval in: at the fork the child holds nothing of its own yet,
    # and a step that ends sooner is measured once at its end (see Supervisor._run).
    next_watch = time.monotonic() + _WATCH_INTERVAL_S
    while open_fds:
        now = time.monotonic()
        if watch is not None and now >= next_watch:
            if watch.over_budget(deadline):
                break
            next_watch = now + _WATCH_INTERVAL_S
        remaining = deadline - now
        if remaining <= 0:
            timed_out = True
            break
        wait = remaining
        if watch is not None:
            wait = min(wait, max(next_watch - now, 0.0))
        if pidfd is None:  # without a pidfd, look every 10 ms whether the child has exited
            wait = min(wait, 0.01)
        events = poller.poll(int(wait * 1000) + 1)
        if pidfd is None and not exited and os.waitid(
                os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
            exited = True
        for fd, _ in events:
            if fd == pidfd:
                exited = True
                continue
            data = os.read(fd, 65536)
            if not data:
                poller.unregister(fd)
                open_fds.discard(fd)
                continue
            sizes[fd] += len(data)
            if sizes[fd] <= caps[fd]:
                chunks[fd].append(data)
            elif fd != side:
                over = True
        if over:
            break
        if exited:
            # The program is done; take what its descendants already wrote, but do not wait
            # for them to close inherited pipes.
            _drain(open_fds, chunks, sizes, caps)
            break
    if pidfd is not None:
        os.close(pidfd)
    for fd in fds:
        os.close(fd)
    return [b"".join(chunks[fd]) for fd in fds], timed_out, over


def _drain(fds, chunks, sizes, caps):
    for fd in list(fds):
        os.set_blocking(fd, False)
        while True:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                break
            if not data:
                break
            sizes[fd] += len(data)
            if sizes[fd] <= caps[fd]:
                chunks[fd].append(data)
            else:
                break


def _await_exit(pid, deadline, watch):
    """Whether `pid` (not reaped) exits before `deadline`; the watchdog keeps sampling."""
    pause = 0.0002
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:
            return True
        now = time.monotonic()
        if now >= deadline or (watch is not None and watch.over_budget(deadline)):
            return now < deadline
        time.sleep(min(pause, max(deadline - now, 0)))
        pause = min(pause * 2, _WATCH_INTERVAL_S)


def _wait_or_kill(pid):
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return 0
    if done:
        return status
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        os.kill(pid, signal.SIGKILL)
    return os.waitpid(pid, 0)[1]


def _reap_all():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


_IPC_RMID = 0


def _clear_sysv_ipc():
    """Remove System V shared memory, semaphores and message queues of this IPC namespace."""
    if _libc is None:
        return
    for kind, remove in (
        ("shm", lambda ident: _libc.shmctl(ident, _IPC_RMID, None)),
        ("sem", lambda ident: _libc.semctl(ident, 0, _IPC_RMID, 0)),
        ("msg", lambda ident: _libc.msgctl(ident, _IPC_RMID, None)),
    ):
        try:
            with open(f"/proc/sysvipc/{kind}") as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 1 and fields[1].isdigit():
                remove(int(fields[1]))


def _clear_folder(folder):
    """Delete everything inside `folder`, at any depth, even entries made unreadable.

    Walks with directory file descriptors and names relative to them, never full paths, so
    that no depth makes a path too long; climbs back with "..", which no process can move
    (every process of the completion is dead while this runs). Each folder is listed once:
    what cannot be removed is passed over, never looked at again (a folder full of such
    entries cost one listing per entry). Mounts inside the folder (a virtual environment bound
    there) and entries that cannot be removed are left alone.
    """
    try:
        # The program owns the folder itself too, and may have taken its permissions away.
        mode = os.lstat(folder).st_mode
        if stat.S_ISDIR(mode) and mode & 0o700 != 0o700:
            os.chmod(folder, stat.S_IMODE(mode) | 0o700, follow_symlinks=False)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    device = os.fstat(fd).st_dev
    levels = []  # (name, its parent's entries still to visit) from `folder` down to fd's
    pending = _entries(fd)
    try:
        while True:
            if not pending:
                if not levels:
                    return
                parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd = parent
                name, pending = levels.pop()
                try:
                    os.rmdir(name, dir_fd=fd)
                except OSError:
                    pass  # not empty: something in it could not be removed
                continue
            name, is_dir = pending.pop()
            try:
                if not is_dir:
                    os.unlink(name, dir_fd=fd)
                    continue
                os.chmod(name, 0o700, dir_fd=fd, follow_symlinks=False)
                child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError:
                continue
            if os.fstat(child).st_dev != device:
                os.close(child)
                continue
            os.close(fd)
            fd = child
            levels.append((name, pending))
            pending = _entries(fd)
    finally:
        os.close(fd)


def _entries(fd):
    with os.scandir(fd) as entries:
        return [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]


def _write(path, data, mode):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _stdin_file(data):
    """A read-only file holding the test's stdin: a sealed memfd where there is one, else an
    unlinked temp file opened for reading (a writable one is memory no budget counts)."""
    try:
        fd = os.memfd_create("stdin", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except (AttributeError, OSError):
        import tempfile

        writable, path = tempfile.mkstemp()
        try:
            _write_all(writable, data)
            fd = os.open(path, os.O_RDONLY)
        finally:
            os.unlink(path)
            os.close(writable)
        return fd
    _write_all(fd, data)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK
                | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _which(name, env):
    if "/" in name:
        return name
    for folder in env.get("PATH", "/usr/bin:/bin").split(":"):
        candidate = os.path.join(folder, name)
        if os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError(errno.ENOENT, "command not found", name)


# ---- namespaces level: build the sandbox root ourselves ---------------------------------------
# Under `unshare --user --map-root-user --mount --pid ...` the zygote starts as root of a fresh
# user namespace. It builds a root like bubblewrap's (read-only /usr, tmpfs elsewhere), pivots
# into it and drops every capability; each completion then gets its namespaces as under bwrap.
_MS_NOATIME, _MS_NODIRATIME, _MS_RELATIME, _MS_STRICTATIME = 1024, 2048, 1 << 21, 1 << 24
_MNT_DETACH = 2
_PR_CAPBSET_DROP = 24
_CAPABILITY_VERSION_3 = 0x20080522
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
_OPTION_FLAGS = {"nosuid": _MS_NOSUID, "nodev": _MS_NODEV, "noexec": _MS_NOEXEC,
                 "noatime": _MS_NOATIME, "nodiratime": _MS_NODIRATIME,
                 "relatime": _MS_RELATIME, "strictatime": _MS_STRICTATIME}


def _mount(source, target, fstype, flags, data=None):
    enc = lambda v: None if v is None else v.encode()  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
           f"mount {target}")


def _mount_flags(target):
    """Flags a read-only remount of `target` must keep (the kernel locks inherited ones)."""
    flags = 0
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            if fields[4] == target:
                flags = 0
                for option in fields[5].split(","):
                    flags |= _OPTION_FLAGS.get(option, 0)
    return flags


def _bind(source, target, is_dir, readonly=True):
    if is_dir:
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    _mount(source, target, None, _MS_BIND | _MS_REC)
    if readonly:
        _mount(None, target, None,
               _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _mount_flags(target))


def _confine(spec):
    new = "/tmp"  # any existing folder serves as the mount point of the new root
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    _mount("tmpfs", new, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755")
    _bind("/usr", new + "/usr", True)
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            os.symlink(os.readlink(top), new + top)
        elif os.path.isdir(top):
            _bind(top, new + top, True)
    for path in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives"):
        if os.path.exists(path):
            _bind(path, new + path, os.path.isdir(path))
    for prefix in spec.get("binds", []):
        _bind(prefix, new + prefix, True)
    os.mkdir(new + "/proc")
    _mount("proc", new + "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    os.mkdir(new + "/dev")
    _mount("tmpfs", new + "/dev", "tmpfs", _MS_NOSUID, "mode=0755")
    for node in ("null", "zero", "full", "random", "urandom", "tty"):
        _bind("/dev/" + node, new + "/dev/" + node, False, readonly=False)
    os.mkdir(new + "/dev/mqueue")
    for link, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, new + "/dev/" + link)
    for folder in (spec["workroot"], "/tmp", "/dev/shm"):
        os.makedirs(new + folder, exist_ok=True)
    os.mkdir(new + "/oldroot")
    number = _SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise OSError(errno.ENOSYS, f"pivot_root: unknown machine {os.uname().machine}")
    _check(_libc.syscall(number, new.encode(), (new + "/oldroot").encode()), "pivot_root")
    os.chdir("/")
    _check(_libc.umount2(b"/oldroot", _MNT_DETACH), "umount old root")
    os.rmdir("/oldroot")
    for target in ("/dev", "/"):
        _mount(None, target, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _mount_flags(target))
    os.chdir(spec["workroot"])


def _drop_capabilities():
    for cap in range(64):  # empty the bounding set, then every capability set
        if _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    _check(_libc.capset(header, (ctypes.c_uint32 * 6)()), "capset")


if __name__ == "__main__":
    main()

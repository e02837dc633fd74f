"""In-sandbox supervisor: runs each compile or test step of one completion in a fresh process.

This file is not imported by veristep. Its source is passed to the sandbox interpreter with
`python -I -c`, so it must use the standard library only and run on any Python >= 3.8.

Protocol: length-prefixed marshal frames (4-byte little-endian size, then the dict), one
request in and one reply out per step, every reply stamped with the nonce of the first
request. Expected outputs never enter the sandbox; the host compares.

Under the bwrap and namespaces levels the supervisor is PID 1 of its PID namespace, so the
program cannot kill it, cannot reach its pipes or memory (it is made non-dumpable), and
`kill(-1)` after each step removes every process the program left behind. Before each step
the scratch folders are wiped and the program's files rewritten, so no step sees what an
earlier step left.
"""

import builtins
import ctypes
import errno
import io
import marshal
import os
import resource
import select
import signal
import stat
import struct
import sys
import time

# Start-up time is paid once per completion, so only light modules are imported here: no
# json (marshal frames instead), no shutil, and traceback only in a child that needs it.
_PR_SET_DUMPABLE = 4
_ASSERT_FAILED_EXIT = 101  # mirrored in verifiers/code/verifier.py
_STDERR_KEEP = 4096

try:
    _libc = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - static interpreters
    _libc = None


def _set_dumpable(flag):
    if _libc is not None:
        _libc.prctl(_PR_SET_DUMPABLE, int(flag), 0, 0, 0)


class Supervisor:
    def __init__(self, init):
        self.nonce = init["nonce"]
        self.workroot = init["workroot"]
        self.scratch = list(init["scratch"])
        self.env = dict(init["env"])
        self.artifacts = {}
        self.counter = 0
        self.is_pid1 = os.getpid() == 1

    def ready(self):
        return {"nonce": self.nonce, "ready": True, "python": sys.version.split()[0]}

    def reset(self):
        """Forget compile outputs and wipe everything: the next step starts a new completion."""
        self.artifacts = {}
        self._reset_filesystem()
        return {"nonce": self.nonce, "reset": True}

    # ---- steps -------------------------------------------------------------------------
    def step(self, req):
        self._reset_filesystem()
        os.makedirs(self.workroot, exist_ok=True)
        self.counter += 1
        workdir = os.path.join(self.workroot, f"s{self.counter}")
        os.mkdir(workdir, 0o700)
        for name, data in self.artifacts.items():
            _write(os.path.join(workdir, name), data, 0o700)
        for name, text in req.get("files", {}).items():
            _write(os.path.join(workdir, name), text.encode("utf-8", "surrogatepass"), 0o600)
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

    def _run(self, req, workdir):
        limits = req["limits"]
        stdin_fd = os.memfd_create("stdin") if hasattr(os, "memfd_create") else _tmp_stdin()
        os.write(stdin_fd, req.get("stdin", "").encode("utf-8", "surrogatepass"))
        os.lseek(stdin_fd, 0, os.SEEK_SET)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _child(req, workdir, limits, stdin_fd, out_w, err_w, self.env)  # never returns
        for fd in (stdin_fd, out_w, err_w):
            os.close(fd)
        out, err, timed_out, over = _collect(pid, out_r, err_r, start + limits["wall_s"],
                                             limits["output_bytes"])
        status = _wait_or_kill(pid)
        wall = time.monotonic() - start
        self._kill_leftovers(pid)
        exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        return {
            "nonce": self.nonce,
            "exit_code": exit_code,
            "signal": sig,
            "stdout": out.decode("utf-8", "replace"),
            "stderr": err[-_STDERR_KEEP:].decode("utf-8", "replace"),
            "wall_s": wall,
            "timed_out": timed_out,
            "output_limited": over,
        }

    # ---- hygiene -----------------------------------------------------------------------
    def _kill_leftovers(self, pid):
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        if not self.is_pid1:
            _reap_all()
            return
        # As PID 1, every other process in the namespace is the program's: kill until none is
        # left, since a fork bomb may be mid-fork while the first kill goes out.
        for _ in range(1000):
            try:
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
            _reap_all()
            if not any(name.isdigit() and name != "1" for name in os.listdir("/proc")):
                return
            time.sleep(0.001)

    def _reset_filesystem(self):
        for folder in self.scratch + [self.workroot]:
            _clear_folder(folder)
        if self.is_pid1:  # these namespaces are ours alone; outside them they are the host's
            _clear_kernel_objects()


def _child(req, workdir, limits, stdin_fd, out_w, err_w, env):
    try:
        os.setpgid(0, 0)
        os.dup2(stdin_fd, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, 65536)
        os.chdir(workdir)
        # Ignored signals stay ignored across exec: give the program default dispositions.
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGXCPU, signal.SIGINT,
                    signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        _set_limits(limits)
        _set_dumpable(True)
        os.environ.clear()
        os.environ.update(env)
        if req.get("python_main"):
            _run_python_main(workdir, req["python_main"])
        argv = req["argv"]
        os.execve(_which(argv[0], env), argv, env)
    except BaseException:  # noqa: B036 - a forked child must never return into the supervisor
        try:
            import traceback

            os.write(2, ("veristep sandbox: " + traceback.format_exc()).encode("utf-8", "replace"))
        finally:
            os._exit(127)


def _set_limits(limits):
    cpu = int(limits["cpu_s"])
    mem = limits["memory_mb"] * 1024 * 1024
    fsize = limits["file_mb"] * 1024 * 1024
    for which, value in (
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_AS, (mem, mem)),
        (resource.RLIMIT_NPROC, (limits["processes"], limits["processes"])),
        (resource.RLIMIT_FSIZE, (fsize, fsize)),
        (resource.RLIMIT_NOFILE, (limits["open_files"], limits["open_files"])),
        (resource.RLIMIT_CORE, (0, 0)),
    ):
        resource.setrlimit(which, value)


def _run_python_main(workdir, filename):
    """Run `filename` as `__main__` in this forked interpreter, then exit like python would."""
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
    main = type(sys)("__main__")
    main.__file__ = path
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    code = 0
    try:
        with open(path, "rb") as fh:
            source = fh.read()
        exec(compile(source, path, "exec"), main.__dict__)
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except BaseException as exc:  # noqa: B036 - the program's own uncaught exception
        import traceback

        traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next)
        code = 1
    if "threading" in sys.modules:
        try:
            sys.modules["threading"]._shutdown()
        except BaseException:  # noqa: B036
            pass
    try:
        import atexit

        atexit._run_exitfuncs()
    except BaseException:  # noqa: B036
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: B036
            code = code or 120
    os._exit(code)


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


def _collect(pid, out_r, err_r, deadline, cap):
    """Read both pipes until the child exits or the deadline or the output cap is hit."""
    chunks = {out_r: [], err_r: []}
    sizes = {out_r: 0, err_r: 0}
    open_fds = {out_r, err_r}
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
    while open_fds:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        # Without a pidfd, wake up every 10 ms to see whether the child has exited.
        wait_ms = int(remaining * 1000) + 1 if pidfd is not None else min(10, int(remaining * 1000) + 1)
        events = poller.poll(wait_ms)
        if pidfd is None and not exited and os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
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
            if sizes[fd] > cap:
                over = True
            else:
                chunks[fd].append(data)
        if over:
            break
        if exited:
            # The program is done; take what its descendants already wrote, but do not wait
            # for them to close inherited pipes.
            _drain(open_fds, chunks, sizes, cap)
            break
    if pidfd is not None:
        os.close(pidfd)
    for fd in (out_r, err_r):
        os.close(fd)
    return b"".join(chunks[out_r]), b"".join(chunks[err_r]), timed_out, over


def _drain(fds, chunks, sizes, cap):
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
            if sizes[fd] <= cap:
                chunks[fd].append(data)
            else:
                break


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


# Kernel objects that outlive a process inside the sandbox's namespaces: System V IPC and
# keyrings (POSIX message queues live in /dev/mqueue, a scratch folder).
_IPC_RMID = 0
_KEYCTL_CLEAR = 7
_KEY_SPEC_SESSION, _KEY_SPEC_USER, _KEY_SPEC_USER_SESSION = -3, -4, -5
_SYS_KEYCTL = {"x86_64": 250, "aarch64": 219, "riscv64": 219, "ppc64le": 271, "s390x": 280}


def _clear_kernel_objects():
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
    keyctl = _SYS_KEYCTL.get(os.uname().machine)
    if keyctl is not None:
        for keyring in (_KEY_SPEC_SESSION, _KEY_SPEC_USER, _KEY_SPEC_USER_SESSION):
            _libc.syscall(keyctl, _KEYCTL_CLEAR, keyring, 0, 0, 0)


def _clear_folder(folder):
    """Delete everything inside `folder`, even entries a program made unreadable or deep."""
    stack = [(folder, False)]
    while stack:  # iterative: a program may nest folders deeper than the recursion limit
        path, emptied = stack.pop()
        if emptied:
            if path != folder:
                try:
                    os.rmdir(path)
                except OSError:
                    pass
            continue
        try:
            os.chmod(path, 0o700)
        except OSError:
            pass
        try:
            names = os.listdir(path)
        except OSError:
            continue
        stack.append((path, True))
        for name in names:
            child = os.path.join(path, name)
            try:
                if stat.S_ISDIR(os.lstat(child).st_mode):
                    stack.append((child, False))
                else:
                    os.unlink(child)
            except OSError:
                pass


def _write(path, data, mode):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _tmp_stdin():
    import tempfile

    fd, path = tempfile.mkstemp()
    os.unlink(path)
    return fd


def _which(name, env):
    if "/" in name:
        return name
    for folder in env.get("PATH", "/usr/bin:/bin").split(":"):
        candidate = os.path.join(folder, name)
        if os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError(errno.ENOENT, "command not found", name)


# ---- namespaces level: build the sandbox root ourselves ---------------------------------------
# Under `unshare --user --map-root-user --mount --pid ...` the supervisor starts as root of a
# fresh user namespace. It builds a root like bubblewrap's (read-only /usr, tmpfs elsewhere),
# pivots into it, moves into a nested user namespace as uid 65534 and drops every capability
# before any program runs.
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_MS_NOATIME, _MS_NODIRATIME, _MS_RELATIME, _MS_STRICTATIME = 1024, 2048, 1 << 21, 1 << 24
_MNT_DETACH = 2
_CLONE_NEWUSER = 0x10000000
_PR_CAPBSET_DROP = 24
_CAPABILITY_VERSION_3 = 0x20080522
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
_OPTION_FLAGS = {"nosuid": _MS_NOSUID, "nodev": _MS_NODEV, "noexec": _MS_NOEXEC,
                 "noatime": _MS_NOATIME, "nodiratime": _MS_NODIRATIME,
                 "relatime": _MS_RELATIME, "strictatime": _MS_STRICTATIME}


def _check(result, what):
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


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
    size = f"size={spec['tmpfs_bytes']}"
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
    if spec.get("python_prefix"):
        _bind(spec["python_prefix"], new + spec["python_prefix"], True)
    os.mkdir(new + "/proc")
    _mount("proc", new + "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    os.mkdir(new + "/dev")
    _mount("tmpfs", new + "/dev", "tmpfs", _MS_NOSUID, "mode=0755")
    for node in ("null", "zero", "full", "random", "urandom", "tty"):
        _bind("/dev/" + node, new + "/dev/" + node, False, readonly=False)
    os.mkdir(new + "/dev/mqueue")
    _mount("mqueue", new + "/dev/mqueue", "mqueue", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    for link, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, new + "/dev/" + link)
    for folder in (spec["workroot"], "/tmp", "/dev/shm"):
        os.makedirs(new + folder, exist_ok=True)
        _mount("tmpfs", new + folder, "tmpfs", _MS_NOSUID | _MS_NODEV, size + ",mode=0700")
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
    try:  # one nested namespace (ours, below) and no more: programs cannot create their own
        with open("/proc/sys/user/max_user_namespaces", "w") as fh:
            fh.write("1")
    except OSError:
        pass
    _check(_libc.unshare(_CLONE_NEWUSER), "unshare user namespace")
    for name, text in (("setgroups", "deny"), ("uid_map", "65534 0 1"), ("gid_map", "65534 0 1")):
        with open(f"/proc/self/{name}", "w") as fh:
            fh.write(text)


def _drop_capabilities():
    for cap in range(64):  # empty the bounding set, then every capability set
        if _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    _check(_libc.capset(header, (ctypes.c_uint32 * 6)()), "capset")


def _confine_in_place(spec):
    """Confine this supervisor (namespaces level); on failure reply with the error and exit."""
    try:
        _confine(spec)
        _drop_capabilities()
        os.chdir(spec["workroot"])
    except OSError as err:
        return f"confine: {err}"
    _set_dumpable(False)  # changing credentials may have reset it
    return None


def _read_frame(stream):
    header = stream.read(4)
    if len(header) < 4:
        return None
    (size,) = struct.unpack("<I", header)
    return marshal.loads(stream.read(size))


def _write_frame(stream, message):
    data = marshal.dumps(message)
    stream.write(struct.pack("<I", len(data)) + data)
    stream.flush()


def main():
    _set_dumpable(False)
    # The supervisor must outlive SIGTERM/SIGINT a program sends it outside a PID namespace.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    stdin = sys.stdin.buffer
    stdout = sys.stdout.buffer
    supervisor = None
    while True:
        req = _read_frame(stdin)
        if req is None:
            break
        if supervisor is None:
            error = _confine_in_place(req["confine"]) if "confine" in req else None
            if error is not None:
                _write_frame(stdout, {"nonce": req["nonce"], "error": error})
                break
            supervisor = Supervisor(req)
            reply = supervisor.ready()
        else:
            reply = supervisor.reset() if req.get("op") == "reset" else supervisor.step(req)
        _write_frame(stdout, reply)
    # No clean-up on the way out: under bubblewrap the tmpfs and every process die with the
    # namespaces, and the host removes an rlimits-only folder itself.
    stdout.flush()
    os._exit(0)


main()

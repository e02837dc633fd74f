"""Seccomp filters for the code sandbox, assembled as classic BPF here (no libseccomp needed).

Two filters, both deny-lists on top of the namespaces and the dropped capabilities:

- the sandbox filter (handed to bubblewrap with ``--seccomp FD``, or installed by the
  supervisor itself at the other isolation levels) covers everything in the sandbox. It denies
  what no test program and no supervisor needs: kernel keyrings (except joining a new, anonymous
  session keyring, which the supervisor does first), other processes' memory (ptrace,
  process_vm_*), eBPF, perf events, userfaultfd, io_uring, modules, kexec, swap, reboot, quotas,
  file handles, tty injection, and any system call of a foreign architecture or ABI;
- the program filter, stacked by each completion's supervisor once it has built the
  completion's namespaces, denies in addition what only that set-up needs: new namespaces,
  mounts, keyrings altogether; kernel memory outside the memory budget (memfd_create, System V
  message queues and semaphore arrays, POSIX message queues (their bytes count per host uid
  too, so one completion's filled another's quota), pipe buffers grown with F_SETPIPE_SZ or
  filled by vmsplice (a page of a transparent huge page pins all 2 MiB of it), socket buffers
  grown with SO_SNDBUF/SO_RCVBUF and their FORCE forms, inotify watches, counted per user on
  the host; file locks and leases; extended attributes, refused with EOPNOTSUPP); and anything
  done to another process of the same uid that could break the container's supervisor
  (resource limits, scheduling class, priority, affinity, I/O priority, process_madvise):
  those calls work on the caller only.

A denied call fails with EPERM (clone3 with ENOSYS, so that libc falls back to clone, whose
namespace flags the filter can read; extended attributes with EOPNOTSUPP, as on a file system
without them); a foreign-architecture call kills the process.
"""

from __future__ import annotations

import platform
import struct
from dataclasses import dataclass

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6]
_NR, _ARCH = 0, 4


def _arg_low(index: int) -> int:
    return 16 + 8 * index  # little-endian: the low 32 bits come first


def _arg_high(index: int) -> int:
    return 16 + 8 * index + 4


_LD_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ, _JGE, _JSET = 0x15, 0x35, 0x45  # BPF_JMP | BPF_{JEQ,JGE,JSET} | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000
_EPERM, _ENOSYS, _EOPNOTSUPP = 1, 38, 95

_KEYCTL_JOIN_SESSION_KEYRING = 1
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C
# personality(): plain Linux, the 32-bit variant, and the query; nothing that turns off ASLR.
_PERSONALITIES = (0x0, 0x8, 0xFFFFFFFF)
# CLONE_NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
_CLONE_NAMESPACES = 0x80 | 0x20000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000


@dataclass(frozen=True)
class Arch:
    """One machine's audit architecture and system-call numbers (from the kernel's uapi headers)."""

    audit: int
    numbers: dict[str, int]
    x32_bit: int | None = None  # x86_64 only: the x32 ABI's calls, which this filter refuses


_COMMON_GENERIC = {  # asm-generic/unistd.h, used by aarch64 and riscv64
    "ptrace": 117, "syslog": 116, "acct": 89, "mount": 40, "umount2": 39, "swapon": 224,
    "swapoff": 225, "reboot": 142, "sethostname": 161, "setdomainname": 162,
    "init_module": 105, "delete_module": 106, "finit_module": 273, "quotactl": 60,
    "quotactl_fd": 443, "pivot_root": 41, "chroot": 51, "vhangup": 58, "personality": 92,
    "lookup_dcookie": 18, "kexec_load": 104, "kexec_file_load": 294, "add_key": 217,
    "request_key": 218, "keyctl": 219, "unshare": 97, "setns": 268, "perf_event_open": 241,
    "fanotify_init": 262, "name_to_handle_at": 264, "open_by_handle_at": 265,
    "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272, "bpf": 280,
    "userfaultfd": 282, "memfd_create": 279, "memfd_secret": 447, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428, "move_mount": 429,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "pidfd_getfd": 438,
    "clone3": 435, "clone": 220, "mount_setattr": 442, "ioctl": 29, "nfsservctl": 42,
    "move_pages": 239, "migrate_pages": 238, "msgget": 186, "semget": 190, "prlimit64": 261,
    "sched_setparam": 118, "sched_setscheduler": 119, "sched_setaffinity": 122,
    "sched_setattr": 274, "setpriority": 140, "ioprio_set": 30, "process_madvise": 440,
    "fcntl": 25, "setsockopt": 208, "vmsplice": 75, "inotify_init1": 26, "flock": 32,
    "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "setxattrat": 463, "mq_open": 180,
}  # fmt: skip

ARCHES: dict[str, Arch] = {
    "x86_64": Arch(
        audit=0xC000003E,
        x32_bit=0x40000000,
        numbers={
            "ptrace": 101, "syslog": 103, "acct": 163, "mount": 165, "umount2": 166,
            "swapon": 167, "swapoff": 168, "reboot": 169, "sethostname": 170,
            "setdomainname": 171, "iopl": 172, "ioperm": 173, "init_module": 175,
            "delete_module": 176, "finit_module": 313, "quotactl": 179, "quotactl_fd": 443,
            "pivot_root": 155, "chroot": 161, "vhangup": 153, "personality": 135, "uselib": 134,
            "_sysctl": 156, "lookup_dcookie": 212, "kexec_load": 246, "kexec_file_load": 320,
            "add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272, "setns": 308,
            "perf_event_open": 298, "fanotify_init": 300, "name_to_handle_at": 303,
            "open_by_handle_at": 304, "process_vm_readv": 310, "process_vm_writev": 311,
            "kcmp": 312, "bpf": 321, "userfaultfd": 323, "memfd_create": 319,
            "memfd_secret": 447, "io_uring_setup": 425, "io_uring_enter": 426,
            "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430,
            "fsconfig": 431, "fsmount": 432, "fspick": 433, "pidfd_getfd": 438, "clone3": 435,
            "clone": 56, "mount_setattr": 442, "ioctl": 16, "nfsservctl": 180,
            "move_pages": 279, "migrate_pages": 256, "msgget": 68, "semget": 64,
            "prlimit64": 302, "sched_setparam": 142, "sched_setscheduler": 144,
            "sched_setaffinity": 203, "sched_setattr": 314, "setpriority": 141,
            "ioprio_set": 251, "process_madvise": 440, "fcntl": 72, "setsockopt": 54,
            "vmsplice": 278, "inotify_init": 253, "inotify_init1": 294, "flock": 73,
            "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "setxattrat": 463,
            "mq_open": 240,
        },  # fmt: skip
    ),
    "aarch64": Arch(audit=0xC00000B7, numbers=dict(_COMMON_GENERIC)),
    "riscv64": Arch(audit=0xC00000F3, numbers=dict(_COMMON_GENERIC)),
}

#: Denied for everything in the sandbox, supervisor included.
SANDBOX_DENIED = (
    "add_key", "request_key", "bpf", "perf_event_open", "ptrace", "process_vm_readv",
    "process_vm_writev", "userfaultfd", "kexec_load", "kexec_file_load", "init_module",
    "finit_module", "delete_module", "reboot", "swapon", "swapoff", "acct", "quotactl",
    "quotactl_fd", "syslog", "vhangup", "lookup_dcookie", "name_to_handle_at",
    "open_by_handle_at", "fanotify_init", "kcmp", "pidfd_getfd", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "iopl", "ioperm", "uselib", "_sysctl", "nfsservctl",
    "memfd_secret", "move_pages", "migrate_pages", "sethostname", "setdomainname",
)  # fmt: skip
#: Denied in addition for the programs (and their completion's supervisor, after set-up).
PROGRAM_DENIED = (
    "keyctl", "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree",
    "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "memfd_create",
    "msgget", "semget", "process_madvise", "vmsplice", "inotify_init", "inotify_init1", "flock",
    "mq_open",
)  # fmt: skip
#: Allowed to programs only on themselves (first argument 0): the container's supervisor runs
#: as the same uid, and a limit or a scheduling class set on it would break it.
PROGRAM_SELF_ONLY = (
    "prlimit64", "sched_setparam", "sched_setscheduler", "sched_setaffinity", "sched_setattr",
)  # fmt: skip
#: (call, the only `which` allowed) for calls taking (which, who): allowed on the caller only.
PROGRAM_SELF_ONLY_WHICH = (("setpriority", 0), ("ioprio_set", 1))  # PRIO_PROCESS, IOPRIO_WHO_PROCESS
#: Denied to programs with EOPNOTSUPP, as on a file system without them: extended attributes
#: (tmpfs's user.* values, POSIX ACLs) are kernel memory that the count of a folder's used
#: blocks does not see.
PROGRAM_NO_XATTRS = ("setxattr", "lsetxattr", "fsetxattr", "setxattrat")
_F_SETPIPE_SZ = 1031
#: fcntl commands that take a lock or a lease (F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW,
#: F_SETLEASE), denied to programs like flock: lock records are kernel memory outside the
#: budget that no limit bounds (RLIMIT_LOCKS is not enforced), and a file kept open by a
#: mapping held a lock for every other byte. Querying one (F_GETLK, F_OFD_GETLK) keeps nothing.
#: EPERM, not ENOLCK: SQLite retries ENOLCK as a busy lock until its timeout.
FCNTL_LOCK_COMMANDS = (6, 7, 37, 38, 1024)
_SOL_SOCKET = 1
_SOCKET_BUFFER_OPTIONS = (7, 8, 32, 33)  # SO_SNDBUF, SO_RCVBUF, SO_SNDBUFFORCE, SO_RCVBUFFORCE


class _Program:
    """A tiny classic-BPF assembler: instructions with symbolic jump targets."""

    def __init__(self) -> None:
        self.code: list[tuple[int, object, object, int]] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def load(self, offset: int) -> None:
        self.code.append((_LD_ABS, 0, 0, offset))

    def jump(self, op: int, k: int, jt: object = 0, jf: object = 0) -> None:
        """`jt`/`jf`: a label, or 0 for the next instruction."""
        self.code.append((op, jt, jf, k))

    def ret(self, value: int) -> None:
        self.code.append((_RET, 0, 0, value))

    def assemble(self) -> bytes:
        out = bytearray()
        for pc, (op, jt, jf, k) in enumerate(self.code):
            offsets = []
            for target in (jt, jf):
                offset = 0 if target == 0 else self.labels[str(target)] - pc - 1
                if not 0 <= offset <= 255:
                    raise ValueError(f"BPF jump out of range at {pc}")
                offsets.append(offset)
            out += struct.pack("<HBBI", op, offsets[0], offsets[1], k)
        return bytes(out)


def _filter(arch: Arch, denied: tuple[str, ...], *, program: bool) -> bytes:
    p = _Program()
    p.load(_ARCH)
    p.jump(_JEQ, arch.audit, 0, "kill")
    p.load(_NR)
    if arch.x32_bit is not None:
        p.jump(_JGE, arch.x32_bit, "kill", 0)
    numbers = arch.numbers
    if program:
        p.jump(_JEQ, numbers["clone3"], "enosys", 0)
        p.jump(_JEQ, numbers["clone"], "clone", 0)
        p.jump(_JEQ, numbers["fcntl"], "fcntl", 0)
        p.jump(_JEQ, numbers["setsockopt"], "setsockopt", 0)
        for name in PROGRAM_SELF_ONLY:
            p.jump(_JEQ, numbers[name], "self_only", 0)
        for name, _which in PROGRAM_SELF_ONLY_WHICH:
            p.jump(_JEQ, numbers[name], "which_" + name, 0)
        for name in PROGRAM_NO_XATTRS:
            p.jump(_JEQ, numbers[name], "eopnotsupp", 0)
    else:
        p.jump(_JEQ, numbers["keyctl"], "keyctl", 0)
        p.jump(_JEQ, numbers["ioctl"], "ioctl", 0)
        p.jump(_JEQ, numbers["personality"], "personality", 0)
    for name in denied:
        if name in numbers:  # iopl, uselib, ... exist on x86_64 only
            p.jump(_JEQ, numbers[name], "deny", 0)
    p.ret(_RET_ALLOW)
    if program:
        p.label("clone")  # flags are clone's first argument on every supported machine
        p.load(_arg_low(0))
        p.jump(_JSET, _CLONE_NAMESPACES, "deny", 0)
        p.ret(_RET_ALLOW)
        # Pipe buffers are kernel memory outside the budget: they stay at the default size.
        p.label("fcntl")
        p.load(_arg_low(1))
        p.jump(_JEQ, _F_SETPIPE_SZ, "deny", 0)
        for command in FCNTL_LOCK_COMMANDS:
            p.jump(_JEQ, command, "deny", 0)
        p.ret(_RET_ALLOW)
        p.label("setsockopt")  # socket buffers likewise stay at net.core.[rw]mem_default
        p.load(_arg_low(1))
        p.jump(_JEQ, _SOL_SOCKET, 0, "allow_socket")
        p.load(_arg_low(2))
        for option in _SOCKET_BUFFER_OPTIONS:
            p.jump(_JEQ, option, "deny", 0)
        p.label("allow_socket")
        p.ret(_RET_ALLOW)
        for name, which in PROGRAM_SELF_ONLY_WHICH:
            p.label("which_" + name)
            p.load(_arg_low(0))
            p.jump(_JEQ, which, 0, "deny")
            p.load(_arg_low(1))
            p.jump(_JEQ, 0, 0, "deny")
            p.ret(_RET_ALLOW)
        p.label("self_only")  # pid_t is 32 bits: the kernel reads only the low half
        p.load(_arg_low(0))
        p.jump(_JEQ, 0, 0, "deny")
        p.ret(_RET_ALLOW)
        p.label("eopnotsupp")
        p.ret(_RET_ERRNO | _EOPNOTSUPP)
    else:
        p.label("keyctl")  # only keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL): a new anonymous ring
        p.load(_arg_low(0))
        p.jump(_JEQ, _KEYCTL_JOIN_SESSION_KEYRING, 0, "deny")
        p.load(_arg_high(0))
        p.jump(_JEQ, 0, 0, "deny")
        p.load(_arg_low(1))
        p.jump(_JEQ, 0, 0, "deny")
        p.load(_arg_high(1))
        p.jump(_JEQ, 0, 0, "deny")
        p.ret(_RET_ALLOW)
        p.label("ioctl")  # no typing into a terminal, no console tricks
        p.load(_arg_low(1))
        p.jump(_JEQ, _TIOCSTI, "deny", 0)
        p.jump(_JEQ, _TIOCLINUX, "deny", 0)
        p.ret(_RET_ALLOW)
        p.label("personality")
        p.load(_arg_low(0))
        for value in _PERSONALITIES:
            p.jump(_JEQ, value, "allow", 0)
        p.label("deny_personality")
        p.ret(_RET_ERRNO | _EPERM)
        p.label("allow")
        p.ret(_RET_ALLOW)
    p.label("deny")
    p.ret(_RET_ERRNO | _EPERM)
    p.label("enosys")
    p.ret(_RET_ERRNO | _ENOSYS)
    p.label("kill")
    p.ret(_RET_KILL_PROCESS)
    return p.assemble()


def machine_arch(machine: str | None = None) -> Arch | None:
    """The filter tables for `machine` (default: this one), or None where there are none."""
    return ARCHES.get(machine or platform.machine())


def sandbox_filter(machine: str | None = None) -> bytes:
    """The BPF program (struct sock_filter array) for everything in the sandbox."""
    arch = machine_arch(machine)
    if arch is None:
        raise ValueError(f"no seccomp tables for {machine or platform.machine()}")
    return _filter(arch, SANDBOX_DENIED, program=False)


def program_filter(machine: str | None = None) -> bytes:
    """The BPF program stacked on top for the programs of one completion."""
    arch = machine_arch(machine)
    if arch is None:
        raise ValueError(f"no seccomp tables for {machine or platform.machine()}")
    return _filter(arch, PROGRAM_DENIED, program=True)


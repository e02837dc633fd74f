"""Fixtures for the code verifier and sandbox tests: sandboxed verifiers and host probes."""

from __future__ import annotations

import os
import textwrap
import time
from collections.abc import Callable

import pytest

# The attack suite runs under bubblewrap. To see that it really detects leaks, run it once
# without isolation: VERISTEP_ATTACK_ISOLATION=rlimits-only pytest tests/verifiers/code -k attack
ATTACK_ISOLATION = os.environ.get("VERISTEP_ATTACK_ISOLATION", "bwrap")


def _bwrap_or_skip(**config):
    from veristep.verifiers.code import CodeVerifier
    from veristep.verifiers.code.sandbox import SandboxUnavailable

    isolation = ATTACK_ISOLATION
    try:
        return CodeVerifier(
            isolation=isolation, allow_unsandboxed=isolation == "rlimits-only", **config
        )
    except SandboxUnavailable as err:
        if os.environ.get("VERISTEP_REQUIRE_BWRAP"):
            pytest.fail(f"VERISTEP_REQUIRE_BWRAP is set but bubblewrap cannot run: {err}")
        pytest.skip(f"bubblewrap sandbox unavailable here: {err}")


@pytest.fixture(scope="session")
def code_verifier():
    """A CodeVerifier under bubblewrap (1 s per test); fails instead of skipping in CI."""
    return _bwrap_or_skip(timeout=1.0, workers=2)


@pytest.fixture(scope="session")
def make_code_verifier() -> Callable[..., object]:
    """Build a bubblewrap CodeVerifier with extra keyword configuration."""
    return _bwrap_or_skip


@pytest.fixture(scope="session")
def timed_verify() -> Callable[..., tuple[object, float]]:
    """Verify one program on a fresh one-worker verifier: (result, seconds the call took)."""

    def run(code: str, reference: object, timeout: float) -> tuple[object, float]:
        verifier = _bwrap_or_skip(timeout=timeout, workers=1)
        started = time.monotonic()
        try:
            result = verifier.verify(textwrap.dedent(code), reference)
        finally:
            verifier.close()
        return result, time.monotonic() - started

    return run


@pytest.fixture
def sandbox_processes() -> Callable[..., list[int]]:
    """Return a function listing host pids of live processes started by sandboxed programs
    (everything in a sandbox but its launchers, its zygote and a completion's PID 1), or of
    processes whose command line holds one of the extra byte markers."""
    from veristep.verifiers.code.sandbox import _LAUNCHER, _SUPERVISOR_SOURCE

    marker = _SUPERVISOR_SOURCE.encode()[:200]
    launcher_code = _LAUNCHER.encode()

    def live(*extra: bytes) -> list[int]:
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            try:
                with open(f"/proc/{name}/cmdline", "rb") as fh:
                    cmdline = fh.read()
                with open(f"/proc/{name}/status") as fh:
                    status = dict(line.split(":", 1) for line in fh if ":" in line)
            except OSError:
                continue
            if status.get("State", "").strip().startswith("Z"):
                continue
            if any(m in cmdline for m in extra):
                found.append(int(name))
                continue
            launcher = launcher_code in cmdline or os.path.basename(
                cmdline.split(b"\0", 1)[0]) in (b"bwrap", b"unshare")
            parent = int(status.get("PPid", "0"))
            supervisor = (
                status.get("NSpid", "").split()[-1:] == ["1"]  # PID 1 of its namespace
                or parent == os.getpid()  # rlimits-only: the zygote is our child,
                or _parent_of(parent) == os.getpid()  # and a completion's container its
            )
            if marker in cmdline and not launcher and not supervisor:
                found.append(int(name))
        return found

    return live


def _parent_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0

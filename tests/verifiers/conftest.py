"""Fixtures for the verifier tests.

Code verifier and sandbox: a sandboxed verifier and host probes. Library surface: `ExactVerifier`,
a small real verifier ("Answer: X" against the reference, numbers compared by value) for testing
the runner, adapters and audit without depending on one concrete verifier.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from veristep.verifiers import Status, VerifyResult
from veristep.verifiers.core.registry import register_verifier

# The attack suite runs under bubblewrap. To see that it really detects leaks, run it once
# without isolation: VERISTEP_ATTACK_ISOLATION=rlimits-only pytest tests/verifiers -k attack
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


@pytest.fixture
def sandbox_processes() -> Callable[..., list[int]]:
    """Return a function listing host pids of live processes started by sandboxed programs
    (everything in a sandbox except its launcher and supervisor, which the sandbox cache keeps), or of
    processes whose command line holds one of the extra byte markers."""
    from veristep.verifiers.code.sandbox import _SUPERVISOR_SOURCE

    marker = _SUPERVISOR_SOURCE.encode()[:200]

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
            launcher = cmdline.startswith((b"bwrap\0", b"unshare\0"))
            supervisor = (
                status.get("NSpid", "").split()[-1:] == ["1"]  # PID 1 of its namespace
                or int(status.get("PPid", "0")) == os.getpid()  # rlimits-only: our child
            )
            if marker in cmdline and not launcher and not supervisor:
                found.append(int(name))
        return found

    return live


class ExactVerifier:
    """Exact-match verifier: "Answer: X" against the reference; numbers compared by value."""

    kind = "exact"

    def __init__(self, workers: int | None = None, rel_close: float = 1e-2) -> None:
        if workers is not None and workers < 1:
            raise ValueError("workers must be >= 1")
        self.workers = workers
        self.rel_close = rel_close
        self.calls = 0

    def reference_from_record(self, record: dict[str, Any]) -> Any:
        return record["answer"]

    def verify(self, completion: str, reference: Any) -> VerifyResult:
        self.calls += 1
        if reference is None:  # nothing to compare against: the checker cannot judge
            return VerifyResult(0.0, False, Status.INTERNAL_ERROR, detail="no reference")
        found = completion.rsplit("Answer:", 1)
        if len(found) < 2 or not found[1].strip():
            return VerifyResult(0.0, False, Status.NO_ANSWER)
        answer = found[1].strip().splitlines()[0].strip()
        ref = str(reference).strip()
        if answer == ref:
            return VerifyResult(1.0, True, Status.CORRECT, extracted=answer)
        try:
            a, r = float(answer), float(ref)
        except ValueError:
            return VerifyResult(0.0, False, Status.WRONG, extracted=answer)
        if a == r:
            return VerifyResult(1.0, True, Status.CORRECT, extracted=answer)
        close = abs(a - r) <= self.rel_close * max(abs(r), 1e-12)
        return VerifyResult(
            0.0, False, Status.WRONG, extracted=answer, extra={"numeric_close": close}
        )

    def verify_batch(
        self, completions: Sequence[str], references: Sequence[Any]
    ) -> list[VerifyResult]:
        return [self.verify(c, r) for c, r in zip(completions, references, strict=True)]


@pytest.fixture(scope="session", autouse=True)
def exact_kind() -> str:
    """Register ExactVerifier under the kind "exact" for the whole session."""
    register_verifier("exact", ExactVerifier, replace=True)
    return "exact"


@pytest.fixture
def exact_cls() -> type:
    """The ExactVerifier class."""
    return ExactVerifier

"""Fixtures for the verifier tests (the code verifier's are in tests/verifiers/code/conftest.py).

Library surface: `ExactVerifier`, a small real verifier ("Answer: X" against the reference,
numbers compared by value) for testing the runner, adapters and audit without depending on one
concrete verifier.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from veristep.verifiers import Status, VerifyResult
from veristep.verifiers.core.registry import register_verifier


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

"""Small, real verifiers for trainer tests, where a random tiny model must earn mixed rewards.

Loaded by the trainer through `verifier="<this file>:Class"` (the user-class hook of
veristep.train.rewards), so the tests exercise the same path a user's custom verifier takes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from veristep.verifiers.core.result import Status, VerifyResult


class FirstCharVerifier:
    """Reward 1 when the completion's first character is one of the reference's characters."""

    kind = "first_char"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers

    def verify(self, completion: str, reference: Any) -> VerifyResult:
        """Judge one completion."""
        ok = bool(completion) and completion[0] in str(reference)
        return VerifyResult(float(ok), ok, Status.CORRECT if ok else Status.WRONG)

    def verify_batch(self, completions: Sequence[str], references: Sequence[Any]) -> list[VerifyResult]:
        """Judge many completions."""
        return [self.verify(c, r) for c, r in zip(completions, references, strict=True)]

    def reference_from_record(self, record: dict[str, Any]) -> Any:
        """The allowed first characters."""
        return record["answer"]


class NeverCorrectVerifier(FirstCharVerifier):
    """Reward 0 for everything: a deliberately collapsed (all-wrong) batch."""

    kind = "never"

    def verify(self, completion: str, reference: Any) -> VerifyResult:
        """Judge one completion (always wrong)."""
        return VerifyResult(0.0, False, Status.WRONG)


class TimeOutOnMarkVerifier(FirstCharVerifier):
    """First-character rule, except that the checker times out (no verdict) on TIMEOUT_MARK."""

    kind = "timeout_on_mark"
    mark = "7"  # a completion starting with it makes the checker time out

    def verify(self, completion: str, reference: Any) -> VerifyResult:
        """Judge one completion, or fail to."""
        if completion.startswith(self.mark):
            return VerifyResult(0.0, False, Status.TIMEOUT, detail="checker timed out")
        return super().verify(completion, reference)


class NeverJudgedVerifier(FirstCharVerifier):
    """A checker that times out on everything: no completion ever gets a verdict."""

    kind = "never_judged"

    def verify(self, completion: str, reference: Any) -> VerifyResult:
        """Fail to judge one completion."""
        return VerifyResult(0.0, False, Status.TIMEOUT, detail="checker timed out")


class ContainsMarkVerifier(FirstCharVerifier):
    """Reward 1 when the completion contains MARK anywhere: depends on how a prefix is continued."""

    kind = "contains_mark"
    MARK = "z"

    def verify(self, completion: str, reference: Any) -> VerifyResult:
        """Judge one completion."""
        ok = self.MARK in completion
        return VerifyResult(float(ok), ok, Status.CORRECT if ok else Status.WRONG)


class FailsLaterVerifier(FirstCharVerifier):
    """First-character rule until its FAIL_AT-th batch, which raises; `close` leaves a mark.

    Set VERISTEP_TEST_CLOSED to a file path: `close` writes it, so a test can see that the
    trainer stopped the verifiers' workers on the way out of a failed run.
    """

    kind = "fails_later"
    FAIL_AT = 3

    def __init__(self, workers: int | None = None) -> None:
        super().__init__(workers)
        self.calls = 0

    def verify_batch(self, completions: Sequence[str], references: Sequence[Any]) -> list[VerifyResult]:
        """Judge many completions, or raise on the FAIL_AT-th call."""
        self.calls += 1
        if self.calls == self.FAIL_AT:
            raise RuntimeError("verifier failed on purpose")
        return super().verify_batch(completions, references)

    def close(self) -> None:
        """Record that the trainer closed this verifier."""
        import os

        path = os.environ.get("VERISTEP_TEST_CLOSED")
        if path:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write("closed\n")


class FirstCharHalfVerifier(FirstCharVerifier):
    """Reward 1 when the completion starts with one of about half the tiny tokenizer's common
    characters, whatever the reference: mixed and all-wrong groups on any data set."""

    kind = "first_char_half"
    HALF = "abcdefghijklmnopqrstuvwxyz0123456789 \n\t.,;:!?+-*/=()[]{}<>'\"#$%&@^_`|~"

    def verify(self, completion: str, reference: Any) -> VerifyResult:
        """Judge one completion."""
        return super().verify(completion, self.HALF)


class HalfOrTimeOutVerifier(FirstCharHalfVerifier):
    """FirstCharHalfVerifier, except that a completion whose second character is in TIMEOUT_ON
    gets no verdict (a checker time-out): partly judged groups, mixed and collapsed ones."""

    kind = "half_or_timeout"
    TIMEOUT_ON = "abcdefghijklm0123456789"

    def verify(self, completion: str, reference: Any) -> VerifyResult:
        """Judge one completion, or fail to."""
        if len(completion) > 1 and completion[1] in self.TIMEOUT_ON:
            return VerifyResult(0.0, False, Status.TIMEOUT, detail="checker timed out")
        return super().verify(completion, reference)

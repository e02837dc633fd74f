"""The result type and protocol that every outcome verifier shares."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


class Status(str, enum.Enum):
    """Why a verifier gave the reward it gave; one enum for every verifier kind."""

    CORRECT = "correct"
    # judged, and the answer (a number, a program's output, a call) does not match the reference
    WRONG = "wrong"
    NO_ANSWER = "no_answer"
    PARSE_ERROR = "parse_error"
    TIMEOUT = "timeout"
    # code execution
    # Deprecated alias of WRONG (a program whose output differs is the same verdict), removed in
    # the next release; the value "wrong_answer" in older records still reads as WRONG.
    WRONG_ANSWER = "wrong"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    MEMORY_LIMIT = "memory_limit"
    PROCESS_LIMIT = "process_limit"
    OUTPUT_LIMIT = "output_limit"
    NO_CODE = "no_code"
    SANDBOX_ERROR = "sandbox_error"
    # tool calls
    NO_CALL = "no_call"
    UNKNOWN_FUNCTION = "unknown_function"
    SCHEMA_VIOLATION = "schema_violation"
    WRONG_ARGUMENTS = "wrong_arguments"
    WRONG_COUNT = "wrong_count"
    # format
    FORMAT_ERROR = "format_error"
    # the reference cannot be used (empty, unparseable, in no format the verifier reads): the
    # dataset's fault, never the model's, so the item is not judged
    BAD_REFERENCE = "bad_reference"
    # the input line itself could not be verified (bad JSON, no completion, text that is not
    # valid Unicode): set by the JSONL commands, never by a verifier
    INPUT_ERROR = "input_error"
    # the verifier itself failed on this item (a bug, never the model's fault)
    INTERNAL_ERROR = "internal_error"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def _missing_(cls, value: object) -> Status | None:
        # records and server replies written before WRONG_ANSWER became WRONG's alias
        return cls.WRONG if value == "wrong_answer" else None


#: Statuses that mean "the verifier could not judge", as opposed to "the answer is wrong".
UNJUDGED = frozenset(
    {
        Status.TIMEOUT,
        Status.SANDBOX_ERROR,
        Status.BAD_REFERENCE,
        Status.INPUT_ERROR,
        Status.INTERNAL_ERROR,
    }
)


@dataclass
class VerifyResult:
    """Outcome of verifying one completion against its reference."""

    reward: float
    correct: bool
    status: Status
    detail: str = ""
    extracted: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    #: Whether the verifier reached a verdict. None derives it from the status (UNJUDGED
    #: statuses are not verdicts); a verifier sets it when the status alone cannot tell, as
    #: the code verifier does for a program that runs out of time (a verdict on the program).
    judged: bool | None = None

    def __post_init__(self) -> None:
        if self.judged is None:
            self.judged = self.status not in UNJUDGED

    def to_record(self) -> dict[str, Any]:
        """Return the JSON-serialisable fields a CLI output line adds to its input line."""
        record: dict[str, Any] = {
            "reward": self.reward,
            "correct": self.correct,
            "status": self.status.value,
            "judged": bool(self.judged),
            "extracted": self.extracted,
        }
        if self.detail:
            record["detail"] = self.detail
        record.update(self.extra)
        return record


@runtime_checkable
class Verifier(Protocol):
    """What every verifier offers: one item, a batch, and how to read a JSONL record."""

    kind: str

    def verify(self, completion: str, reference: Any) -> VerifyResult:
        """Verify one completion; never raises on bad model output."""
        ...

    def verify_batch(
        self, completions: Sequence[str], references: Sequence[Any]
    ) -> list[VerifyResult]:
        """Verify many completions in parallel, in input order."""
        ...

    def reference_from_record(self, record: dict[str, Any]) -> Any:
        """Pull this verifier's reference out of one JSONL input record (KeyError if absent)."""
        ...

"""`veristep audit`: find the groups in which every sample failed and say why (model or checker?).

A high all-wrong rate in training is either the model failing or the checker failing the model.
The audit classifies each failed sample of an all-wrong group by its verifier status into a
failure reason, says which reasons point at the checker, prints a table, and writes the failed
samples to a JSONL file to inspect.
"""

from __future__ import annotations

import argparse
import enum
import json
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.registry import verifier_class
from ..core.result import Status
from .jsonl_io import STDIO, InputError, JsonlWriter, iter_jsonl, require
from .runner import LocalBackend, batched, output_row, read_items


class FailureReason(str, enum.Enum):
    """Why a sample failed, at the level a person debugging the reward needs."""

    NO_ANSWER = "no_answer"
    FORMAT = "format_failure"
    PARSE_ERROR = "parse_error"
    TIMEOUT = "timeout"
    NUMERIC_CLOSE = "numeric_close"
    CHECKER_ERROR = "checker_error"
    PROGRAM_ERROR = "program_error"
    MISMATCH = "mismatch"
    UNKNOWN = "unknown_status"

    def __str__(self) -> str:
        return self.value


#: What each reason means, for the table.
REASON_MEANING: dict[FailureReason, str] = {
    FailureReason.NO_ANSWER: "no answer extracted (no boxed answer / code block / tool call)",
    FailureReason.FORMAT: "format failure (required tags or structure missing)",
    FailureReason.PARSE_ERROR: "answer or reference could not be parsed",
    FailureReason.TIMEOUT: "verification timed out",
    FailureReason.NUMERIC_CLOSE: "numerically close to the reference but judged unequal: "
    "possible tolerance problem",
    FailureReason.CHECKER_ERROR: "the checker itself failed (sandbox or internal error)",
    FailureReason.PROGRAM_ERROR: "the program failed to compile or run, or hit a limit",
    FailureReason.MISMATCH: "genuine mismatch with the reference",
    FailureReason.UNKNOWN: "status not known to this audit",
}

#: Reasons that suggest the checker, not the model, is at fault: inspect these first.
CHECKER_SUSPECTS = frozenset(
    {
        FailureReason.PARSE_ERROR,
        FailureReason.TIMEOUT,
        FailureReason.NUMERIC_CLOSE,
        FailureReason.CHECKER_ERROR,
        FailureReason.UNKNOWN,
    }
)

_STATUS_REASON: dict[Status, FailureReason] = {
    Status.NO_ANSWER: FailureReason.NO_ANSWER,
    Status.NO_CODE: FailureReason.NO_ANSWER,
    Status.NO_CALL: FailureReason.NO_ANSWER,
    Status.FORMAT_ERROR: FailureReason.FORMAT,
    Status.PARSE_ERROR: FailureReason.PARSE_ERROR,
    Status.TIMEOUT: FailureReason.TIMEOUT,
    Status.SANDBOX_ERROR: FailureReason.CHECKER_ERROR,
    Status.INTERNAL_ERROR: FailureReason.CHECKER_ERROR,
    Status.COMPILE_ERROR: FailureReason.PROGRAM_ERROR,
    Status.RUNTIME_ERROR: FailureReason.PROGRAM_ERROR,
    Status.MEMORY_LIMIT: FailureReason.PROGRAM_ERROR,
    Status.OUTPUT_LIMIT: FailureReason.PROGRAM_ERROR,
    Status.WRONG: FailureReason.MISMATCH,
    Status.WRONG_ANSWER: FailureReason.MISMATCH,
    Status.UNKNOWN_FUNCTION: FailureReason.MISMATCH,
    Status.SCHEMA_VIOLATION: FailureReason.MISMATCH,
    Status.WRONG_ARGUMENTS: FailureReason.MISMATCH,
    Status.WRONG_COUNT: FailureReason.MISMATCH,
}

# Priority when a group's reasons tie: checker suspects first, they are the actionable ones.
_PRIORITY = [
    FailureReason.NUMERIC_CLOSE,
    FailureReason.PARSE_ERROR,
    FailureReason.TIMEOUT,
    FailureReason.CHECKER_ERROR,
    FailureReason.UNKNOWN,
    FailureReason.FORMAT,
    FailureReason.NO_ANSWER,
    FailureReason.PROGRAM_ERROR,
    FailureReason.MISMATCH,
]
_REFERENCE_KEYS = ("answer", "reference", "ground_truth", "expected", "tests")


def failure_reason(record: dict[str, Any]) -> FailureReason:
    """Classify one failed sample from its verifier fields (status, numeric_close)."""
    try:
        status = Status(str(record.get("status")))
    except ValueError:
        return FailureReason.UNKNOWN
    if status == Status.WRONG and record.get("numeric_close") is True:
        return FailureReason.NUMERIC_CLOSE
    return _STATUS_REASON.get(status, FailureReason.UNKNOWN)


def points_at(reason: FailureReason) -> str:
    """ "checker" for reasons that suggest the verifier is at fault, else "model"."""
    return "checker" if reason in CHECKER_SUSPECTS else "model"


def is_correct(record: dict[str, Any]) -> bool:
    """A sample counts as correct when its `correct` field says so (or, lacking it, its status)."""
    if isinstance(record.get("correct"), bool):
        return record["correct"]
    return str(record.get("status")) == Status.CORRECT.value


def has_result(record: dict[str, Any]) -> bool:
    """Whether the record already carries a verifier result."""
    return "status" in record or isinstance(record.get("correct"), bool)


@dataclass
class GroupAudit:
    """One all-wrong group: its key, size, failure reasons and the reason that dominates."""

    key: str
    size: int
    reasons: Counter
    reference: str | None = None
    sample: dict[str, Any] = field(default_factory=dict)

    @property
    def dominant(self) -> FailureReason:
        """Most frequent reason; ties go to the checker suspects."""
        top = max(self.reasons.values())
        return next(r for r in _PRIORITY if self.reasons.get(r, 0) == top)

    def explain(self) -> str:
        """One line: group key, reasons and an example of what was extracted vs the reference."""
        parts = ", ".join(f"{r.value} x{n}" for r, n in self.reasons.most_common())
        line = f"group {self.key} ({self.size} samples): {parts}"
        extracted = self.sample.get("extracted")
        shown = "nothing" if extracted is None else _short(extracted)
        line += f"; e.g. extracted {shown} vs reference {_short(self.reference)}"
        return line


@dataclass
class AuditReport:
    """Result of an audit over grouped rollouts."""

    group_key: str
    groups: int = 0
    samples: int = 0
    all_correct: int = 0
    all_wrong: list[GroupAudit] = field(default_factory=list)
    failed_samples: list[tuple[str, FailureReason, dict[str, Any]]] = field(default_factory=list)

    @property
    def reason_counts(self) -> Counter:
        """Failed samples in all-wrong groups, per reason."""
        return Counter(reason for _, reason, _ in self.failed_samples)

    def table(self, source: str = "", show_groups: int = 10) -> str:
        """The printed report: overview, one row per reason, and the worst groups explained."""
        n = self.groups or 1
        wrong = len(self.all_wrong)
        lines = [
            f"audit of {source or 'input'} (group key: {self.group_key})",
            f"groups: {self.groups}  samples: {self.samples}  all-wrong: {wrong} ({wrong / n:.1%})  "
            f"all-correct: {self.all_correct} ({self.all_correct / n:.1%})  "
            f"mixed: {self.groups - wrong - self.all_correct}",
        ]
        if not wrong:
            lines.append("no all-wrong groups: nothing to explain")
            return "\n".join(lines)
        counts = self.reason_counts
        dominant = Counter(g.dominant for g in self.all_wrong)
        total = sum(counts.values())
        lines.append(
            f"  {'reason':<16}{'samples':>8}{'share':>8}{'groups*':>9}  {'points at':<10}meaning"
        )
        for reason in sorted(counts, key=lambda r: (-counts[r], _PRIORITY.index(r))):
            lines.append(
                f"  {reason.value:<16}{counts[reason]:>8}{counts[reason] / total:>8.1%}"
                f"{dominant.get(reason, 0):>9}  {points_at(reason):<10}{REASON_MEANING[reason]}"
            )
        lines.append("  * all-wrong groups in which this is the most frequent reason")
        ordered = sorted(self.all_wrong, key=lambda g: _PRIORITY.index(g.dominant))
        for group in ordered[:show_groups]:
            lines.append("  " + group.explain())
        if len(ordered) > show_groups:
            lines.append(f"  ... and {len(ordered) - show_groups} more all-wrong groups")
        suspects = sum(counts[r] for r in counts if r in CHECKER_SUSPECTS)
        suspect_groups = sum(1 for g in self.all_wrong if g.dominant in CHECKER_SUSPECTS)
        if suspects:
            lines.append(
                f"verdict: {suspects} of {total} failed samples ({suspects / total:.0%}) point at "
                f"the checker (parse error, timeout, tolerance, checker error), dominating "
                f"{suspect_groups} of {wrong} all-wrong groups: inspect those first"
            )
        else:
            lines.append(
                "verdict: no failure points at the checker; the all-wrong groups look "
                "like the model's"
            )
        return "\n".join(lines)

    def examples(self, per_reason: int) -> list[dict[str, Any]]:
        """Failed samples to inspect, checker suspects first, at most `per_reason` per reason."""
        taken: Counter = Counter()
        rows = []
        ordered = sorted(self.failed_samples, key=lambda s: _PRIORITY.index(s[1]))
        for key, reason, record in ordered:
            if taken[reason] >= per_reason:
                continue
            taken[reason] += 1
            audit = {"group": key, "reason": reason.value, "points_at": points_at(reason)}
            rows.append({**audit, **{k: v for k, v in record.items() if k not in audit}})
        return rows


def _short(value: Any, width: int = 40) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = " ".join(text.split())  # one line, whatever the answer held
    return "'" + (text if len(text) <= width else text[: width - 3] + "...") + "'"


def _group_id(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def audit_records(records: Iterable[dict[str, Any]], group_key: str) -> AuditReport:
    """Group verified records by `group_key` and explain every group in which all samples failed."""
    groups: dict[str, list[dict[str, Any]]] = {}
    report = AuditReport(group_key)
    for record in records:
        groups.setdefault(_group_id(record[group_key]), []).append(record)
        report.samples += 1
    report.groups = len(groups)
    for key, members in groups.items():
        correct = [is_correct(r) for r in members]
        if all(correct):
            report.all_correct += 1
            continue
        if any(correct):
            continue
        reasons = Counter()
        for record in members:
            reason = failure_reason(record)
            reasons[reason] += 1
            report.failed_samples.append((key, reason, record))
        reference = next((members[0][k] for k in _REFERENCE_KEYS if k in members[0]), None)
        group = GroupAudit(key, len(members), reasons, reference)
        group.sample = next(r for r in members if failure_reason(r) == group.dominant)
        report.all_wrong.append(group)
    return report


def _stored_records(path: str, group_key: str, limit: int | None) -> Iterator[dict[str, Any]]:
    for record in iter_jsonl(path, limit=limit):
        require(record, group_key, path)
        if not has_result(record.data):
            raise InputError(
                path,
                record.line_no,
                "no verifier result (status/correct); pass --kind KIND to verify the rollouts",
            )
        yield record.data


def _verified_records(args: argparse.Namespace, config: dict[str, Any]) -> Iterator[dict[str, Any]]:
    cls = verifier_class(args.kind)
    if args.workers is not None:
        config = {**config, "workers": args.workers}
    verifier = cls(**config)
    backend = LocalBackend(verifier)
    errors: list[InputError] = []

    def checked() -> Iterator[Any]:
        for item in read_items(
            args.input, verifier, completion_key=args.completion_key, limit=args.limit
        ):
            require(item.record, args.group_key, args.input)
            yield item

    try:
        for batch, results in backend.run(batched(checked(), 256, errors.append)):
            for item, result in zip(batch, results, strict=True):
                yield output_row(item, result)
    finally:
        backend.close()
    if errors:
        raise errors[0]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `audit` sub-command."""
    parser = subparsers.add_parser(
        "audit",
        help="explain the groups of rollouts in which every sample failed",
        description=(
            "Group rollouts by --group-key, find the groups in which every sample failed, and "
            "say why: no answer, format failure, parse error, timeout, numeric mismatch close to "
            "the reference (possible tolerance problem), checker error or genuine mismatch. "
            "INPUT lines carry verifier results (veristep verify output) or, with --kind, are "
            "verified first."
        ),
    )
    parser.add_argument("input", metavar="INPUT.jsonl")
    parser.add_argument(
        "--group-key", default="prompt_id", help="key shared by one prompt's samples"
    )
    parser.add_argument("--kind", default=None, help="verify the rollouts with this verifier first")
    parser.add_argument(
        "--set",
        dest="config",
        action="append",
        metavar="KEY=VALUE",
        help="verifier config with --kind (as in veristep verify)",
    )
    parser.add_argument("--workers", type=int, default=None, help="verifier workers with --kind")
    parser.add_argument("--completion-key", default="completion")
    parser.add_argument("--limit", type=int, default=None, help="read only the first N lines")
    parser.add_argument(
        "--examples",
        default=None,
        help="JSONL of failed samples to inspect (default: INPUT.audit.jsonl)",
    )
    parser.add_argument(
        "--max-examples",
        type=int,
        default=20,
        help="failed samples written per reason (default 20)",
    )
    parser.add_argument(
        "--show-groups",
        type=int,
        default=10,
        help="all-wrong groups explained in the table (default 10)",
    )
    parser.set_defaults(func=run_command)


def _default_examples_path(source: str) -> str:
    if source == STDIO:
        return "audit_examples.jsonl"
    path = Path(source)
    return str(path.with_name(path.name.removesuffix(".jsonl") + ".audit.jsonl"))


def run_command(args: argparse.Namespace) -> int:
    """Handle `veristep audit`; returns the exit code."""
    from .verify import parse_config

    def fail(message: str, code: int) -> int:
        print(f"veristep audit: error: {message}", file=sys.stderr)
        return code

    if args.max_examples < 0 or (args.limit is not None and args.limit < 0):
        return fail("--max-examples and --limit must be >= 0", 2)
    try:
        config = parse_config(args.config)
        if config and not args.kind:
            return fail("--set needs --kind", 2)
        records = (
            _verified_records(args, config)
            if args.kind
            else _stored_records(args.input, args.group_key, args.limit)
        )
        report = audit_records(records, args.group_key)
    except InputError as err:
        return fail(str(err), 1)
    except (ValueError, TypeError) as err:
        return fail(str(err), 2)
    print(report.table(args.input, args.show_groups))
    examples_path = args.examples or _default_examples_path(args.input)
    try:
        with JsonlWriter(examples_path) as writer:
            writer.write_many(report.examples(args.max_examples))
    except OSError as err:
        return fail(f"cannot write {examples_path}: {err}", 1)
    print(f"wrote {writer.written} failed samples to inspect to {examples_path}")
    return 0

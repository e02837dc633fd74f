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
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veristep.common.jsonl_io import (
    EXIT_DATA,
    EXIT_OK,
    STDIO,
    JsonlWriter,
    LineMessages,
    OutputError,
    UsageError,
    check_input,
    check_output,
    iter_jsonl,
    missing_key,
    progress_bar,
)

from veristep.cli import add_output_option, add_progress_option

from ..core.result import UNJUDGED, Status
from .runner import (
    LocalBackend,
    chunks,
    close_verifier,
    count_lines,
    output_row,
    read_items,
    result_fields,
)
from .verify import build, verifier_from_args

PROG = "veristep audit"


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
    BAD_REFERENCE = "bad_reference"
    BAD_INPUT = "input_error"
    UNKNOWN = "unknown_status"

    def __str__(self) -> str:
        return self.value


class Blame(str, enum.Enum):
    """Where a failure points: what to fix, or that nothing needs fixing."""

    MODEL = "model"  # the model's answer is missing, malformed or wrong
    CHECKER = "checker"  # the verifier may have failed the model: inspect these first
    BY_DESIGN = "by design"  # a deliberate rejection the verifier documents, not a failure
    DATA = "data"  # the line or its reference is unusable: fix the dataset

    def __str__(self) -> str:
        return self.value


#: What each reason means, for the table.
REASON_MEANING: dict[FailureReason, str] = {
    FailureReason.NO_ANSWER: "no answer extracted (no boxed answer / code block / tool call)",
    FailureReason.FORMAT: "format failure (required tags or structure missing)",
    FailureReason.PARSE_ERROR: "the answer could not be parsed by the checker",
    FailureReason.TIMEOUT: "verification timed out",
    FailureReason.NUMERIC_CLOSE: "rounded answer to an exact reference (4.667 for 14/3): "
    "rejected on purpose, the verifier never rounds",
    FailureReason.CHECKER_ERROR: "the checker itself failed (sandbox or internal error)",
    FailureReason.PROGRAM_ERROR: "the program failed to compile or run, or hit a limit",
    FailureReason.MISMATCH: "genuine mismatch with the reference",
    FailureReason.BAD_REFERENCE: "the reference is unusable (empty, unreadable, wrong format): "
    "unjudged",
    FailureReason.BAD_INPUT: "the line could not be verified (no completion, invalid text)",
    FailureReason.UNKNOWN: "status not known to this audit",
}

#: Where each reason points.
BLAME: dict[FailureReason, Blame] = {
    FailureReason.NO_ANSWER: Blame.MODEL,
    FailureReason.FORMAT: Blame.MODEL,
    FailureReason.PROGRAM_ERROR: Blame.MODEL,
    FailureReason.MISMATCH: Blame.MODEL,
    FailureReason.PARSE_ERROR: Blame.CHECKER,
    FailureReason.TIMEOUT: Blame.CHECKER,
    FailureReason.CHECKER_ERROR: Blame.CHECKER,
    FailureReason.UNKNOWN: Blame.CHECKER,
    FailureReason.NUMERIC_CLOSE: Blame.BY_DESIGN,
    FailureReason.BAD_REFERENCE: Blame.DATA,
    FailureReason.BAD_INPUT: Blame.DATA,
}

#: Reasons that suggest the checker, not the model, is at fault: inspect these first.
CHECKER_SUSPECTS = frozenset(r for r, b in BLAME.items() if b is Blame.CHECKER)

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
    Status.PROCESS_LIMIT: FailureReason.PROGRAM_ERROR,
    Status.OUTPUT_LIMIT: FailureReason.PROGRAM_ERROR,
    Status.WRONG: FailureReason.MISMATCH,
    Status.UNKNOWN_FUNCTION: FailureReason.MISMATCH,
    Status.SCHEMA_VIOLATION: FailureReason.MISMATCH,
    Status.WRONG_ARGUMENTS: FailureReason.MISMATCH,
    Status.WRONG_COUNT: FailureReason.MISMATCH,
    Status.BAD_REFERENCE: FailureReason.BAD_REFERENCE,
    Status.INPUT_ERROR: FailureReason.BAD_INPUT,
}

# Priority when a group's reasons tie: checker suspects first, they are the actionable ones.
_PRIORITY = [
    FailureReason.PARSE_ERROR,
    FailureReason.TIMEOUT,
    FailureReason.CHECKER_ERROR,
    FailureReason.UNKNOWN,
    FailureReason.BAD_REFERENCE,
    FailureReason.BAD_INPUT,
    FailureReason.NUMERIC_CLOSE,
    FailureReason.FORMAT,
    FailureReason.NO_ANSWER,
    FailureReason.PROGRAM_ERROR,
    FailureReason.MISMATCH,
]
# Shown beside an example in the table only (no verdict depends on it); with --kind the
# verifier's own reference_from_record reads it instead.
_SHOWN_REFERENCE_KEYS = ("answer", "reference", "ground_truth", "expected", "tests")
#: The key under which the examples file records the audit of each sample.
AUDIT_KEY = "veristep_audit"


def failure_reason(record: dict[str, Any]) -> FailureReason:
    """Classify one failed sample from its verifier fields (status, numeric_close)."""
    fields = result_fields(record)
    try:
        status = Status(str(fields.get("status")))
    except ValueError:
        return FailureReason.UNKNOWN
    if status == Status.WRONG and fields.get("numeric_close") is True:
        return FailureReason.NUMERIC_CLOSE
    return _STATUS_REASON.get(status, FailureReason.UNKNOWN)


def points_at(reason: FailureReason) -> str:
    """Where a failure reason points: "model", "checker", "by design" or "data"."""
    return BLAME[reason].value


def is_correct(record: dict[str, Any]) -> bool:
    """A sample counts as correct when its `correct` field says so (or, lacking it, its status)."""
    fields = result_fields(record)
    if isinstance(fields.get("correct"), bool):
        return fields["correct"]
    return str(fields.get("status")) == Status.CORRECT.value


def is_judged(record: dict[str, Any]) -> bool:
    """Whether the verifier reached a verdict on the sample (`judged`, else from its status)."""
    fields = result_fields(record)
    if isinstance(fields.get("judged"), bool):
        return fields["judged"]
    return str(fields.get("status")) not in _UNJUDGED_VALUES


_UNJUDGED_VALUES = frozenset(s.value for s in UNJUDGED)


def has_result(record: dict[str, Any]) -> bool:
    """Whether the record carries a verifier result (a `veristep` key, or status/correct)."""
    fields = result_fields(record)
    return "status" in fields or isinstance(fields.get("correct"), bool)


def shown_reference(record: dict[str, Any]) -> Any:
    """The raw reference field of a record, for display beside an example."""
    return next((record[k] for k in _SHOWN_REFERENCE_KEYS if k in record), None)


@dataclass
class GroupAudit:
    """One all-wrong group: its key, size, failure reasons and the reason that dominates."""

    key: str
    size: int
    reasons: Counter
    reference: Any = None
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
        extracted = result_fields(self.sample).get("extracted")
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
    unjudged: Counter = field(default_factory=Counter)
    all_wrong: list[GroupAudit] = field(default_factory=list)
    no_verdict: list[GroupAudit] = field(default_factory=list)
    failed_samples: list[tuple[str, FailureReason, dict[str, Any]]] = field(default_factory=list)

    @property
    def reason_counts(self) -> Counter:
        """Failed samples in all-wrong groups, per reason."""
        return Counter(reason for _, reason, _ in self.failed_samples)

    def table(self, source: str = "", show_groups: int = 10) -> str:
        """The printed report: overview, one row per reason, and the worst groups explained."""
        n = self.groups or 1
        wrong, silent = len(self.all_wrong), len(self.no_verdict)
        mixed = self.groups - wrong - silent - self.all_correct
        lines = [
            f"audit of {source or 'input'} (group key: {self.group_key})",
            f"groups: {self.groups}  samples: {self.samples}  all-wrong: {wrong} ({wrong / n:.1%})  "
            f"all-correct: {self.all_correct} ({self.all_correct / n:.1%})  mixed: {mixed}"
            + (f"  no verdict: {silent}" if silent else ""),
        ]
        if self.unjudged:
            parts = ", ".join(f"{s} {c}" for s, c in self.unjudged.most_common())
            lines.append(
                f"unjudged samples: {sum(self.unjudged.values())} ({parts}): no verdict, not "
                "wrong; a group with no verdict at all is not counted as all-wrong"
            )
        explained = self.all_wrong + self.no_verdict
        if not explained:
            lines.append("no all-wrong groups: nothing to explain")
            return "\n".join(lines)
        counts = self.reason_counts
        dominant = Counter(g.dominant for g in explained)
        total = sum(counts.values())
        lines.append(
            f"  {'reason':<16}{'samples':>8}{'share':>8}{'groups*':>9}  {'points at':<11}meaning"
        )
        for reason in sorted(counts, key=lambda r: (-counts[r], _PRIORITY.index(r))):
            lines.append(
                f"  {reason.value:<16}{counts[reason]:>8}{counts[reason] / total:>8.1%}"
                f"{dominant.get(reason, 0):>9}  {points_at(reason):<11}{REASON_MEANING[reason]}"
            )
        lines.append("  * groups without a passing sample in which this is the most frequent reason")
        ordered = sorted(explained, key=lambda g: _PRIORITY.index(g.dominant))
        for group in ordered[:show_groups]:
            lines.append("  " + group.explain())
        if len(ordered) > show_groups:
            lines.append(f"  ... and {len(ordered) - show_groups} more groups")
        lines.extend(self._verdict(counts, total, len(explained)))
        return "\n".join(lines)

    def _verdict(self, counts: Counter, total: int, wrong: int) -> list[str]:
        by_blame = Counter()
        for reason, count in counts.items():
            by_blame[BLAME[reason]] += count
        suspects = by_blame[Blame.CHECKER]
        if suspects:
            explained = self.all_wrong + self.no_verdict
            groups = sum(1 for g in explained if BLAME[g.dominant] is Blame.CHECKER)
            lines = [
                f"verdict: {suspects} of {total} failed samples ({suspects / total:.0%}) point at "
                f"the checker (parse error, timeout, checker error), dominating {groups} of "
                f"{wrong} groups: inspect those first"
            ]
        else:
            lines = ["verdict: no failure points at the checker"]
        if by_blame[Blame.BY_DESIGN]:
            n = by_blame[Blame.BY_DESIGN]
            lines.append(
                f"  {n} of {total} ({n / total:.0%}) are deliberate rejections by design "
                "(numeric_close: a rounded answer to an exact reference), not checker failures"
            )
        if by_blame[Blame.DATA]:
            n = by_blame[Blame.DATA]
            lines.append(
                f"  {n} of {total} ({n / total:.0%}) point at the data (unusable references or "
                "lines): fix the dataset; these are unjudged, not wrong"
            )
        if by_blame[Blame.MODEL] == total:
            lines[0] += "; the all-wrong groups look like the model's"
        return lines

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
            rows.append({**{k: v for k, v in record.items() if k != AUDIT_KEY}, AUDIT_KEY: audit})
        return rows


def _short(value: Any, width: int = 40) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = " ".join(text.split())  # one line, whatever the answer held
    return "'" + (text if len(text) <= width else text[: width - 3] + "...") + "'"


def _group_id(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def audit_records(
    records: Iterable[dict[str, Any]],
    group_key: str,
    reference_of: Callable[[dict[str, Any]], Any] = shown_reference,
) -> AuditReport:
    """Group verified records by `group_key` and explain every group in which no sample passed.

    A group whose samples were all unjudged (bad references, time-outs) has no verdict: it is
    explained like the others but not counted as all-wrong.
    """
    groups: dict[str, list[dict[str, Any]]] = {}
    report = AuditReport(group_key)
    for record in records:
        groups.setdefault(_group_id(record[group_key]), []).append(record)
        report.samples += 1
        if not is_judged(record):
            report.unjudged[str(result_fields(record).get("status"))] += 1
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
        group = GroupAudit(key, len(members), reasons, reference_of(members[0]))
        group.sample = next(r for r in members if failure_reason(r) == group.dominant)
        if any(is_judged(r) for r in members):
            report.all_wrong.append(group)
        else:
            report.no_verdict.append(group)
    return report


def _stored_records(
    path: str, group_key: str, limit: int | None, messages: LineMessages
) -> Iterator[dict[str, Any]]:
    """Records that carry a verifier result; every other line is reported and skipped."""
    for record in iter_jsonl(path, limit=limit):
        if record.error is not None:
            messages.add(path, record.line_no, record.error)
        elif group_key not in record.data:
            messages.add(path, record.line_no, missing_key(record, group_key))
        elif not has_result(record.data):
            messages.add(
                path,
                record.line_no,
                "no verifier result (a 'veristep' key, or status/correct); pass --kind KIND to "
                "verify the rollouts",
            )
        else:
            yield record.data


def _verified_records(
    args: argparse.Namespace,
    verifier: Any,
    messages: LineMessages,
    references: dict[int, Any],
) -> Iterator[dict[str, Any]]:
    """Verify the input first (as `veristep verify` does) and yield the output rows."""
    backend = LocalBackend(verifier)
    items = read_items(args.input, verifier, completion_key=args.completion_key, limit=args.limit)
    total = count_lines(args.input) if not args.no_progress else None
    if args.limit is not None and total is not None:
        total = min(total, args.limit)
    bar = progress_bar(total, enabled=not args.no_progress, desc="verifying")
    try:
        for batch, results in backend.run(chunks(items, 256)):
            for item, result in zip(batch, results, strict=True):
                if result.status is Status.INPUT_ERROR:
                    messages.add(args.input, item.record.line_no, result.detail)
                    continue
                if args.group_key not in item.record.data:
                    messages.add(args.input, item.record.line_no, missing_key(item.record, args.group_key))
                    continue
                row = output_row(args.kind, item, result)
                if item.result is None:  # read by the verifier's own reference_from_record
                    references[id(row)] = item.reference
                yield row
            if bar is not None:
                bar.update(len(batch))
    finally:
        if bar is not None:
            bar.close()


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `audit` sub-command."""
    parser = subparsers.add_parser(
        "audit",
        help="explain the groups of rollouts in which every sample failed",
        description=(
            "Group rollouts by --group-key, find the groups in which every sample failed, and "
            "say why and where each failure points: the model (no answer, format, mismatch, "
            "program error), the checker (parse error, timeout, checker error: inspect these "
            "first), a deliberate rejection by design (numeric_close: a rounded answer to an "
            "exact reference) or the data (bad_reference, input_error: unjudged). "
            "INPUT lines carry verifier results (veristep verify output, or status/correct "
            "fields of another tool) or, with --kind, are verified first. "
            "Exit codes: 0 done; 1 some lines were skipped (each named on stderr); 2 bad usage."
        ),
    )
    parser.add_argument("input", metavar="INPUT.jsonl")
    parser.add_argument("--group-key", default="prompt_id", help="key shared by one prompt's samples")
    parser.add_argument("--kind", default=None, help="verify the rollouts with this verifier first")
    parser.add_argument(
        "--set",
        dest="config",
        action="append",
        metavar="KEY=VALUE",
        help="verifier option with --kind (as in veristep verify)",
    )
    parser.add_argument("--workers", type=int, default=None, help="verifier workers with --kind")
    parser.add_argument("--completion-key", default="completion", help="key holding the completion (with --kind)")
    parser.add_argument("--limit", type=int, default=None, help="read only the first N lines")
    add_output_option(
        parser, "JSONL of the failed samples to inspect (default: INPUT.audit.jsonl)",
        aliases=("--examples",),
    )
    parser.add_argument(
        "--max-examples", type=int, default=20, help="failed samples written per reason"
    )
    parser.add_argument(
        "--show-groups", type=int, default=10, help="all-wrong groups explained in the table"
    )
    add_progress_option(parser)
    parser.set_defaults(func=run_command)


def _default_examples_path(source: str) -> str:
    if source == STDIO:
        return "audit_examples.jsonl"
    path = Path(source)
    return str(path.with_name(path.name.removesuffix(".jsonl") + ".audit.jsonl"))


def run_command(args: argparse.Namespace) -> int:
    """Handle `veristep audit`; returns the exit code (usage errors raise UsageError)."""
    if args.max_examples < 0 or (args.limit is not None and args.limit < 0):
        raise UsageError("--max-examples and --limit must be >= 0")
    if args.workers is not None and args.workers < 1:
        raise UsageError("--workers must be >= 1")
    if (args.config or args.workers is not None) and not args.kind:
        raise UsageError("--set and --workers need --kind")
    examples_path = args.output or _default_examples_path(args.input)
    check_input(args.input)
    check_output(examples_path, inputs=[args.input])
    verifier = None
    if args.kind:
        cls, config = verifier_from_args(args.kind, args.config, args.workers)
        verifier = build(cls, config)
    messages = LineMessages(PROG)
    try:
        writer = JsonlWriter(examples_path)
    except OutputError:
        close_verifier(verifier)
        raise
    references: dict[int, Any] = {}
    try:
        if verifier is not None:
            records = _verified_records(args, verifier, messages, references)
            reference_of = lambda row: references.get(id(row), shown_reference(row))  # noqa: E731
        else:
            records = _stored_records(args.input, args.group_key, args.limit, messages)
            reference_of = shown_reference
        report = audit_records(records, args.group_key, reference_of)
    finally:
        close_verifier(verifier)
    messages.finish()
    print(report.table(args.input, args.show_groups))
    try:
        writer.write_many(report.examples(args.max_examples))
    except OutputError as err:
        messages.say(f"error: {err}")
        return EXIT_DATA
    finally:
        writer.close()
    print(f"wrote {writer.written} failed samples to inspect to {examples_path}")
    if messages.count:
        messages.say(f"error: {messages.count} line(s) skipped (named above); the rest is audited")
        return EXIT_DATA
    return EXIT_OK

"""Verify a JSONL file in streamed batches: read, verify, write, summarise (used by the CLI).

Every input line gives exactly one output line, in input order: the input object unchanged
plus one `veristep` key holding the result. A line that cannot be verified as given still gets
its line, with status `input_error` (unreadable line, no completion) or `bad_reference` (the
verifier's `reference_from_record` cannot read a reference from it); neither is a verdict.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from veristep.common.jsonl_io import (
    STDIO,
    JsonlWriter,
    LineMessages,
    OutputError,
    Record,
    display_name,
    encode_with,
    iter_jsonl,
    missing_key,
)

from ..core.result import Status, Verifier, VerifyResult
from ..core.text import record_completion

#: The one key an output line adds to its input line; an earlier result under it is replaced.
RESULT_KEY = "veristep"
#: Marks a result made because the verifier raised (a bug in it, never the model's fault).
RAISED_KEY = "verifier_raised"


@dataclass
class Item:
    """One input line: its record, completion text and reference, or the result it already has.

    `result` is set when the line cannot go to the verifier (input error, unreadable reference).
    """

    record: Record
    completion: str = ""
    reference: Any = None
    result: VerifyResult | None = None


def _unjudged(status: Status, detail: str) -> VerifyResult:
    return VerifyResult(0.0, False, status, detail=detail)


def make_item(record: Record, verifier: Verifier, completion_key: str = "completion") -> Item:
    """Turn one record into an item; the reference is read only by `reference_from_record`."""
    if record.error is not None:
        return Item(record, result=_unjudged(Status.INPUT_ERROR, record.error))
    if completion_key not in record.data:
        return Item(record, result=_unjudged(Status.INPUT_ERROR, missing_key(record, completion_key)))
    try:
        completion = record_completion(record.data, completion_key)  # "truncated" marks it
    except (TypeError, ValueError, RecursionError) as err:
        return Item(record, result=_unjudged(Status.INPUT_ERROR, f"key {completion_key!r}: {err}"))
    if not _is_unicode(completion):
        detail = f"key {completion_key!r}: not valid Unicode text (a lone surrogate escape)"
        return Item(record, result=_unjudged(Status.INPUT_ERROR, detail))
    try:
        reference = verifier.reference_from_record(record.data)
    except KeyError as err:
        key = str(err.args[0]) if err.args else "?"
        detail = f"no reference: {missing_key(record, key)}"
        return Item(record, completion, result=_unjudged(Status.BAD_REFERENCE, detail))
    except (TypeError, ValueError) as err:
        return Item(record, completion, result=_unjudged(Status.BAD_REFERENCE, str(err)[:300]))
    except Exception as err:  # noqa: BLE001 - a bug in the verifier's reader, reported per line
        detail = f"reference_from_record raised {type(err).__name__}: {err}"[:300]
        result = VerifyResult(0.0, False, Status.INTERNAL_ERROR, detail, extra={RAISED_KEY: True})
        return Item(record, completion, result=result)
    return Item(record, completion, reference)


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def read_items(
    path: str | Path,
    verifier: Verifier,
    *,
    completion_key: str = "completion",
    limit: int | None = None,
) -> Iterator[Item]:
    """Yield one item per non-blank input line, in order; bad lines included, as results."""
    for record in iter_jsonl(path, limit=limit):
        yield make_item(record, verifier, completion_key)


def safe_verify_batch(
    verifier: Verifier, completions: Sequence[str], references: Sequence[Any]
) -> list[VerifyResult]:
    """`verify_batch`, but an exception costs only the items that raise, never the batch.

    When the batch call raises (or returns the wrong number of results) each item is verified
    alone (`verify_one`).
    """
    if not completions:
        return []
    try:
        results = list(verifier.verify_batch(list(completions), list(references)))
        if len(results) == len(completions):
            return results
    except Exception:  # noqa: BLE001 - retried item by item below to find the culprit
        pass
    return [
        verify_one(verifier.verify_batch, completion, reference)
        for completion, reference in zip(completions, references, strict=True)
    ]


def verify_one(
    verify_batch: Callable[[list[str], list[Any]], Sequence[VerifyResult]], completion: str, reference: Any
) -> VerifyResult:
    """One item through `verify_batch`; an exception becomes that item's result.

    ValueError or TypeError means the verifier rejects the reference (verifiers raise those
    for bad configuration, never for model output): `bad_reference`. Any other exception is a
    bug in the verifier: `internal_error`, marked with `verifier_raised`.
    """
    try:
        (result,) = verify_batch([completion], [reference])
    except (ValueError, TypeError) as err:
        return _unjudged(Status.BAD_REFERENCE, f"the verifier rejected it: {err}"[:300])
    except Exception as err:  # noqa: BLE001 - a verifier bug, reported on its own line
        detail = f"the verifier raised {type(err).__name__}: {err}"[:300]
        return VerifyResult(0.0, False, Status.INTERNAL_ERROR, detail, extra={RAISED_KEY: True})
    return result


def pending(batch: Sequence[Item]) -> tuple[list[int], list[str], list[Any]]:
    """Positions, completions and references of the items that still need the verifier."""
    idx = [i for i, item in enumerate(batch) if item.result is None]
    return idx, [batch[i].completion for i in idx], [batch[i].reference for i in idx]


def merge(batch: Sequence[Item], idx: Sequence[int], results: Sequence[VerifyResult]) -> list[VerifyResult]:
    """Every item's result: the verifier's where it ran, the item's own elsewhere."""
    merged: list[VerifyResult | None] = [item.result for item in batch]
    for i, result in zip(idx, results, strict=True):
        merged[i] = result
    return merged  # type: ignore[return-value]


class Backend(Protocol):
    """Turns a stream of item batches into (batch, results) pairs in input order."""

    def run(self, batches: Iterable[list[Item]]) -> Iterator[tuple[list[Item], list[VerifyResult]]]:
        """Verify each batch; yield it with its results in the order the batches came."""
        ...

    def close(self) -> None:
        """Release workers."""
        ...


class LocalBackend:
    """Verify batches in this process with the verifier's own parallel `verify_batch`."""

    def __init__(self, verifier: Verifier) -> None:
        self.verifier = verifier

    def run(self, batches: Iterable[list[Item]]) -> Iterator[tuple[list[Item], list[VerifyResult]]]:
        """Verify batch after batch; items that already have a result are not sent."""
        for batch in batches:
            idx, completions, references = pending(batch)
            yield batch, merge(batch, idx, safe_verify_batch(self.verifier, completions, references))

    def close(self) -> None:
        """Shut the verifier's worker pool if it has one."""
        close_verifier(self.verifier)


def close_verifier(verifier: Any) -> None:
    """Call `verifier.close()` when it has one (worker pools, sandboxes); None is fine."""
    close = getattr(verifier, "close", None)
    if callable(close):
        close()


def chunks(items: Iterable[Item], size: int) -> Iterator[list[Item]]:
    """Group items into lists of `size` (the last one shorter)."""
    if size < 1:
        raise ValueError(f"batch size must be >= 1, got {size}")
    batch: list[Item] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def output_row(kind: str, item: Item, result: VerifyResult) -> dict[str, Any]:
    """An output line: the input object unchanged, plus the result under `veristep`.

    The result never overwrites an input field, so the output verifies again with the same
    result (an earlier `veristep` key is the only thing replaced).
    """
    row = {k: v for k, v in item.record.data.items() if k != RESULT_KEY}
    row[RESULT_KEY] = result_record(kind, item, result)
    return row


def result_record(kind: str, item: Item, result: VerifyResult) -> dict[str, Any]:
    """What an output line holds under `veristep`: the kind, then the result's fields."""
    fields = result.to_record()
    fields.pop(RAISED_KEY, None)
    record = {"kind": kind, **{k: v for k, v in fields.items() if k != "kind"}}
    if result.status is Status.INPUT_ERROR:
        record["line"] = item.record.line_no  # the only way to find an unreadable line again
    return record


def output_line(kind: str, item: Item, result: VerifyResult) -> bytes:
    """`output_row` as one JSONL line: the input line's own text where it can be kept."""
    record = item.record
    return encode_with(record.data, RESULT_KEY, result_record(kind, item, result), record.text)


def result_fields(row: dict[str, Any]) -> dict[str, Any]:
    """The result fields of an output line (a line written by other tools keeps them on top)."""
    nested = row.get(RESULT_KEY)
    return nested if isinstance(nested, dict) else row


@dataclass
class RunSummary:
    """What one run did: counts per status, rewards, notable lines, and a fatal output error."""

    kind: str
    status_counts: Counter = field(default_factory=Counter)
    judged: int = 0
    judged_reward_sum: float = 0.0
    raised: int = 0
    unjudged_counts: Counter = field(default_factory=Counter)
    first_line: dict[str, int] = field(default_factory=dict)
    elapsed_s: float = 0.0
    error: str | None = None

    @property
    def total(self) -> int:
        """Number of lines written."""
        return sum(self.status_counts.values())

    @property
    def unjudged(self) -> int:
        """Lines without a verdict (timeouts, bad references, input errors, checker errors)."""
        return self.total - self.judged

    @property
    def input_errors(self) -> int:
        """Lines that could not be read as an item."""
        return self.status_counts.get(Status.INPUT_ERROR.value, 0)

    @property
    def bad_references(self) -> int:
        """Lines whose reference the verifier cannot use."""
        return self.status_counts.get(Status.BAD_REFERENCE.value, 0)

    @property
    def mean_reward(self) -> float:
        """Mean reward over judged lines (an unjudged line is no verdict, not a zero)."""
        return self.judged_reward_sum / self.judged if self.judged else 0.0

    @property
    def items_per_s(self) -> float:
        """Throughput of the whole run, reading and writing included."""
        return self.total / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def failed(self) -> bool:
        """Whether the run must exit 1: unreadable lines, a raising verifier, or lost output."""
        return bool(self.error or self.input_errors or self.raised)

    def add(self, line_nos: Sequence[int], results: Sequence[VerifyResult]) -> None:
        """Count a batch of results (with the input line number of each)."""
        for line_no, result in zip(line_nos, results, strict=True):
            status = result.status.value
            self.status_counts[status] += 1
            self.first_line.setdefault(status, line_no)
            if result.judged:
                self.judged += 1
                self.judged_reward_sum += float(result.reward)
            else:
                self.unjudged_counts[status] += 1
            if result.extra.get(RAISED_KEY):
                self.raised += 1
                self.first_line.setdefault(RAISED_KEY, line_no)

    def table(self) -> str:
        """A plain-text summary: totals, judged vs unjudged, then one row per status."""
        parts = ", ".join(f"{s} {n}" for s, n in self.unjudged_counts.most_common())
        lines = [
            f"veristep verify {self.kind}: {self.total} items in {self.elapsed_s:.2f} s "
            f"({self.items_per_s:.1f} items/s)",
            f"  judged {self.judged}, mean reward {self.mean_reward:.4f} over judged items; "
            f"unjudged {self.unjudged}" + (f" ({parts})" if parts else ""),
            f"  {'status':<18}{'count':>8}{'share':>9}",
        ]
        for status, count in self.status_counts.most_common():
            lines.append(f"  {status:<18}{count:>8}{count / self.total:>9.1%}")
        return "\n".join(lines)


def count_lines(path: str | Path) -> int | None:
    """Count the lines of a file quickly for the progress bar (None for stdin or on error)."""
    if str(path) == STDIO:
        return None
    try:
        with open(path, "rb") as handle:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))
    except OSError:
        return None


class RunNotices:
    """The messages of one run: each unreadable line, and one warning per kind of trouble."""

    def __init__(self, path: str | Path, messages: LineMessages) -> None:
        self.path = path
        self.messages = messages
        self._warned: set[str] = set()

    def see(self, line_nos: Sequence[int], results: Sequence[VerifyResult]) -> None:
        """Report what this batch adds: input errors by line, first bad reference, first crash."""
        for line, result in zip(line_nos, results, strict=True):
            if result.status is Status.INPUT_ERROR:
                self.messages.add(self.path, line, result.detail)
            elif result.status is Status.BAD_REFERENCE and "bad_reference" not in self._warned:
                self._warned.add("bad_reference")
                self.messages.say(
                    f"warning: {display_name(self.path)}:{line}: unusable reference "
                    f"({result.detail or 'the verifier cannot read it'}); such lines are "
                    "unjudged (status bad_reference), not wrong; the summary counts them"
                )
            elif result.extra.get(RAISED_KEY) and "raised" not in self._warned:
                self._warned.add("raised")
                self.messages.say(
                    f"warning: {display_name(self.path)}:{line}: {result.detail}; such lines "
                    "are internal_error in the output"
                )


def run_verify(
    kind: str,
    items: Iterable[Item],
    backend: Backend,
    writer: JsonlWriter,
    *,
    batch_size: int = 256,
    progress: Any = None,
    notices: RunNotices | None = None,
) -> RunSummary:
    """Stream items through the backend into the writer; every line read gets a line written."""

    def verified() -> Iterator[tuple[list[bytes], list[int], list[VerifyResult]]]:
        for batch, results in backend.run(chunks(items, batch_size)):
            lines = [output_line(kind, i, r) for i, r in zip(batch, results, strict=True)]
            yield lines, [i.record.line_no for i in batch], results

    return write_batches(kind, verified(), writer, progress, notices)


def write_batches(
    kind: str,
    batches: Iterable[tuple[list[bytes], list[int], list[VerifyResult]]],
    writer: JsonlWriter,
    progress: Any = None,
    notices: RunNotices | None = None,
) -> RunSummary:
    """Write each verified batch (output lines, line numbers, results), count and report it.

    A failure stops the run with what was written kept: the summary says why.
    """
    summary = RunSummary(kind)
    start = time.perf_counter()
    try:
        for lines, line_nos, results in batches:
            writer.write_lines(lines)
            summary.add(line_nos, results)
            if notices is not None:
                notices.see(line_nos, results)
            if progress is not None:
                progress.update(len(lines))
    except OutputError as err:
        summary.error = str(err)
    except Exception as err:  # noqa: BLE001 - e.g. a Ray actor died: keep what was written
        summary.error = f"verification stopped: {type(err).__name__}: {err}"
    finally:
        writer.close()
        summary.elapsed_s = time.perf_counter() - start
    return summary

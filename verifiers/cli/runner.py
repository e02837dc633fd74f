"""Verify a JSONL file in streamed batches: read, verify, write, summarise (used by the CLI)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..core.result import Verifier, VerifyResult
from ..core.text import completion_text
from .jsonl_io import STDIO, InputError, JsonlWriter, OutputError, Record, iter_jsonl, require


@dataclass
class Item:
    """One input record ready to verify: its line, its fields, completion text and reference."""

    record: Record
    completion: str
    reference: Any


@dataclass
class RunSummary:
    """What one run did: counts per status, reward total, wall time, and the error that stopped it."""

    kind: str
    status_counts: Counter = field(default_factory=Counter)
    reward_sum: float = 0.0
    judged: int = 0
    elapsed_s: float = 0.0
    error: str | None = None

    @property
    def total(self) -> int:
        """Number of items verified and written."""
        return sum(self.status_counts.values())

    @property
    def mean_reward(self) -> float:
        """Mean reward over every written item (0.0 when there are none)."""
        return self.reward_sum / self.total if self.total else 0.0

    @property
    def items_per_s(self) -> float:
        """Throughput of the whole run, reading and writing included."""
        return self.total / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def add(self, results: Sequence[VerifyResult]) -> None:
        """Count a batch of results."""
        for result in results:
            self.status_counts[result.status.value] += 1
            self.reward_sum += float(result.reward)
            self.judged += bool(result.judged)

    def table(self) -> str:
        """A plain-text summary: header line, then one row per status, most frequent first."""
        lines = [
            f"veristep verify {self.kind}: {self.total} items in {self.elapsed_s:.2f} s "
            f"({self.items_per_s:.1f} items/s), mean reward {self.mean_reward:.4f}, "
            f"unjudged {self.total - self.judged}",
            f"  {'status':<18}{'count':>8}{'share':>9}",
        ]
        for status, count in self.status_counts.most_common():
            lines.append(f"  {status:<18}{count:>8}{count / self.total:>9.1%}")
        return "\n".join(lines)


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
        """Verify batch after batch with `verify_batch`."""
        for batch in batches:
            yield (
                batch,
                self.verifier.verify_batch(
                    [item.completion for item in batch], [item.reference for item in batch]
                ),
            )

    def close(self) -> None:
        """Shut the verifier's worker pool if it has one."""
        close = getattr(self.verifier, "close", None)
        if callable(close):
            close()


def read_items(
    path: str | Path,
    verifier: Verifier,
    *,
    completion_key: str = "completion",
    limit: int | None = None,
) -> Iterator[Item]:
    """Yield verifiable items from a JSONL file; raise InputError on a bad line or missing key."""
    for record in iter_jsonl(path, limit=limit):
        raw = require(record, completion_key, path)
        try:
            completion = completion_text(raw)
        except TypeError as err:
            raise InputError(path, record.line_no, f"key {completion_key!r}: {err}") from None
        try:
            reference = verifier.reference_from_record(record.data)
        except KeyError as err:
            key = err.args[0] if err.args else "?"
            keys = ", ".join(sorted(record.data)) or "none"
            raise InputError(
                path, record.line_no, f"missing key {key!r} for the reference (keys: {keys})"
            ) from None
        except (TypeError, ValueError) as err:
            raise InputError(path, record.line_no, f"bad reference: {err}") from None
        yield Item(record, completion, reference)


def batched(
    items: Iterator[Item], size: int, on_error: Callable[[InputError], None]
) -> Iterator[list[Item]]:
    """Group items into lists of `size`; on an InputError yield what was read, report, and stop."""
    batch: list[Item] = []
    try:
        for item in items:
            batch.append(item)
            if len(batch) >= size:
                yield batch
                batch = []
    except InputError as err:
        on_error(err)
    if batch:
        yield batch


#: Result fields a verifier sets on some items and not on others (`detail` only when there is
#: one, `numeric_close` only when true). An input line that was verified before loses its old
#: values, so a re-verified line never mixes a fresh status with a stale field.
PREVIOUS_RESULT_KEYS = frozenset(
    {"reward", "correct", "status", "extracted", "detail", "numeric_close"}
)


def output_row(item: Item, result: VerifyResult) -> dict[str, Any]:
    """An output line: the input keys (less earlier results), then the verifier's record fields."""
    kept = {k: v for k, v in item.record.data.items() if k not in PREVIOUS_RESULT_KEYS}
    return {**kept, **result.to_record()}


def count_lines(path: str | Path) -> int | None:
    """Count the lines of a file quickly for the progress bar (None for stdin or on error)."""
    if str(path) == STDIO:
        return None
    try:
        with open(path, "rb") as handle:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))
    except OSError:
        return None


def run_verify(
    kind: str,
    items: Iterator[Item],
    backend: Backend,
    writer: JsonlWriter,
    *,
    batch_size: int = 256,
    progress: Any = None,
) -> RunSummary:
    """Stream items through the backend into the writer; never lose a result already computed."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    summary = RunSummary(kind)
    start = time.perf_counter()

    def stop_reading(err: InputError) -> None:
        summary.error = str(err)

    try:
        for batch, results in backend.run(batched(items, batch_size, stop_reading)):
            if len(results) != len(batch):
                raise RuntimeError(
                    f"verifier returned {len(results)} results for {len(batch)} items"
                )
            writer.write_many([output_row(i, r) for i, r in zip(batch, results, strict=True)])
            summary.add(results)
            if progress is not None:
                progress.update(len(batch))
    except OutputError as err:
        summary.error = str(err)
    except Exception as err:  # a verifier bug: keep what was written, report one line
        summary.error = summary.error or f"verifier failed: {type(err).__name__}: {err}"
    finally:
        writer.close()
        summary.elapsed_s = time.perf_counter() - start
    return summary

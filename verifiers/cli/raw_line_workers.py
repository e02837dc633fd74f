"""Verify raw JSONL lines in worker processes: a worker parses, checks and encodes each line.

For a verifier whose whole check runs in the calling process (`checks_in_process`), handing
parsed items to workers leaves the CLI's own process with more work per line than a worker:
it would parse every line, serialise every reference, decode every result and encode every
output line, alone, while the workers wait. Here that process only reads bytes and writes
bytes; a worker turns a line into its output line with the functions the in-process path
uses (`parse_record`, `make_item`, `verify_one`, `output_line`), so the output is the same
byte for byte. Each line runs under the verifier's per-item time limit in the shared
`WorkerPool`: a line that hangs is killed with its worker and written with status `timeout`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from veristep.common.jsonl_io import JsonlWriter, parse_record

from ..core.batch import as_verify_result, chunk_size
from ..core.result import Status, Verifier, VerifyResult
from ..core.workers import ItemResult, Outcome, Submission, WorkerPool
from .runner import (
    RAISED_KEY,
    RunNotices,
    RunSummary,
    chunks,
    make_item,
    output_line,
    verify_one,
    write_batches,
)

#: Batches handed to the pool before the oldest is collected, so workers never wait for writing.
IN_FLIGHT = 3

#: What a worker returns for a line: its output line, then status, reward, judged, raised, detail.
Brief = tuple[bytes, str, float, bool, bool, str]


def line_pool_workers(verifier: Any) -> int:
    """Workers the line pool would use for `verifier`; 0 when it cannot (verify in process)."""
    if not getattr(verifier, "checks_in_process", False):
        return 0
    workers = getattr(verifier, "workers", 0)
    return workers if isinstance(workers, int) and workers > 0 else 0


class LineCheck:
    """What a worker runs on one (line number, raw bytes) item (picklable for spawn starts)."""

    def __init__(self, kind: str, verifier: Verifier, completion_key: str) -> None:
        self.kind, self.verifier, self.completion_key = kind, verifier, completion_key

    def __call__(self, _shared: Any, item: tuple[int, bytes]) -> Brief:
        """The line's output line and the fields the summary needs."""
        line_no, raw = item
        entry = make_item(parse_record(line_no, raw), self.verifier, self.completion_key)
        result = entry.result
        if result is None:
            result = verify_one(self._verify_here, entry.completion, entry.reference)
        return (output_line(self.kind, entry, result), result.status.value, float(result.reward),
                bool(result.judged), bool(result.extra.get(RAISED_KEY)), result.detail)

    def _verify_here(self, completions: list[str], references: list[Any]) -> list[VerifyResult]:
        return [self.verifier.verify(c, r) for c, r in zip(completions, references, strict=True)]


def _no_preparation(shared: Any) -> Any:
    return shared


def run_lines(
    kind: str,
    lines: Iterable[tuple[int, bytes]],
    verifier: Verifier,
    writer: JsonlWriter,
    *,
    workers: int,
    timeout: float,
    completion_key: str = "completion",
    batch_size: int = 256,
    progress: Any = None,
    notices: RunNotices | None = None,
) -> RunSummary:
    """`run_verify` for raw lines, each line verified whole in one of `workers` processes."""
    check = LineCheck(kind, verifier, completion_key)
    pools: list[WorkerPool] = []

    def pool() -> WorkerPool:
        # a pool that stopped answering in its worst-case time closes itself: the rest of the
        # run goes to a new one, as the verifiers' own BatchRunner does
        if not pools or not pools[-1].usable:
            pools.append(WorkerPool(_no_preparation, check, workers, memory_limit_mb=None))
        return pools[-1]

    def verified() -> Iterator[tuple[list[bytes], list[int], list[VerifyResult]]]:
        queued: deque[tuple[list[tuple[int, bytes]], WorkerPool, Submission]] = deque()
        for batch in chunks(lines, batch_size):
            size = chunk_size(len(batch), workers)
            parts = [(None, batch[lo : lo + size]) for lo in range(0, len(batch), size)]
            current = pool()
            queued.append((batch, current, current.submit(parts, timeout)))
            if len(queued) >= IN_FLIGHT:
                yield _collect(check, *queued.popleft())
        while queued:
            yield _collect(check, *queued.popleft())

    try:
        return write_batches(kind, verified(), writer, progress, notices)
    finally:
        for each in pools:
            each.close()


def _collect(
    check: LineCheck, batch: list[tuple[int, bytes]], pool: WorkerPool, submission: Submission
) -> tuple[list[bytes], list[int], list[VerifyResult]]:
    """A submitted batch's output lines, line numbers and (summary-only) results."""
    done = [r for part in pool.wait(submission) for r in part]
    out_lines, results = [], []
    for (line_no, raw), item_result in zip(batch, done, strict=True):
        if item_result.outcome is Outcome.OK:
            line, status, reward, judged, raised, detail = item_result.value
            result = VerifyResult(reward, False, Status(status), detail, judged=judged,
                                  extra={RAISED_KEY: True} if raised else {})
        else:
            line, result = _without_worker(check, line_no, raw, item_result)
        out_lines.append(line)
        results.append(result)
    return out_lines, [n for n, _ in batch], results


def _without_worker(
    check: LineCheck, line_no: int, raw: bytes, item_result: ItemResult
) -> tuple[bytes, VerifyResult]:
    """A line whose worker timed out or died: its own input error if it has one, else the pool's."""
    entry = make_item(parse_record(line_no, raw), check.verifier, check.completion_key)
    result = entry.result if entry.result is not None else as_verify_result(item_result)
    return output_line(check.kind, entry, result), result


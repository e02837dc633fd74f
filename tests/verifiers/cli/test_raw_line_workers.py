"""The line pool (`veristep verify` for verifiers that check in process): the same output as the
in-process path, byte for byte; every line judged under the time limit; N worker processes."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from veristep.common.jsonl_io import (
    JsonlWriter,
    encode_line,
    encode_with,
    iter_jsonl,
    iter_lines,
)
from veristep.verifiers import Status, VerifyResult
from veristep.verifiers.cli.raw_line_workers import line_pool_workers, run_lines
from veristep.verifiers.cli.runner import LocalBackend, read_items, run_verify
from veristep.verifiers.tools import ToolCallVerifier

TOOLS = [{"name": "add", "parameters": {"type": "object", "properties": {
    "a": {"type": "integer"}, "b": {"type": "integer"}, "unit": {"type": "string", "enum": ["m", "km"]}},
    "required": ["a", "b"]}}]


def _hermes(name: str, **arguments: object) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


def _mixed_lines() -> list[str]:
    """Lines of every kind the runner distinguishes, as a user's file may hold them."""
    expected = [{"name": "add", "arguments": {"a": 1, "b": 2}}]
    good = {"tools": TOOLS, "expected": expected}
    rows = [
        {"id": 1, "completion": _hermes("add", a=1, b=2), **good},
        {"id": 2, "completion": _hermes("add", a=1, b=3), **good},
        {"id": 3, "completion": "[add(a=1, b=2)]", **good, "format": "pythonic"},
        {"id": 4, "completion": _hermes("add", a=1, b="x"), **good},  # schema violation
        {"id": 5, "completion": _hermes("sub", a=1), **good},  # unknown function
        {"id": 6, "completion": "no call", **good},
        {"id": 7, "completion": _hermes("add", a=1, b=2), "tools": TOOLS,
         "expected": [{"name": "add", "arguments": {"a": 1, "b": 2, "unit": "mile"}}]},  # bad ref
        {"id": 8, "completion": _hermes("add", a=1, b=2)},  # no reference at all
        {"id": 9, "answer": 1},  # no completion
        {"id": 10, "completion": _hermes("add", a=1, b=2), **good, "veristep": {"old": True}},
        {"id": 11, "completion": [{"role": "assistant", "content": _hermes("add", a=1, b=2)}], **good},
    ]
    lines = [json.dumps(r) for r in rows]
    lines += [
        '{"id": 12, "completion": "caf\\u00e9 \\ud800", "expected": []}',  # lone surrogate
        '{"id": 13, "completion": "x", "expected": [], "score": NaN}',  # not strict JSON
        '  {"id":14,"completion":"","expected":[]}  \r',  # odd spacing, CRLF
        "",  # blank: no output line
        "[1, 2]",  # not an object
        '{"id": 16, "completion": ',  # broken JSON
        "{}",
        json.dumps({"id": 18, "completion": _hermes("add", a=1, b=2), **good}, ensure_ascii=False,
                   separators=(",", ":")) + "\t",
    ]
    return lines


def _write(path: Path, lines: list[str]) -> Path:
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8") + b"\xff\xfe not utf-8\n")
    return path


def _in_process(src: Path, out: Path, verifier: ToolCallVerifier) -> None:
    items = read_items(src, verifier)
    run_verify("tools", items, LocalBackend(verifier), JsonlWriter(out), batch_size=4)


def test_line_pool_writes_the_in_process_output_byte_for_byte(tmp_path):
    src = _write(tmp_path / "in.jsonl", _mixed_lines())
    here, pooled = tmp_path / "here.jsonl", tmp_path / "pool.jsonl"
    _in_process(src, here, ToolCallVerifier(workers=0))
    verifier = ToolCallVerifier(workers=2)
    summary = run_lines("tools", iter_lines(src), verifier, JsonlWriter(pooled), workers=2,
                        timeout=10.0, batch_size=4)
    assert pooled.read_bytes() == here.read_bytes()
    rows = [json.loads(line) for line in pooled.read_text(encoding="utf-8").splitlines()]
    statuses = [r["veristep"]["status"] for r in rows]
    assert statuses == [
        "correct", "wrong_arguments", "correct", "schema_violation", "unknown_function", "no_call",
        "bad_reference", "bad_reference", "input_error", "correct", "correct", "input_error",
        "correct", "correct", "input_error", "input_error", "input_error", "correct", "input_error",
    ]
    assert summary.total == len(rows) == 19 and summary.input_errors == 6
    assert rows[9]["veristep"]["status"] == "correct" and "old" not in rows[9]["veristep"]
    assert rows[12]["score"] is None  # NaN is written as null, as every other path does


def test_kept_text_and_reencoded_lines_hold_the_same_object():
    data = {"b": [1, 2.5, {"c": "é"}], "a": None}
    value = {"status": "correct", "reward": 1.0}
    for text in (json.dumps(data), json.dumps(data, ensure_ascii=False, indent=None, separators=(",", ":")),
                 "  " + json.dumps(data) + " \t"):
        line = encode_with(data, "veristep", value, text)
        assert json.loads(line) == {**data, "veristep": value}
        assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert encode_with({}, "k", 1, "{ }") == b'{ "k": 1}\n'
    # no text, an earlier key, a lone surrogate in the value: the general encoder
    assert encode_with(data, "veristep", value) == encode_line({**data, "veristep": value})
    old = {**data, "veristep": 0}
    assert json.loads(encode_with(old, "veristep", value, json.dumps(old)))["veristep"] == value
    odd = encode_with(data, "veristep", {"x": "\ud800"}, json.dumps(data))
    assert json.loads(odd)["veristep"] == {"x": "\ud800"}


def test_iter_lines_reads_what_iter_jsonl_reads(tmp_path):
    src = _write(tmp_path / "in.jsonl", _mixed_lines() + ["\x1c \u3000", "  "])
    records = list(iter_jsonl(src))
    assert [n for n, _ in iter_lines(src)] == [r.line_no for r in records]
    assert [n for n, _ in iter_lines(src, limit=3)] == [r.line_no for r in records[:3]]


class _Sleepy(ToolCallVerifier):
    """Hangs on the completion "hang"; reports the worker's pid in the detail otherwise."""

    def verify(self, completion: str, reference: object) -> VerifyResult:
        if completion == "hang":
            time.sleep(3600)
        time.sleep(0.01)  # long enough that both workers get chunks
        return VerifyResult(1.0, True, Status.CORRECT, detail=str(os.getpid()))


def test_a_hung_line_times_out_alone_and_the_work_uses_every_worker(tmp_path):
    rows = [{"completion": "hang" if i == 5 else f"c{i}", "expected": []} for i in range(64)]
    src = _write(tmp_path / "in.jsonl", [json.dumps(r) for r in rows])
    out = tmp_path / "out.jsonl"
    verifier = _Sleepy(workers=2, timeout=1.0)
    assert line_pool_workers(verifier) == 2
    start = time.perf_counter()
    summary = run_lines("tools", iter_lines(src), verifier, JsonlWriter(out), workers=2, timeout=1.0,
                        batch_size=16)
    assert time.perf_counter() - start < 60
    results = [json.loads(line)["veristep"] for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["status"] for r in results[:64]] == ["correct"] * 5 + ["timeout"] + ["correct"] * 58
    pids = {r["detail"] for r in results[:64] if r["status"] == "correct"}
    assert len(pids) >= 2 and str(os.getpid()) not in pids
    assert summary.status_counts["timeout"] == 1 and summary.input_errors == 1  # the \xff line


def test_only_in_process_verifiers_with_workers_use_the_line_pool():
    assert line_pool_workers(ToolCallVerifier(workers=0)) == 0
    assert line_pool_workers(ToolCallVerifier(workers=3)) == 3
    assert line_pool_workers(object()) == 0


def test_a_pool_that_goes_away_mid_run_is_replaced_and_no_line_is_lost(tmp_path, monkeypatch):
    from veristep.verifiers.core.workers import WorkerPool

    rows = [{"completion": _hermes("add", a=1, b=2), "tools": TOOLS,
             "expected": [{"name": "add", "arguments": {"a": 1, "b": 2}}]} for _ in range(40)]
    src = _write(tmp_path / "in.jsonl", [json.dumps(r) for r in rows])
    out = tmp_path / "out.jsonl"
    wait, waited = WorkerPool.wait, []

    def wait_then_close(self, submission):
        results = wait(self, submission)
        if not waited:  # the first pool stops after its first batch (as a stuck pool closes itself)
            waited.append(True)
            self.close()
        return results

    monkeypatch.setattr(WorkerPool, "wait", wait_then_close)
    summary = run_lines("tools", iter_lines(src), ToolCallVerifier(workers=2), JsonlWriter(out),
                        workers=2, timeout=10.0, batch_size=4)
    statuses = [json.loads(line)["veristep"]["status"] for line in out.read_text(encoding="utf-8").splitlines()]
    assert summary.error is None and len(statuses) == 41  # 40 lines + the \xff line
    assert statuses[:4] == ["correct"] * 4 and statuses[-5:-1] == ["correct"] * 4  # a new pool
    assert set(statuses[4:12]) <= {"correct", "internal_error"}  # in flight when it stopped


def test_format_verifier_lines_through_the_pool_match_in_process(tmp_path):
    from veristep.verifiers.format import FormatVerifier

    lines = [json.dumps({"completion": c}) for c in
             ("<think>a</think><answer>1</answer>", "no tags", "<think>b</think>tail", "")]
    src = _write(tmp_path / "in.jsonl", lines + ['{"no_completion": 1}', "{bad"])
    here, pooled = tmp_path / "here.jsonl", tmp_path / "pool.jsonl"
    items = read_items(src, FormatVerifier(workers=0))
    run_verify("format", items, LocalBackend(FormatVerifier(workers=0)), JsonlWriter(here), batch_size=4)
    summary = run_lines("format", iter_lines(src), FormatVerifier(workers=2), JsonlWriter(pooled),
                        workers=2, timeout=10.0, batch_size=4)
    assert pooled.read_bytes() == here.read_bytes()
    statuses = [json.loads(line)["veristep"]["status"] for line in pooled.read_text(encoding="utf-8").splitlines()]
    assert statuses[:4] == ["correct", "format_error", "format_error", "format_error"]
    assert summary.total == 7 and summary.input_errors == 3

"""`veristep audit`: all-wrong groups explained on the shipped sample, reasons and where they
point (model, checker, deliberate rejection, data), unjudged samples, the error contract."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from veristep.verifiers import Status
from veristep.verifiers.cli.audit import (
    BLAME,
    CHECKER_SUSPECTS,
    Blame,
    FailureReason,
    audit_records,
    failure_reason,
    is_correct,
    is_judged,
)

from veristep.cli import main


@pytest.fixture
def sample(test_data_dir):
    return test_data_dir / "audit_sample.jsonl"


def _read(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_shipped_sample_explains_its_all_wrong_groups(sample, tmp_path, capsys):
    examples = tmp_path / "examples.jsonl"
    assert main(["audit", str(sample), "--group-key", "prompt_id", "-o", str(examples)]) == 0
    out = capsys.readouterr().out
    assert "groups: 6" in out and "all-wrong: 4 (66.7%)" in out and "all-correct: 1" in out
    assert (
        "group p1 (4 samples): numeric_close x3, mismatch x1; "
        "e.g. extracted '4.667' vs reference '\\frac{14}{3}'"
    ) in out
    assert "group p3 (4 samples): no_answer x4; e.g. extracted nothing vs reference '27'" in out
    assert "group p5 (4 samples): mismatch x4" in out
    assert "group p2" not in out and "group p4" not in out  # mixed and all-correct groups
    rows = _read(examples)
    assert len(rows) == 16 and {r["veristep_audit"]["group"] for r in rows} == {"p1", "p3", "p5", "p6"}
    # Checker suspects come first in the file; each row keeps the rollout's own keys as they were.
    assert rows[0]["veristep_audit"] == {"group": "p6", "reason": "parse_error", "points_at": "checker"}
    originals = {json.dumps(r, sort_keys=True) for r in _read(sample)}
    for row in rows:
        plain = {k: v for k, v in row.items() if k != "veristep_audit"}
        assert json.dumps(plain, sort_keys=True) in originals


def test_deliberate_rejections_are_not_blamed_on_the_checker(sample, tmp_path, capsys):
    # 14/3 answered as 4.667 is rejected on purpose (the verifier never rounds): "by design".
    assert main(["audit", str(sample), "-o", str(tmp_path / "e.jsonl")]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.strip().startswith("numeric_close"))
    assert row.split()[1:4] == ["4", "25.0%", "1"] and "by design" in row
    assert "rejected on purpose, the verifier never rounds" in row
    # Only p6's three parse errors point at the checker now; the tolerance cases do not.
    assert ("verdict: 3 of 16 failed samples (19%) point at the checker (parse error, timeout, "
            "checker error), dominating 1 of 4 groups: inspect those first") in out
    assert ("4 of 16 (25%) are deliberate rejections by design (numeric_close: a rounded answer "
            "to an exact reference), not checker failures") in out
    assert FailureReason.NUMERIC_CLOSE not in CHECKER_SUSPECTS


def test_max_examples_caps_each_reason(sample, tmp_path):
    examples = tmp_path / "e.jsonl"
    assert main(["audit", str(sample), "--examples", str(examples), "--max-examples", "1"]) == 0
    reasons = Counter(r["veristep_audit"]["reason"] for r in _read(examples))
    assert set(reasons.values()) == {1} and len(reasons) == 4


def test_default_examples_path_is_next_to_input(sample, tmp_path, capsys):
    copy = tmp_path / "rollouts.jsonl"
    copy.write_bytes(sample.read_bytes())
    assert main(["audit", str(copy)]) == 0
    assert (tmp_path / "rollouts.audit.jsonl").exists()
    assert "rollouts.audit.jsonl" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        ({"status": "no_answer"}, FailureReason.NO_ANSWER),
        ({"status": "no_code"}, FailureReason.NO_ANSWER),
        ({"status": "no_call"}, FailureReason.NO_ANSWER),
        ({"status": "format_error"}, FailureReason.FORMAT),
        ({"status": "parse_error"}, FailureReason.PARSE_ERROR),
        ({"status": "timeout"}, FailureReason.TIMEOUT),
        ({"status": "wrong", "numeric_close": True}, FailureReason.NUMERIC_CLOSE),
        ({"status": "wrong", "numeric_close": False}, FailureReason.MISMATCH),
        ({"status": "wrong"}, FailureReason.MISMATCH),
        ({"status": "wrong_arguments"}, FailureReason.MISMATCH),
        ({"status": "runtime_error"}, FailureReason.PROGRAM_ERROR),
        ({"status": "process_limit"}, FailureReason.PROGRAM_ERROR),
        ({"status": "sandbox_error"}, FailureReason.CHECKER_ERROR),
        ({"status": "internal_error"}, FailureReason.CHECKER_ERROR),
        ({"status": "bad_reference"}, FailureReason.BAD_REFERENCE),
        ({"status": "input_error"}, FailureReason.BAD_INPUT),
        ({"veristep": {"status": "wrong", "numeric_close": True}}, FailureReason.NUMERIC_CLOSE),
        ({"status": "gremlins"}, FailureReason.UNKNOWN),
        ({}, FailureReason.UNKNOWN),
    ],
)
def test_failure_reasons(record, reason):
    assert failure_reason(record) == reason


def test_every_failing_status_has_a_known_reason_and_a_blame():
    for status in Status:
        if status != Status.CORRECT:
            assert failure_reason({"status": status.value}) != FailureReason.UNKNOWN, status
    assert set(BLAME) == set(FailureReason)
    assert BLAME[FailureReason.BAD_REFERENCE] is Blame.DATA
    assert BLAME[FailureReason.MISMATCH] is Blame.MODEL


def test_correctness_judgement_and_dominant_reason_tie_break():
    assert is_correct({"correct": True, "status": "wrong"})
    assert is_correct({"status": "correct"}) and not is_correct({"status": "wrong"})
    assert is_correct({"status": "wrong", "veristep": {"correct": True}})  # ours wins
    assert not is_judged({"status": "bad_reference"}) and is_judged({"status": "wrong"})
    assert is_judged({"veristep": {"status": "timeout", "judged": True}})  # a program's timeout
    records = [
        {"g": [1, 2], "status": "wrong"},
        {"g": [1, 2], "status": "timeout"},
        {"g": "b", "status": "correct", "correct": True},
        {"g": "b", "status": "wrong"},
    ]
    report = audit_records(records, "g")
    assert report.groups == 2 and len(report.all_wrong) == 1
    (group,) = report.all_wrong
    assert group.key == "[1, 2]"  # unhashable keys are grouped by their JSON
    assert group.dominant == FailureReason.TIMEOUT  # ties go to the checker suspect


def test_kind_verifies_rollouts_first(tmp_path, capsys):
    rows = [
        {"prompt_id": "a", "completion": "Answer: 3.14", "answer": "3.1416"},
        {"prompt_id": "a", "completion": "Answer: 3.142", "answer": "3.1416"},
        {"prompt_id": "b", "completion": "Answer: 2", "answer": "2"},
        {"prompt_id": "b", "completion": "hmm", "answer": "2"},
    ]
    src = _write(tmp_path / "r.jsonl", rows)
    examples = tmp_path / "e.jsonl"
    assert main(["audit", str(src), "--kind", "exact", "-o", str(examples)]) == 0
    out = capsys.readouterr().out
    assert "all-wrong: 1 (50.0%)" in out and "group a (2 samples): numeric_close x2" in out
    assert [r["veristep"]["extracted"] for r in _read(examples)] == ["3.14", "3.142"]


def test_unusable_references_are_unjudged_not_all_wrong(tmp_path, capsys):
    # verify, then audit the output: the group whose references are unusable has no verdict.
    rows = [
        {"prompt_id": "a", "completion": "Answer: 1"},
        {"prompt_id": "a", "completion": "Answer: 2"},
        {"prompt_id": "b", "completion": "Answer: 5", "answer": "4"},
        {"prompt_id": "b", "completion": "nothing", "answer": "4"},
        {"prompt_id": "c", "completion": "Answer: 4", "answer": "4"},
    ]
    src, verified = _write(tmp_path / "r.jsonl", rows), tmp_path / "v.jsonl"
    assert main(["verify", "exact", str(src), "-o", str(verified)]) == 0
    capsys.readouterr()
    assert main(["audit", str(verified), "-o", str(tmp_path / "e.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "all-wrong: 1 (33.3%)" in out and "no verdict: 1" in out
    assert "unjudged samples: 2 (bad_reference 2)" in out
    assert "group a (2 samples): bad_reference x2" in out
    assert "2 of 4 (50%) point at the data" in out


def test_bad_lines_are_named_skipped_and_the_rest_audited(sample, tmp_path, capsys):
    lines = sample.read_text().splitlines()
    broken = _write(tmp_path / "b.jsonl", [
        *lines[:4], "{oops", json.dumps({"prompt_id": "z", "completion": "x"}),
        json.dumps({"status": "wrong"}), *lines[4:],
    ])
    assert main(["audit", str(broken), "-o", str(tmp_path / "e.jsonl")]) == 1
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if "warning:" in line]
    assert len(warnings) == 3
    assert f"{broken}:5: bad JSON" in warnings[0]
    assert f"{broken}:6: no verifier result" in warnings[1] and "--kind" in warnings[1]
    assert f"{broken}:7: missing key 'prompt_id'" in warnings[2]
    assert "groups: 6  samples: 24" in captured.out  # every good line was audited
    assert "error: 3 line(s) skipped" in captured.err and "Traceback" not in captured.err


def test_usage_errors_come_before_any_work(sample, tmp_path, capsys):
    assert main(["audit", str(tmp_path / "none.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["audit", str(sample), "--kind", "math", "-o", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    assert main(["audit", str(sample), "--set", "timeout=1"]) == 2
    assert "--set and --workers need --kind" in capsys.readouterr().err
    assert main(["audit", str(sample), "--kind", "math", "--set", "timeout=abc",
                 "-o", str(tmp_path / "e.jsonl")]) == 2
    assert "--set timeout: expects a number, got 'abc'" in capsys.readouterr().err
    assert not (tmp_path / "e.jsonl").exists()


def test_no_all_wrong_groups(tmp_path, capsys):
    src = _write(tmp_path / "r.jsonl", [{"prompt_id": "a", "status": "correct", "correct": True}])
    examples = tmp_path / "e.jsonl"
    assert main(["audit", str(src), "-o", str(examples)]) == 0
    assert "nothing to explain" in capsys.readouterr().out
    assert examples.read_text() == ""


def test_math_verifier_agrees_with_the_shipped_results(sample, tmp_path, capsys):
    # The shipped results are the math verifier's: re-verifying gives the same audit.
    examples = tmp_path / "e.jsonl"
    assert main(["audit", str(sample), "-o", str(examples)]) == 0
    stored = capsys.readouterr().out.splitlines()[:-1]  # all but the "wrote ..." line
    code = main(["audit", str(sample), "--kind", "math", "--workers", "1", "-o", str(examples)])
    assert code == 0
    assert capsys.readouterr().out.splitlines()[:-1] == stored
    assert "  group p1 (4 samples): numeric_close x3, mismatch x1" in "\n".join(stored)

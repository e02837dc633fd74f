"""`veristep audit`: all-wrong groups explained on the shipped sample, reasons, errors."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from veristep.verifiers import Status
from veristep.verifiers.cli.audit import (
    CHECKER_SUSPECTS,
    FailureReason,
    audit_records,
    failure_reason,
    is_correct,
)

from veristep.cli import main


@pytest.fixture
def sample(test_data_dir):
    return test_data_dir / "audit_sample.jsonl"


def _read(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_shipped_sample_explains_its_all_wrong_groups(sample, tmp_path, capsys):
    examples = tmp_path / "examples.jsonl"
    assert (
        main(["audit", str(sample), "--group-key", "prompt_id", "--examples", str(examples)]) == 0
    )
    out = capsys.readouterr().out
    assert "groups: 6" in out and "all-wrong: 4 (66.7%)" in out and "all-correct: 1" in out
    # p1: right answer in decimals judged unequal -> the checker's tolerance is suspect.
    assert (
        "group p1 (4 samples): numeric_close x3, mismatch x1; "
        "e.g. extracted '4.667' vs reference '\\frac{14}{3}'"
    ) in out
    assert "possible tolerance problem" in out
    assert "group p3 (4 samples): no_answer x4; e.g. extracted nothing vs reference '27'" in out
    assert "group p5 (4 samples): mismatch x4" in out
    assert "group p2" not in out and "group p4" not in out  # mixed and all-correct groups
    assert "7 of 16 failed samples (44%) point at the checker" in out
    rows = _read(examples)
    assert len(rows) == 16 and {r["group"] for r in rows} == {"p1", "p3", "p5", "p6"}
    # Checker suspects come first in the file, each row keeps the rollout's own keys.
    blame = [r["points_at"] for r in rows]
    assert blame == sorted(blame)  # "checker" < "model"
    assert rows[0]["reason"] == "numeric_close" and rows[0]["completion"].endswith("$.")


def test_max_examples_caps_each_reason(sample, tmp_path):
    examples = tmp_path / "e.jsonl"
    assert main(["audit", str(sample), "--examples", str(examples), "--max-examples", "1"]) == 0
    reasons = Counter(r["reason"] for r in _read(examples))
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
        ({"status": "sandbox_error"}, FailureReason.CHECKER_ERROR),
        ({"status": "internal_error"}, FailureReason.CHECKER_ERROR),
        ({"status": "gremlins"}, FailureReason.UNKNOWN),
        ({}, FailureReason.UNKNOWN),
    ],
)
def test_failure_reasons(record, reason):
    assert failure_reason(record) == reason


def test_every_failing_status_has_a_known_reason():
    for status in Status:
        if status != Status.CORRECT:
            assert failure_reason({"status": status.value}) != FailureReason.UNKNOWN, status
    assert FailureReason.NUMERIC_CLOSE in CHECKER_SUSPECTS
    assert FailureReason.MISMATCH not in CHECKER_SUSPECTS


def test_correctness_and_dominant_reason_tie_break():
    assert is_correct({"correct": True, "status": "wrong"})
    assert is_correct({"status": "correct"}) and not is_correct({"status": "wrong"})
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
    src = tmp_path / "r.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    examples = tmp_path / "e.jsonl"
    assert main(["audit", str(src), "--kind", "exact", "--examples", str(examples)]) == 0
    out = capsys.readouterr().out
    assert "all-wrong: 1 (50.0%)" in out and "group a (2 samples): numeric_close x2" in out
    assert [r["extracted"] for r in _read(examples)] == ["3.14", "3.142"]


def test_rollouts_without_results_need_kind(tmp_path, capsys):
    src = tmp_path / "r.jsonl"
    src.write_text(json.dumps({"prompt_id": "a", "completion": "x", "answer": "1"}) + "\n")
    assert main(["audit", str(src)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and ":1: no verifier result" in err and "--kind" in err


def test_missing_group_key_and_bad_json_are_one_line_errors(sample, tmp_path, capsys):
    assert main(["audit", str(sample), "--group-key", "question_id"]) == 1
    err = capsys.readouterr().err.strip()
    assert ":1: missing key 'question_id'" in err and err.count("\n") == 0
    broken = tmp_path / "b.jsonl"
    broken.write_text(sample.read_text().splitlines()[0] + "\n{oops\n")
    assert main(["audit", str(broken)]) == 1
    assert ":2: bad JSON" in capsys.readouterr().err


def test_no_all_wrong_groups(tmp_path, capsys):
    src = tmp_path / "r.jsonl"
    src.write_text(json.dumps({"prompt_id": "a", "status": "correct", "correct": True}) + "\n")
    examples = tmp_path / "e.jsonl"
    assert main(["audit", str(src), "--examples", str(examples)]) == 0
    assert "nothing to explain" in capsys.readouterr().out
    assert examples.read_text() == ""


def test_math_verifier_agrees_with_the_shipped_results(sample, tmp_path, capsys):
    # The shipped results are the math verifier's: re-verifying gives the same audit.
    examples = tmp_path / "e.jsonl"
    assert main(["audit", str(sample), "--examples", str(examples)]) == 0
    stored = capsys.readouterr().out.splitlines()[:-1]  # all but the "wrote ..." line
    code = main(
        ["audit", str(sample), "--kind", "math", "--workers", "1", "--examples", str(examples)]
    )
    assert code == 0
    assert capsys.readouterr().out.splitlines()[:-1] == stored
    assert "  group p1 (4 samples): numeric_close x3, mismatch x1" in "\n".join(stored)

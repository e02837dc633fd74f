"""Calibration against exact step labels of the built-in task: `prm traces` and `prm calibrate`."""

from __future__ import annotations

import json

import pytest
import torch
from veristep.prm.builtin_traces import exact_record
from veristep.prm.calibrate import load_jsonl
from veristep.train.demo import task

from veristep.cli import main

torch.set_num_threads(1)


def test_exact_record_labels_the_first_error_like_processbench():
    problem = task.make_problems(1, seed=2, level="medium")[0]
    lines = problem["solution"].split("\n")
    right = exact_record(problem["prompt"], problem["solution"], problem["answer"], "a")
    assert right["label"] == -1 and right["correct"] and right["step_labels"] == [1] * len(lines)
    # Step 2 miscomputes; step 3 computes right from the wrong value: exact label None after
    # the first error, local label 1.
    a, rest = lines[1].split("=")
    wrong_value = int(rest) + 1
    lines[1] = f"{a}={wrong_value}"
    s3_op = lines[2].split(": ", 1)[1]
    op = next(ch for ch in s3_op[1:] if ch in "+-*")
    operand = int(s3_op.split(op, 1)[1].split("=")[0])
    lines[2] = f"Step 3: {wrong_value}{op}{operand}={task.apply_op(wrong_value, op, operand)}"
    lines[3] = f"Answer: {task.apply_op(wrong_value, op, operand)}"
    rec = exact_record(problem["prompt"], "\n".join(lines), problem["answer"], "b")
    assert rec["label"] == 1 and not rec["correct"]
    assert rec["step_labels"] == [1, 0, None, None]
    assert rec["local_step_labels"] == [1, 0, 1, 0]


@pytest.fixture
def labelled_file(tmp_path):
    problems = task.make_problems(40, seed=5, level="medium")
    demos = task.make_noisy_demonstrations(problems, seed=5, step_error_rate=0.25, answer_error_rate=0.2)
    rows = [exact_record(d.prompt, d.completion, d.answer, f"t{i}") for i, d in enumerate(demos)]
    path = tmp_path / "held_out.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path, rows


def test_calibrate_reads_exact_step_labels(labelled_file):
    path, rows = labelled_file
    traces = load_jsonl(path)
    assert [t.step_labels for t in traces] == [r["step_labels"] for r in rows]
    assert traces[0].answer == rows[0]["answer"]


def test_calibrate_oracle_is_perfect_and_mc_reports_its_rollouts(labelled_file, tiny_model_dir, tmp_path, capsys):
    path, rows = labelled_file
    report = tmp_path / "oracle.json"
    assert main(["prm", "calibrate", "--data", str(path), "--scorer", "oracle", "--bootstrap", "50",
                 "-o", str(report)]) == 0
    capsys.readouterr()
    overall = json.loads(report.read_text())["subsets"]["held_out/overall"]
    assert overall["auroc"]["min"]["value"] == 1.0 and overall["step_ece"] == 0.0
    assert overall["earliest_error"]["all_at_half"]["f1"] == 1.0

    mc_report = tmp_path / "mc.json"
    rc = main(["prm", "calibrate", "--data", str(path), "--scorer", "mc:k=2", "--policy", str(tiny_model_dir),
               "--max-new-tokens", "8", "--bootstrap", "20", "--limit", "6", "-o", str(mc_report)])
    assert rc == 0, capsys.readouterr().err
    cost = json.loads(mc_report.read_text())["config"]["scorer_cost"]
    steps_but_last = sum(len(r["steps"]) - 1 for r in rows[:6])
    assert cost["kind"] == "mc" and cost["scoring_rollouts"] == 2 * steps_but_last

    assert main(["prm", "calibrate", "--data", str(path), "--scorer", "mc:k=2"]) == 2
    assert "need --policy" in capsys.readouterr().err
    assert main(["prm", "calibrate", "--data", str(path), "--scorer", "rule", "--policy", "x"]) == 2


def test_bad_step_labels_are_named_and_skipped(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    good = {"prompt": "Compute: 1+2\n", "steps": ["Step 1: 1+2=3", "Answer: 3"], "correct": True,
            "step_labels": [1, 1], "label": -1}
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "step_labels": [1]}) + "\n"
                    + json.dumps({**good, "step_labels": [1, 0.5]}) + "\n")
    assert main(["prm", "calibrate", "--data", str(path), "--scorer", "rule", "--bootstrap", "10"]) == 1
    err = capsys.readouterr().err
    assert "bad.jsonl:2: 'step_labels' must be" in err and "bad.jsonl:3:" in err


def test_cli_traces_writes_exact_labels(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "traces.jsonl"
    rc = main(["prm", "traces", "--policy", str(tiny_model_dir), "--data", "builtin:arith:level=easy",
               "--n", "3", "--samples", "2", "--max-new-tokens", "12", "-o", str(out)])
    assert rc == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    for r in rows:
        again = exact_record(r["prompt"], r["completion"], r["answer"], r["id"])
        assert again == r
    assert main(["prm", "traces", "--policy", str(tiny_model_dir), "--data", str(out), "-o",
                 str(tmp_path / "x.jsonl")]) == 2
    assert main(["prm", "traces", "--policy", str(tmp_path / "none"), "-o", str(tmp_path / "x.jsonl")]) == 2
    assert "no model folder" in capsys.readouterr().err

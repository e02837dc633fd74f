"""The trainer's data loading follows the command-line error contract: a bad line is named
(`FILE:LINE: what`) and skipped, every other line is kept, a missing file is one clear error."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from veristep.common.jsonl_io import UsageError
from veristep.train.data import build_problems, load_records

from veristep.cli import main

from .conftest import FIRST_CHAR


def _flags(tiny_model_dir, dataset, tmp_path) -> list[str]:
    return ["train", "--model", str(tiny_model_dir), "--dataset", str(dataset),
            "--verifier", FIRST_CHAR, "--prm", "rule", "--steps", "1", "--group-size", "4",
            "--prompts-per-step", "2", "--max-prompt-len", "32", "--max-completion-len", "8",
            "--eval-size", "0", "--eval-interval", "0", "--checkpoint-interval", "0",
            "--no-progress", "--output-dir", str(tmp_path / "run")]


def test_bad_lines_are_named_and_skipped_through_the_cli(tiny_model_dir, tmp_path, capsys):
    data = tmp_path / "prompts.jsonl"
    data.write_text(
        json.dumps({"prompt": "Problem 1: 1 + 1 =", "answer": "abc"}) + "\n"
        "{not json\n"
        + json.dumps({"question": "no prompt field", "answer": "a"}) + "\n"
        + json.dumps({"prompt": "Problem 2: 2 + 2 =", "answer": "abc"}) + "\n"
        "[1, 2]\n",
        encoding="utf-8",
    )
    assert main(_flags(tiny_model_dir, data, tmp_path)) == 0
    err = capsys.readouterr().err
    assert f"{data}:2: bad JSON" in err and f"{data}:5: expected a JSON object" in err
    assert f"{data}: record 2: no field 'prompt'" in err and "Traceback" not in err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["rollouts"] == 8  # both usable prompts trained on: 2 prompts x G=4


def test_missing_data_file_is_one_clear_error(tiny_model_dir, tmp_path, capsys):
    missing = tmp_path / "nope.jsonl"
    assert main(_flags(tiny_model_dir, missing, tmp_path)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"veristep train: error: dataset={missing}: no such data file"
    with pytest.raises(UsageError, match="no such data file"):
        load_records(str(tmp_path / "other.parquet"))


def test_json_array_records_and_unusable_prompts(tmp_path, capsys):
    data = tmp_path / "p.json"
    data.write_text(json.dumps([{"prompt": "a"}, 3, {"q": "b"}, {"prompt": "c"}]))
    records = load_records(str(data))
    assert records == [{"prompt": "a"}, {"q": "b"}, {"prompt": "c"}]
    assert f"{data}: record 1: not a JSON object" in capsys.readouterr().err
    cfg = SimpleNamespace(answer_field="answer", prompt_field="prompt",
                          prompt_template="{prompt}", chat_template=False)
    problems = build_problems(records, cfg, None, str(data))
    assert [(p.index, p.text) for p in problems] == [(0, "a"), (1, "c")]
    with pytest.raises(ValueError, match="no record of .* can be used: record 1 has no field"):
        build_problems([{"q": "b"}], cfg, None, str(data))


def test_script_reports_a_missing_data_file_before_building_the_warm_start(tmp_path, capsys):
    from veristep.train.gated_grpo import main as script_main

    missing = tmp_path / "nope.jsonl"
    warm = tmp_path / "warm"
    # the default model is the built-in warm start: the error must come before minutes of building it
    assert script_main(["--dataset", str(missing), "--warmstart-dir", str(warm),
                        "--output-dir", str(tmp_path / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"gated_grpo.py: error: dataset={missing}: no such data file"
    assert not warm.exists()

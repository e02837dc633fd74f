"""The calibration benchmark and the `veristep prm` commands on the shipped data samples."""

from __future__ import annotations

import json
import math

import pytest
from veristep.prm import PrecomputedScorer, RuleScorer, load_scorer
from veristep.prm.calibrate import (
    Trace,
    calibrate,
    format_table,
    load_data,
    load_prmbench,
    load_processbench,
    subset_report,
)

from veristep.cli import main


@pytest.fixture(scope="module")
def processbench(test_data_dir):
    return load_processbench(test_data_dir / "processbench")


@pytest.fixture(scope="module")
def prmbench(test_data_dir):
    return load_prmbench(test_data_dir / "prmbench")


def test_processbench_loader_labels(processbench):
    assert len(processbench) == 80
    assert {t.subset for t in processbench} == {"gsm8k", "math", "olympiadbench", "omnimath"}
    assert sum(t.correct for t in processbench) == 40
    t = next(t for t in processbench if t.first_error and t.first_error > 0)
    assert t.step_labels[: t.first_error] == [1] * t.first_error
    assert t.step_labels[t.first_error] == 0
    assert all(lab is None for lab in t.step_labels[t.first_error + 1 :])
    clean = next(t for t in processbench if t.first_error == -1)
    assert clean.step_labels == [1] * len(clean.steps)


def test_prmbench_loader_pairs_valid_and_flawed(prmbench):
    assert len(prmbench) == 64 and len({t.subset for t in prmbench}) == 8
    original, modified = prmbench[0], prmbench[1]
    assert original.correct and original.first_error == -1 and original.error_steps == ()
    assert not modified.correct and modified.error_steps
    assert modified.first_error == modified.error_steps[0]
    assert [modified.step_labels[k] for k in modified.error_steps] == [0] * len(modified.error_steps)


def test_steps_survive_the_join_and_split(processbench, prmbench):
    scorer = RuleScorer()
    for t in processbench + prmbench:
        assert scorer.score(t.prompt, t.completion).steps == t.steps


def _trace(correct, first_error, n=2, subset="s"):
    return Trace("i", "toy", subset, "p", [f"step {k}" for k in range(n)], correct, first_error,
                 step_labels=[1 if first_error < 0 or k < first_error else 0 if k == first_error else None
                              for k in range(n)])


def test_subset_report_by_hand():
    traces = [_trace(True, -1), _trace(True, -1), _trace(False, 1), _trace(False, 0)]
    scores = [[0.9, 0.8], [0.7, 0.6], [0.9, 0.2], [0.4, 0.9]]
    r = subset_report(traces, scores, n_bootstrap=20, dev_fraction=0.5)
    assert r.auroc["min"].value == 1.0  # mins 0.8, 0.6 vs 0.2, 0.4
    assert r.auroc["last"].value == 0.5  # lasts 0.8, 0.6 vs 0.2, 0.9
    # all traces have the same length: the length baseline is at chance
    assert r.baseline_auroc["length_chars"].value == 0.5
    # labelled steps: 1,1 | 1,1 | 1,0 | 0 -> probs .9 .8 .7 .6 .9 .2 .4
    assert r.n_labelled_steps == 7
    assert r.step_brier == pytest.approx(
        ((0.1**2) + 0.2**2 + 0.3**2 + 0.4**2 + 0.1**2 + 0.2**2 + 0.4**2) / 7
    )
    assert r.earliest_error.all_at_half.f1 == 1.0
    assert r.earliest_error.n_dev == 2 and r.earliest_error.n_test == 2
    assert r.locate is None


def test_calibrate_rule_on_samples(processbench, prmbench):
    report, scored = calibrate(RuleScorer(), processbench + prmbench, "rule", ["pb", "prmb"],
                               n_bootstrap=30)
    assert "processbench/overall" in report.subsets and "prmbench/overall" in report.subsets
    pb = report.subsets["processbench/overall"]
    assert pb.n_traces == 80 and pb.n_correct == 40
    for est in [*pb.auroc.values(), *pb.baseline_auroc.values()]:
        assert 0.0 <= est.value <= 1.0
    assert pb.earliest_error is not None and pb.locate is None
    prmb = report.subsets["prmbench/overall"]
    assert prmb.locate is not None and prmb.locate.n == 32
    assert len(scored.step_scores) == 144
    payload = json.loads(report.to_json())  # NaN becomes null, so this is strict JSON
    assert payload["subsets"]["prmbench/overall"]["locate"]["n"] == 32
    table = format_table(report)
    assert "processbench/gsm8k" in table and "len" in table


def test_cli_calibrate_writes_json_png_and_reusable_scores(tmp_path, test_data_dir, capsys):
    out, png, scores = tmp_path / "r.json", tmp_path / "r.png", tmp_path / "s.jsonl"
    args = ["prm", "calibrate", "--data", f"processbench:{test_data_dir / 'processbench'}",
            "--data", f"prmbench:{test_data_dir / 'prmbench'}", "--scorer", "rule",
            "--bootstrap", "20", "-o", str(out), "--plot", str(png), "--save-scores", str(scores)]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "processbench/overall" in captured.out and "traces/s" in captured.out
    assert "scoring 144 traces with rule" in captured.err  # a status line even without a terminal
    assert "processbench (min step score): AUROC" in captured.out  # the verdict line
    report = json.loads(out.read_text())
    assert report["data"] == ["processbench", "prmbench"]  # names, never a machine's paths
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The saved scores reproduce the same numbers through the precomputed scorer.
    again = tmp_path / "again.json"
    args2 = [a if a != "rule" else f"scores:{scores}" for a in args[:-4]] + ["-o", str(again)]
    assert main(args2) == 0
    rerun = json.loads(again.read_text())
    for name in ("processbench/overall", "prmbench/overall"):
        assert rerun["subsets"][name]["auroc"] == report["subsets"][name]["auroc"]


def test_cli_calibrate_generic_jsonl_and_limit(tmp_path, capsys):
    data = tmp_path / "traces.jsonl"
    rows = [
        {"prompt": "p", "completion": "2+2=4\n\nso 4", "correct": True, "label": -1},
        {"prompt": "p", "completion": "2+2=5\n\nso 5", "correct": False, "label": 0},
        {"prompt": "p", "completion": "3*3=9", "correct": True},
        {"prompt": "p", "completion": "3*3=6", "correct": False},
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["prm", "calibrate", "--data", str(data), "--scorer", "rule", "--bootstrap", "5",
                 "-o", str(tmp_path / "o.json")]) == 0
    r = json.loads((tmp_path / "o.json").read_text())["subsets"]["traces/overall"]
    assert r["auroc"]["min"]["value"] == 1.0
    assert main(["prm", "calibrate", "--data", str(data), "--scorer", "rule", "--limit", "2",
                 "--bootstrap", "5"]) == 0
    assert "traces/all" in capsys.readouterr().out
    assert main(["prm", "calibrate", "--data", "nowhere:x", "--scorer", "rule"]) == 2


def test_cli_score_writes_spans_and_scores(tmp_path):
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(json.dumps({"prompt": "q", "completion": "1+1=2\n\n2*2=5\n\ndone", "id": 7}) + "\n")
    assert main(["prm", "score", str(src), "--scorer", "rule", "-o", str(dst)]) == 0
    rec = json.loads(dst.read_text())
    assert rec["id"] == 7 and rec["veristep"]["step_scores"] == [1.0, 0.0, 0.5]
    assert rec["veristep"]["step_spans"] == [[0, 5], [7, 12], [14, 18]]
    assert rec["veristep"]["scorer"] == "rule"
    # and the file is a valid precomputed-scores source
    stored = load_scorer(f"scores:{dst}")
    assert isinstance(stored, PrecomputedScorer)
    assert stored.score("q", "1+1=2\n\n2*2=5\n\ndone").scores == [1.0, 0.0, 0.5]
    with pytest.raises(ValueError, match="no scores"):
        stored.score("q", "other")
    assert main(["prm", "score", str(src), "--scorer", "rule", "--separator", "\n",
                 "-o", str(dst)]) == 0
    assert json.loads(dst.read_text())["veristep"]["step_scores"] == [1.0, 0.0, 0.5]


def test_precomputed_validation(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"completion": "a", "prompt": "p", "step_scores": "high"}\n')
    with pytest.raises(ValueError, match="list of finite numbers"):
        PrecomputedScorer(bad)
    # NaN was passed on and written back as null (then unreadable); Infinity was clamped to 1
    for value in ("NaN", "Infinity"):
        bad.write_text('{"completion": "a", "prompt": "p", "step_scores": [' + value + "]}\n")
        with pytest.raises(ValueError, match="list of finite numbers"):
            PrecomputedScorer(bad)
    for spans in ("[[-1, 1]]", "[[0, 2], [1, 3]]", "[[2, 1]]", "[[0, 1.5]]"):
        bad.write_text('{"completion": "abc", "prompt": "p", "step_scores": [0.5, 0.5], "step_spans": ' + spans + "}\n")
        with pytest.raises(ValueError, match="step_spans"):
            PrecomputedScorer(bad)
    bad.write_text('{"completion": "abc", "prompt": "p", "step_scores": [0.5], "step_spans": [[0, 9]]}\n')
    with pytest.raises(ValueError, match="reach character 9"):
        PrecomputedScorer(bad).score("p", "abc")
    mismatch = tmp_path / "m.jsonl"
    mismatch.write_text('{"completion": "a\\n\\nb", "prompt": "p", "step_scores": [0.5]}\n')
    with pytest.raises(ValueError, match="separator"):
        PrecomputedScorer(mismatch).score("p", "a\n\nb")
    dup = tmp_path / "dup.jsonl"
    dup.write_text('{"id": "a", "step_scores": [1]}\n{"id": "a", "step_scores": [0]}\n')
    with pytest.raises(ValueError, match="duplicate id"):
        PrecomputedScorer(dup)
    with pytest.raises(ValueError, match="does not exist"):
        PrecomputedScorer(tmp_path / "none.jsonl")


def test_load_data_errors(tmp_path):
    with pytest.raises(ValueError):
        load_data(f"processbench:{tmp_path}")
    with pytest.raises(ValueError):
        load_data(str(tmp_path / "missing.jsonl"))
    assert math.isnan(subset_report([_trace(True, -1)], [[0.5, 0.5]], n_bootstrap=5).auroc["min"].value)

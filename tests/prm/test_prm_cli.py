"""`veristep prm score` / `prm calibrate` under the command-line contract, and the figure."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from veristep.prm import RuleScorer
from veristep.prm.calibrate import baseline_verdict, calibrate, load_processbench
from veristep.prm.calibration_plot import _panels, _views, plot_calibration
from veristep.prm.metrics import (
    Estimate,
    auroc,
    expected_calibration_error,
    reliability_bins,
    roc_curve,
)

from veristep.cli import main


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows),
                    encoding="utf-8")
    return path


def _read(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


GOOD = {"prompt": "q", "completion": "1+1=2\n\n2*2=5\n\ndone", "id": 1}


def test_score_names_bad_lines_keeps_the_rest_and_never_overwrites_input(tmp_path, capsys):
    # A ProcessBench-style record has its own `steps`: the scores go under `veristep`.
    own = dict(GOOD, id=6, steps=["keep", "me"])
    src = _write(tmp_path / "in.jsonl", [
        GOOD, "{bad", {"prompt": "q", "id": 3}, {"prompt": "q", "completion": ["x"], "id": 4},
        [1], own,
    ])
    out = tmp_path / "out.jsonl"
    assert main(["prm", "score", str(src), "--scorer", "rule", "-o", str(out)]) == 1
    rows = _read(out)
    assert [r["id"] for r in rows] == [1, 6]
    assert rows[1]["steps"] == ["keep", "me"] and rows[1]["veristep"]["step_scores"] == [1.0, 0.0, 0.5]
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for needle in (":2: bad JSON", ":3: missing key 'completion'",
                   ":4: key 'completion' must be a string", ":5: expected a JSON object"):
        assert f"{src}{needle}" in err
    # The output scores again to the same numbers, and is a valid scores:FILE source.
    again = tmp_path / "again.jsonl"
    assert main(["prm", "score", str(out), "--scorer", "rule", "-o", str(again)]) == 0
    assert [r["veristep"] for r in _read(again)] == [r["veristep"] for r in rows]
    assert main(["prm", "score", str(out), "--scorer", f"scores:{out}", "-o", str(again)]) == 0
    assert [r["veristep"]["step_scores"] for r in _read(again)] == [[1.0, 0.0, 0.5]] * 2


def test_score_writes_a_line_with_nan_deep_in_nesting(tmp_path, capsys):
    # Its re-encoding recursed: a traceback, and no line written at all.
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(GOOD) + '\n{"id": 2, "prompt": "p", "completion": "1+1=2", "x": NaN, "d": '
                   + "[" * 900 + "]" * 900 + "}\n")
    out = tmp_path / "out.jsonl"
    assert main(["prm", "score", str(src), "--scorer", "rule", "-o", str(out)]) == 0
    rows = _read(out)
    assert [r["id"] for r in rows] == [1, 2] and rows[1]["x"] is None and "veristep" in rows[1]
    assert "Traceback" not in capsys.readouterr().err


def test_score_usage_errors_exit_2_without_traceback(tmp_path):
    src = _write(tmp_path / "in.jsonl", [GOOD])
    cases = [
        (["prm", "score", str(tmp_path), "--scorer", "rule"], "is a folder, not a JSONL file"),
        (["prm", "score", str(tmp_path / "none.jsonl"), "--scorer", "rule"], "no such file"),
        (["prm", "score", str(src), "--scorer", f"hf:{tmp_path / 'no-model'}"], "no model folder"),
        (["prm", "score", str(src), "--scorer", "nope"], "unknown scorer 'nope'"),
        (["prm", "score", str(src), "--scorer", "rule", "-o", str(tmp_path)], "is a folder"),
    ]
    for args, message in cases:
        proc = subprocess.run([sys.executable, "-m", "veristep", *args], capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_out_is_a_deprecated_alias_of_output(tmp_path, capsys):
    src, dst = _write(tmp_path / "in.jsonl", [GOOD]), tmp_path / "o.jsonl"
    assert main(["prm", "score", str(src), "--scorer", "rule", "--out", str(dst)]) == 0
    assert "--out is deprecated; use -o/--output" in capsys.readouterr().err
    assert _read(dst)[0]["veristep"]["step_scores"] == [1.0, 0.0, 0.5]


def test_calibrate_plot_without_matplotlib_fails_before_any_work(tmp_path, monkeypatch, capsys,
                                                                 test_data_dir):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what Python does for a missing package
    report = tmp_path / "r.json"
    code = main(["prm", "calibrate", "--data", f"processbench:{test_data_dir / 'processbench'}",
                 "--scorer", "rule", "-o", str(report), "--plot", str(tmp_path / "r.png")])
    assert code == 2
    err = capsys.readouterr().err
    assert "--plot needs matplotlib: pip install 'veristep[plot]'" in err
    assert "scoring" not in err and not report.exists()


def test_calibrate_checks_paths_first_and_keeps_good_records(tmp_path, capsys):
    rows = [
        {"prompt": "p", "completion": "2+2=4\n\nso 4", "correct": True, "label": -1},
        "{broken",
        {"prompt": "p", "completion": "2+2=5\n\nso 5", "correct": False, "label": 0},
        {"completion": "3*3=9", "correct": True},
        {"prompt": "p", "completion": "3*3=9", "correct": True},
        {"prompt": "p", "completion": "3*3=6", "correct": False},
    ]
    data = _write(tmp_path / "traces.jsonl", rows)
    base = ["prm", "calibrate", "--data", str(data), "--scorer", "rule", "--bootstrap", "5"]
    assert main([*base, "-o", str(tmp_path)]) == 2
    assert main([*base, "--plot", str(tmp_path)]) == 2
    assert main([*base, "-o", str(data)]) == 2  # would overwrite its own input
    assert main(["prm", "calibrate", "--data", "processbench:/no/such/dir", "--scorer", "rule"]) == 2
    capsys.readouterr()
    out = tmp_path / "o.json"
    assert main([*base, "-o", str(out)]) == 1  # two records skipped, the rest reported
    err = capsys.readouterr().err
    assert f"{data}:2: bad JSON" in err and f"{data}:4: needs 'prompt' and 'correct'" in err
    report = json.loads(out.read_text())
    assert report["n_traces"] == 4 and report["data"] == ["traces.jsonl"]


def test_baseline_verdict_reads_the_intervals():
    assert baseline_verdict(Estimate(0.542, 0.533, 0.551), Estimate(0.614, 0.594, 0.634)) == (
        "AUROC 0.54, below the length baseline 0.61"
    )
    assert baseline_verdict(Estimate(0.70, 0.66, 0.74), Estimate(0.60, 0.58, 0.62)).startswith(
        "AUROC 0.70, above"
    )
    assert "not distinguishable from the length baseline 0.53" in baseline_verdict(
        Estimate(0.523, 0.518, 0.528), Estimate(0.527, 0.511, 0.541))
    nan = float("nan")
    assert baseline_verdict(Estimate(0.5, nan, nan), Estimate(0.6, nan, nan)).endswith(
        "below the length baseline 0.60 (no bootstrap intervals)")
    assert "undefined" in baseline_verdict(Estimate(nan, nan, nan), Estimate(0.6, 0.5, 0.7))


def test_roc_area_is_the_auroc_and_bins_add_up_to_the_ece():
    rng = np.random.default_rng(0)
    scores = np.round(rng.random(300), 1)  # many ties
    labels = rng.random(300) < scores
    fpr, tpr = roc_curve(scores, labels)
    assert fpr[0] == tpr[0] == 0.0 and fpr[-1] == tpr[-1] == 1.0
    area = float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))
    assert area == pytest.approx(auroc(scores, labels))
    bins = reliability_bins(scores, labels, 10)
    assert sum(b.count for b in bins) == 300
    ece = sum(b.count / 300 * abs(b.observed - b.mean_prob) for b in bins)
    assert ece == pytest.approx(expected_calibration_error(scores, labels, 10))
    with pytest.raises(ValueError):
        roc_curve([0.1, 0.2], [True, True])


def test_figure_has_only_panels_with_data(tmp_path, test_data_dir):
    traces = load_processbench(test_data_dir / "processbench")
    report, scored = calibrate(RuleScorer(), traces, "rule", ["processbench"], n_bootstrap=10)
    (view,) = _views(report, scored, "min")
    assert _panels(view) == ["distribution", "reliability", "roc", "subsets"]
    # One subset, one class: no ROC (AUROC undefined), no per-subset panel.
    one = [t for t in traces if t.subset == "gsm8k" and t.correct]
    report1, scored1 = calibrate(RuleScorer(), one, "rule", ["x"], n_bootstrap=0)
    (view1,) = _views(report1, scored1, "min")
    assert _panels(view1) == ["distribution", "reliability"]
    png = tmp_path / "one.png"
    plot_calibration(report1, scored1, png)
    import matplotlib.image

    height, width = matplotlib.image.imread(png).shape[:2]
    assert width < 2 * 4.6 * 110 + 10  # two panels wide, not four


def test_the_prm_commands_share_their_model_options(tmp_path, capsys):
    """score / calibrate / label / traces / train take --device (and the model commands --separator,
    --batch-size, --max-length) from one helper, so their flags and help agree; a --policy that is
    not a folder is one usage line in calibrate as in label."""
    from veristep.prm.shared_cli import DEVICE_HELP

    from veristep.cli import build_parser

    parser = build_parser("prm")
    prm = next(a for a in parser._subparsers._group_actions[0].choices["prm"]._actions
               if a.dest == "prm_command")
    for name in ("score", "calibrate", "label", "traces", "train"):
        opts = {o: a for a in prm.choices[name]._actions for o in a.option_strings}
        assert opts["--device"].help.endswith(DEVICE_HELP), name
        if name in ("score", "calibrate", "train"):
            assert {"--separator", "--batch-size", "--max-length"} <= set(opts), name
    data = _write(tmp_path / "d.jsonl", [{"prompt": "p", "steps": ["a"], "answer": "1", "correct": True}])
    for argv in (["prm", "calibrate", "--data", str(data), "--scorer", "mc:k=2", "--policy", str(tmp_path / "none")],
                 ["prm", "label", "--policy", str(tmp_path / "none"), "-o", str(tmp_path / "x.jsonl")]):
        assert main(argv) == 2
        assert f"--policy {tmp_path / 'none'}: no model folder" in capsys.readouterr().err

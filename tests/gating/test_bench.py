"""The gating benchmark script runs end to end on a small configuration and writes its JSON."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "gating_bench.py"


def test_bench_small_run(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("gating_bench", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "bench.json"
    args = ["--n", "4", "--g", "4", "--t", "64", "--s", "4", "--repeats", "1", "--skip-forward",
            "--mc-prompts", "300", "--groups", "2", "4", "--out", str(out),
            # main() sets torch's thread count; keep the suite's own setting.
            "--threads", str(torch.get_num_threads())]
    assert bench.main(args) == 0
    report = json.loads(out.read_text())
    for scenario in report["speed"]["scenarios"].values():
        assert scenario["max_abs_diff_vs_reference"] < 1e-5
    assert [row["G"] for row in report["collapse"]] == [2, 4, 2, 4]
    for row in report["collapse"]:
        assert math.isclose(row["nonzero_signal"]["grpo"], 1 - row["acr"])
        assert row["nonzero_signal"]["sign"] == 1.0
    assert "Advantage collapse" in capsys.readouterr().out
    # The closed form E[p^G + (1-p)^G] under Beta(1, 1) is 2 / (G + 1).
    assert math.isclose(bench.beta_collapse(1.0, 1.0, 4), 2 / 5)

"""benchmarks/online_prm_probe.py: an implicit PRM scored against exact step labels."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from veristep.prm.builtin_traces import exact_record
from veristep.prm.implicit import load_implicit
from veristep.train.demo import task

torch.set_num_threads(1)
SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "online_prm_probe.py"
spec = importlib.util.spec_from_file_location("online_prm_probe", SCRIPT)
probe_mod = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = probe_mod
spec.loader.exec_module(probe_mod)


def _traces(n: int) -> list[dict]:
    problems = task.make_problems(n, seed=3, level="easy")
    demos = task.make_noisy_demonstrations(problems, seed=3, step_error_rate=0.3, answer_error_rate=0.1)
    return [exact_record(d.prompt, d.completion, str(p["answer"]), f"t{i}")
            for i, (d, p) in enumerate(zip(demos, problems, strict=True))]


def test_first_below_half():
    assert probe_mod.first_below_half([0.9, 0.5, 0.49, 0.1]) == 2
    assert probe_mod.first_below_half([0.5, 0.5]) is None  # a neutral score is not an error
    assert probe_mod.first_below_half([]) is None


def test_a_prm_taught_that_everything_is_wrong_declares_every_first_step_an_error(tiny_model_dir):
    traces = _traces(12)
    assert any(t["label"] >= 0 for t in traces) and any(1 in t["step_labels"] for t in traces)
    prm = load_implicit(str(tiny_model_dir), beta=0.5, lr=1e-2)
    start = probe_mod.probe(prm, traces, bootstrap=50)
    # pi_phi == pi_ref: every score 0.5, no error declared, correct and wrong steps tied
    assert start["declared_first_error_at_step_1"] == 0.0
    assert start["step_auroc"]["value"] == pytest.approx(0.5)
    assert start["mean_step_reward"]["correct"] == pytest.approx(0.0, abs=1e-6)
    # outcomes that are all 0, as where 82 % of groups are all-wrong: the PRM learns a constant
    prompts, completions = [t["prompt"] for t in traces], [t["completion"] for t in traces]
    for _ in range(15):
        prm.update(prompts, completions, [0.0] * len(traces))
    after = probe_mod.probe(prm, traces, bootstrap=50)
    assert after["declared_first_error_at_step_1"] == 1.0
    assert after["mean_step_reward"]["correct"] < 0 and after["mean_step_reward"]["wrong"] < 0
    assert after["updates"] == 15 and after["labelled_steps"] == start["labelled_steps"]

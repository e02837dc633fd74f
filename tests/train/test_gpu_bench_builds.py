"""benchmarks/trainer_gpu_bench.py builds valid trainer runs on CPU, ready for the first GPU."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


class _Built(Exception):
    """Raised by the stand-in `train` once it has the config: the phase built its run."""


@pytest.fixture
def bench(monkeypatch):
    spec = importlib.util.spec_from_file_location("trainer_gpu_bench", REPO / "benchmarks" / "trainer_gpu_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    built = []

    def capture(cfg):
        built.append(cfg.validate())  # the trainer's own start-up check
        raise _Built

    monkeypatch.setattr("veristep.train.gated_grpo.train", capture)
    return module, built


@pytest.mark.parametrize("rollout", ["vllm", "hf"])
def test_train_and_recipe_phases_build_valid_configs(bench, rollout, tmp_path):
    module, built = bench
    args = argparse.Namespace(rollout=rollout, steps=5, prompts=32, group_size=8, completion_len=512,
                              micro_batch=16, vllm_mem=0.35, sleep_mode=False)
    with pytest.raises(_Built):
        module.phase_train(args, tmp_path / "model", tmp_path / "tok", tmp_path / "data.jsonl", tmp_path / "run")
    with pytest.raises(_Built):
        module.phase_recipe(args, tmp_path)
    train_cfg, recipe_cfg = built
    assert (train_cfg.rollout, train_cfg.dtype, train_cfg.prompts_per_step) == (rollout, "bfloat16", 32)
    assert (recipe_cfg.device, recipe_cfg.model) == ("cuda", "builtin:warmstart")

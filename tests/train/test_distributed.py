"""Two gloo processes under torchrun take the same update as one process on the same data."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from veristep.train.tracking import read_metrics

HERE = Path(__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cfg: dict, tmp_path: Path, nproc: int) -> Path:
    out = tmp_path / f"np{nproc}"
    cfg = dict(cfg, output_dir=str(out))
    cfg_path = tmp_path / f"cfg{nproc}.json"
    cfg_path.write_text(json.dumps(cfg))
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    if nproc == 1:  # in-process: saves a Python start-up
        from veristep.train.config import make_config
        from veristep.train.gated_grpo import train

        train(make_config(**cfg))
        return out
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
           "--master-addr=127.0.0.1", f"--master-port={_free_port()}", str(HERE / "dist_run.py"),
           str(cfg_path)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


def _final_weights(out: Path) -> dict[str, torch.Tensor]:
    summary = json.loads((out / "summary.json").read_text())
    return load_file(str(Path(summary["final_model"]) / "model.safetensors"))


@pytest.mark.parametrize(("fsdp", "updates"), [
    (False, 1), (False, 2),
    pytest.param(True, 1, marks=pytest.mark.slow), pytest.param(True, 2, marks=pytest.mark.slow),
], ids=["ddp", "ddp-2x2-updates", "fsdp2", "fsdp2-2x2-updates"])
def test_two_gloo_processes_match_one(small_config, tmp_path, fsdp, updates):
    """`updates` 2: two PPO epochs x two mini-batches of one group per rank, micro-batches of
    one sequence, so later updates see ratio != 1 and every rank runs the same forward passes."""
    cfg = dict(small_config, prompts_per_step=4, steps=2, reproducible_rollouts=True, fsdp=fsdp,
               advantage="grpo", eval_size=4, eval_interval=2, checkpoint_interval=0,
               ppo_epochs=updates, mini_batches=updates, micro_batch_size=1 if updates > 1 else 0)
    one = _run(cfg, tmp_path, 1)
    two = _run(cfg, tmp_path, 2)
    rows1, rows2 = read_metrics(one / "metrics.jsonl"), read_metrics(two / "metrics.jsonl")
    for r1, r2 in zip(rows1, rows2, strict=True):
        assert r1["reward/mean"] == r2["reward/mean"]  # the same completions were sampled
        assert r1["gate/acr"] == r2["gate/acr"]
        assert r1["loss/policy"] == pytest.approx(r2["loss/policy"], abs=1e-5)
        assert r1["eval/pass@1"] == r2["eval/pass@1"]
        assert r1["train/updates"] == r2["train/updates"] == updates * updates
        assert r1["loss/ratio_dev"] == pytest.approx(r2["loss/ratio_dev"], abs=1e-5)
        assert (r1["loss/ratio_dev"] > 0) == (updates > 1)
    w1, w2 = _final_weights(one), _final_weights(two)
    assert any(float((w1[k] - load_file(str(next(Path(small_config["model"]).glob("*.safetensors"))))[k]).abs().max()) > 0
               for k in w1)
    for k in w1:
        torch.testing.assert_close(w1[k], w2[k], atol=1e-5, rtol=1e-4, msg=k)

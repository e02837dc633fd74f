"""`python train/gated_grpo.py` as a script: flags, SIGTERM -> checkpoint and clean exit, resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from veristep.train.tracking import read_metrics

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def _cmd(small_config: dict, **over) -> list[str]:
    cfg = dict(small_config, **over)
    cmd = [sys.executable, str(REPO / "train" / "gated_grpo.py")]
    for key, value in cfg.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            cmd.append(flag if value else "--no-" + key.replace("_", "-"))
        else:
            cmd += [flag, str(value)]
    return cmd


def test_sigterm_finishes_the_step_checkpoints_and_resume_continues(small_config):
    out = Path(small_config["output_dir"])
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(_cmd(small_config, steps=200, advantage="grpo"), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = out / "metrics.jsonl"
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None:
        if metrics.exists() and metrics.read_text().count("\n") >= 1:
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-3000:]
    stopped_at = json.loads((out / "summary.json").read_text())["steps"]
    assert json.loads((out / "summary.json").read_text())["stopped"] == "signal"
    assert 1 <= stopped_at < 200
    assert (out / "checkpoints" / f"step-{stopped_at:06d}" / "COMPLETE").exists()
    assert [r["step"] for r in read_metrics(metrics)] == list(range(1, stopped_at + 1))
    assert "summary" in stdout

    done = subprocess.run(_cmd(small_config, steps=stopped_at + 1, advantage="grpo", resume=True),
                          env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"resumed at step {stopped_at}" in done.stderr
    assert [r["step"] for r in read_metrics(metrics)] == list(range(1, stopped_at + 2))


def test_bad_flag_value_names_the_field(capsys):
    import pytest
    from veristep.train.gated_grpo import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--loss-agg", "median"])
    assert exit_info.value.code == 2 and "loss_agg" in capsys.readouterr().err

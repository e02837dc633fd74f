"""A failed run releases what it holds; re-saving a checkpoint step never loses the old one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from veristep.train import checkpoint as ckpt_mod
from veristep.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from veristep.train.config import make_config
from veristep.train.distributed import DistInfo
from veristep.train.gated_grpo import train
from veristep.train.tracking import read_metrics

HERE = Path(__file__).resolve().parent


def _open_paths() -> set[str]:
    """Files this process holds open."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
    return out


def test_a_run_that_fails_mid_loop_closes_its_verifiers_and_metrics_file(small_config, tmp_path, monkeypatch):
    marker = tmp_path / "closed.txt"
    monkeypatch.setenv("VERISTEP_TEST_CLOSED", str(marker))
    cfg = make_config(**dict(small_config, verifier=f"{HERE / 'trainer_verifiers.py'}:FailsLaterVerifier",
                             steps=4, eval_dataset=None))
    with pytest.raises(RuntimeError, match="failed on purpose"):
        train(cfg)  # verify_batch call 3 is step 3's
    metrics = Path(cfg.output_dir) / "metrics.jsonl"
    assert [r["step"] for r in read_metrics(metrics)] == [1, 2]  # the steps done are kept
    assert marker.read_text() == "closed\n"  # the rewarder closed its verifier, once
    assert str(metrics.resolve()) not in _open_paths()


@pytest.fixture
def parts(tiny_model):
    model = tiny_model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, opt


def _save(out: Path, step: int, parts, marker: int) -> Path:
    model, opt = parts
    return save_checkpoint(out, step, model, opt, None, {"marker": marker}, DistInfo())


def test_re_saving_a_step_replaces_it(tmp_path, parts):
    _save(tmp_path, 5, parts, marker=1)
    path = _save(tmp_path, 5, parts, marker=2)
    assert latest_checkpoint(tmp_path) == path
    state = torch.load(path / "trainer.pt", weights_only=False)
    assert state["marker"] == 2
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest", "step-000005"]


def test_a_re_save_that_dies_before_the_new_copy_lands_keeps_the_old_one(tmp_path, parts, monkeypatch):
    _save(tmp_path, 5, parts, marker=1)
    real = os.replace
    calls = []

    def dies_on_the_second_rename(src, dst):
        calls.append((src, dst))
        if len(calls) == 2:  # old copy moved aside, new copy not yet in place
            raise OSError("killed mid-save")
        return real(src, dst)

    monkeypatch.setattr(ckpt_mod.os, "replace", dies_on_the_second_rename)
    with pytest.raises(OSError, match="killed mid-save"):
        _save(tmp_path, 5, parts, marker=2)
    monkeypatch.setattr(ckpt_mod.os, "replace", real)
    found = latest_checkpoint(tmp_path)
    assert found is not None and found.name.endswith("step-000005")
    model, opt = parts
    assert load_checkpoint(found, model, opt, None, DistInfo())["marker"] == 1  # still loads
    # the next save of that step lands and clears the old copy away
    _save(tmp_path, 5, parts, marker=3)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if not p.name.startswith(".tmp"))
    assert names == ["latest", "step-000005"]
    assert torch.load(latest_checkpoint(tmp_path) / "trainer.pt", weights_only=False)["marker"] == 3

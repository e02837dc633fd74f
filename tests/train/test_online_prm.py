"""The implicit PRM as a trainer option: online updates, checkpointed state, resume, one process."""

from __future__ import annotations

from contextlib import ExitStack

import pytest
import torch
from safetensors.torch import load_file
from veristep.prm import load_scorer
from veristep.prm.implicit import ImplicitPRM, parse_implicit_target
from veristep.train.checkpoint import latest_checkpoint
from veristep.train.config import make_config
from veristep.train.distributed import DistInfo
from veristep.train.gated_grpo import train
from veristep.train.lockstep import LockstepError
from veristep.train.online_prm import STATE_KEY, restore_online_prm
from veristep.train.run import build_run, build_scorer, resume
from veristep.train.tracking import read_metrics

torch.set_num_threads(1)


def _trainer_state(out):
    return torch.load(latest_checkpoint(out) / "trainer.pt", map_location="cpu", weights_only=False)


def test_a_run_updates_the_implicit_prm_and_resumes_with_its_state(small_config, tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    kw = dict(small_config, prm=f"implicit:{tiny_model_dir},lr=1e-3,beta=0.1", output_dir=str(out),
              checkpoint_interval=1)
    summary = train(make_config(**kw))
    rows = read_metrics(summary["metrics_path"])
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:  # every judged completion of the batch (2 prompts x 4) is a label
        assert r["prm/update_seqs"] == 8 and r["prm/update_s"] > 0
        assert r["prm/update_s"] == pytest.approx(r["prm/update_forward_s"] + r["prm/update_backward_s"])
        assert r["prm/update_loss"] > 0

    # The checkpoint holds pi_phi after two updates: it moved away from the folder it started from.
    state = _trainer_state(out)[STATE_KEY]
    assert state["stats"]["updates"] == 2 and state["beta"] == 0.1
    start = load_file(str(next(tiny_model_dir.glob("*.safetensors"))))
    assert len(set(start) & set(state["model"])) >= len(start) - 1  # the same names (a tied copy aside)
    moved = [k for k, v in state["model"].items() if k in start and not torch.equal(v, start[k])]
    assert moved, "the implicit PRM's weights did not change"

    # Resuming rebuilds the PRM from its folder, then restores the checkpoint's pi_phi and optimizer.
    cfg = make_config(**dict(kw, resume=True, steps=3))
    with ExitStack() as stack:
        run = build_run(cfg, DistInfo(), stack)
        assert isinstance(run.scorer, ImplicitPRM)
        assert all(torch.equal(v, start[k]) for k, v in run.scorer.model.state_dict().items() if k in start)
        resume(run, cfg, out, DistInfo())
        assert run.start_step == 2 and run.scorer.stats["updates"] == 2
        live = run.scorer.model.state_dict()
        assert all(torch.equal(live[k].cpu(), v) for k, v in state["model"].items())
        assert run.scorer.optimizer.state_dict()["state"], "the PRM optimizer's moments were not restored"

    summary = train(cfg)
    assert [r["step"] for r in read_metrics(summary["metrics_path"])] == [1, 2, 3]
    assert _trainer_state(out)[STATE_KEY]["stats"]["updates"] == 3  # the third update continued them


def test_other_scorers_log_no_update_and_store_no_prm_state(small_config):
    summary = train(make_config(**small_config))  # the rule scorer
    rows = read_metrics(summary["metrics_path"])
    assert all(r["prm/update_s"] is None and r["prm/update_seqs"] is None for r in rows)


def test_refused_under_several_processes_before_the_prm_loads(small_config, tiny_model_dir):
    cfg = make_config(**dict(small_config, prm=f"implicit:{tiny_model_dir}"))
    with pytest.raises(LockstepError, match="single process only.*drift"):
        build_scorer(cfg, None, None, None, [], [], [], {}, DistInfo(rank=0, world_size=2))


def test_a_checkpoint_without_prm_state_is_refused(tiny_model_dir, tmp_path):
    prm = load_scorer(f"implicit:{tiny_model_dir}")
    with pytest.raises(ValueError, match="no implicit PRM state"):
        restore_online_prm(prm, {"step": 3}, tmp_path)
    restore_online_prm(None, {"step": 3}, tmp_path)  # no learning scorer: nothing to restore


def test_spec_options(tiny_model_dir, tmp_path):
    assert parse_implicit_target("runs/x,beta=0.2,mode=step") == ("runs/x", {"beta": 0.2, "mode": "step"})
    assert parse_implicit_target("runs/x") == ("runs/x", {})
    odd = tmp_path / "a,b"
    odd.mkdir()
    assert parse_implicit_target(str(odd)) == (str(odd), {})  # a folder named with a comma stays whole
    prm = load_scorer(f"implicit:{tiny_model_dir},beta=0.2,lr=1e-4", low=-1.0, high=1.0)
    assert (prm.beta, prm.lr, prm.low, prm.high) == (0.2, 1e-4, -1.0, 1.0)
    with pytest.raises(ValueError, match="scorer option"):
        load_scorer(f"implicit:{tiny_model_dir},gamma=2")


@pytest.mark.slow  # two torch processes start on a loaded machine: about a minute; the default
# suite checks the same refusal through build_scorer above
def test_refused_on_every_rank_of_a_real_two_process_run(small_config, tiny_model_dir, tmp_path):
    """Under torchrun (two gloo ranks) the run stops with the message, not a hang or a drift."""
    from .test_distributed import _torchrun

    proc = _torchrun(dict(small_config, prm=f"implicit:{tiny_model_dir}", steps=1), tmp_path / "two", 2)
    assert proc.returncode != 0
    assert "runs in a single process only" in proc.stderr and "drift apart" in proc.stderr
    assert not (tmp_path / "two" / "checkpoints").exists()

"""Placebo controls keep each group's values and move them; mini-batches stay balanced over ranks."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from veristep.train.config import ConfigError, make_config
from veristep.train.distributed import DistInfo, mini_batch_rows
from veristep.train.gated_grpo import train
from veristep.train.lockstep import check_training
from veristep.train.placebo import permute_step_scores, placebo_generator, shuffle_within_groups
from veristep.train.tracking import read_metrics

HERE = Path(__file__).resolve().parent
NEVER_JUDGED = f"{HERE / 'trainer_verifiers.py'}:NeverJudgedVerifier"


def test_reward_placebo_permutes_within_each_group_only():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.5], [0.0, 0.0, 0.0, 0.0]])
    moved = torch.zeros(4)
    for step in range(40):
        out = shuffle_within_groups(rewards, placebo_generator(0, step))
        for g in range(3):  # each group keeps its rewards (mean, spread, collapse, gate)
            assert sorted(out[g].tolist()) == sorted(rewards[g].tolist())
        moved += (out[0] != rewards[0]).float()
    assert moved.sum() > 0  # ... but not on the same completions
    valid = torch.tensor([[False, True, True, True]] * 3)
    kept = shuffle_within_groups(rewards, placebo_generator(0, 1), valid)
    assert torch.equal(kept[:, 0], rewards[:, 0])  # an unjudged completion's placeholder stays put


def test_step_placebo_permutes_valid_scores_within_the_listed_groups():
    scores = torch.tensor([[[1.0, 0.0, 9.0], [1.0, 1.0, 0.0]], [[0.2, 0.4, 0.6], [0.8, 0.0, 0.0]]])
    mask = torch.tensor([[[True, True, False], [True, True, True]], [[True] * 3, [True, False, False]]])
    changed = False
    for step in range(20):
        out = permute_step_scores(scores, mask, [0], placebo_generator(3, step))
        assert torch.equal(out[1], scores[1])  # a group the gate did not send is untouched
        assert out[0, 0, 2] == 9.0  # padding stays padding
        assert sorted(out[0][mask[0]].tolist()) == sorted(scores[0][mask[0]].tolist())
        changed |= not torch.equal(out, scores)
    assert changed


def test_placebo_flag_is_checked():
    assert make_config(placebo="rewards").placebo == "rewards"
    with pytest.raises(ConfigError, match="placebo"):
        make_config(placebo="labels")
    with pytest.raises(ConfigError, match="placebo"):
        make_config(placebo="steps", advantage="grpo")


@pytest.mark.parametrize("placebo", ["rewards", "steps"])
def test_placebo_runs_end_to_end(placebo, small_config):
    summary = train(make_config(**dict(small_config, placebo=placebo, advantage="verigate")))
    assert summary["placebo"] == placebo and summary["steps"] == 2


def test_a_batch_no_verifier_could_judge_trains_nothing_and_is_counted(small_config, tiny_model_dir):
    cfg = make_config(**dict(small_config, verifier=NEVER_JUDGED, advantage="verigate", lr=1e-2))
    summary = train(cfg)
    rows = read_metrics(Path(cfg.output_dir) / "metrics.jsonl")
    assert [r["reward/unjudged_frac"] for r in rows] == [1.0, 1.0]
    assert summary["prm_completions"] == 0  # read as 0, every group would have looked all wrong
    assert all(r["adv/nonzero_frac"] == 0.0 for r in rows)
    before = load_file(str(tiny_model_dir / "model.safetensors"))
    after = load_file(str(Path(summary["final_model"]) / "model.safetensors"))
    assert all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.parametrize(("per_rank", "mini_batches", "world"), [(4, 3, 2), (3, 2, 2), (6, 4, 2)])
def test_unbalanced_mini_batches_are_refused(per_rank, mini_batches, world):
    # the rows each rank would hold in each mini-batch really differ ...
    counts = []
    for rank in range(world):
        groups = torch.arange(rank * per_rank, (rank + 1) * per_rank)
        counts.append([len(mini_batch_rows(groups, mini_batches, k)) for k in range(mini_batches)])
    assert counts[0] != counts[1]
    # ... so the set-up refuses them, naming the field
    with pytest.raises(ValueError, match="mini_batches"):
        check_training(per_rank * world, mini_batches, DistInfo(world_size=world))


@pytest.mark.parametrize(("per_rank", "mini_batches", "world"), [(4, 2, 2), (6, 3, 2), (3, 2, 1)])
def test_balanced_mini_batches_are_accepted(per_rank, mini_batches, world):
    check_training(per_rank * world, mini_batches, DistInfo(world_size=world))
    counts = {tuple(len(mini_batch_rows(torch.arange(r * per_rank, (r + 1) * per_rank), mini_batches, k))
                    for k in range(mini_batches)) for r in range(world)}
    assert len(counts) == 1


def test_the_trainer_refuses_unbalanced_mini_batches_before_any_work(small_config, monkeypatch):
    # two ranks of 4 groups each, 3 mini-batches: refused before any model is loaded
    monkeypatch.setattr("veristep.train.gated_grpo.setup", _two_ranks)
    with pytest.raises(ConfigError, match="mini_batches=3"):
        train(make_config(**dict(small_config, prompts_per_step=8, mini_batches=3)))


def _two_ranks(device):
    from veristep.train.distributed import DistInfo

    return DistInfo(rank=0, world_size=2)


def test_ppo_epochs_and_mini_batches_take_several_steps_with_ratio_away_from_one(small_config):
    """Two epochs x two mini-batches: four updates on one batch; the later ones see ratio != 1."""
    cfg = make_config(**dict(small_config, steps=1, prompts_per_step=4, ppo_epochs=2, mini_batches=2,
                             advantage="grpo", lr=5e-2))
    train(cfg)
    row = read_metrics(Path(cfg.output_dir) / "metrics.jsonl")[0]
    assert row["train/updates"] == 4
    assert row["loss/ratio_dev"] > 0  # pi_theta moved away from pi_old within the batch
    once = copy.deepcopy(small_config)
    train(make_config(**dict(once, steps=1, prompts_per_step=4, advantage="grpo", lr=5e-2,
                             output_dir=str(Path(cfg.output_dir).parent / "once"))))
    row1 = read_metrics(Path(cfg.output_dir).parent / "once" / "metrics.jsonl")[0]
    assert row1["train/updates"] == 1 and row1["loss/ratio_dev"] == 0.0


def test_cpu_training_uses_one_thread_unless_omp_num_threads_is_set(monkeypatch):
    from veristep.train.distributed import setup

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        setup("cpu")
        assert torch.get_num_threads() == 2  # the user's choice stands
        monkeypatch.delenv("OMP_NUM_THREADS")
        setup("cpu")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)

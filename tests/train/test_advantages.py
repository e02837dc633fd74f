"""The trainer's advantage dispatch: one gate decision serves the PRM and VeriGate's branch."""

from __future__ import annotations

import pytest
import torch
from veristep.train.advantages import compute_advantages, prm_groups
from veristep.train.config import ConfigError, make_config
from veristep.train.rewards import StepTensors

N, G, S, T = 3, 2, 2, 4


def _steps_only_on(groups: list[int]) -> StepTensors:
    """Step scores that differ inside every group; NaN (valid steps) on groups the PRM skipped.

    VeriGate raises on a NaN step score of a group it sends to the PRM branch, so any group it
    gates that the PRM did not score fails loudly instead of reading made-up scores.
    """
    scores = torch.full((N, G, S), float("nan"))
    for g in groups:
        scores[g] = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    mask = torch.ones(N, G, S, dtype=torch.bool)
    token_step = torch.tensor([0, 0, 1, 1]).expand(N, G, T).clone()
    return StepTensors(scores, mask, token_step, list(groups))


# group 0: every completion got 0.5 (collapsed, wrong only if 0.5 counts as wrong);
# group 1: every completion got 0 (collapsed, all wrong); group 2: mixed.
REWARDS = torch.tensor([[0.5, 0.5], [0.0, 0.0], [1.0, 0.0]])


@pytest.mark.parametrize(("reward_low", "expected"), [(0.0, [1]), (0.5, [0, 1]), (-0.5, [])])
def test_changing_the_wrong_level_moves_the_prm_and_the_branch_together(reward_low, expected):
    cfg = make_config(advantage="verigate", gate="all_wrong", reward_low=reward_low)
    groups = prm_groups(cfg, REWARDS)
    assert groups == expected
    token_mask = torch.ones(N, G, T)
    adv, metrics = compute_advantages(cfg, REWARDS, token_mask, _steps_only_on(groups))
    assert metrics["gate/gated_groups"] == len(expected)
    for g in range(N):
        carries_signal = bool((adv[g] != 0).any())
        # a gated group gets PRM step advantages, the mixed group its outcome advantage, a
        # collapsed group left out of the PRM branch nothing
        assert carries_signal == (g in expected or g == 2), (g, adv[g])


def test_the_wrong_level_must_stay_below_the_correct_reward():
    with pytest.raises(ConfigError, match="reward_low"):
        make_config(reward_low=1.0)
    with pytest.raises(ConfigError, match="reward_low"):
        make_config(reward_low=2.0, verifier="math,format", verifier_weights="1,1")
    assert make_config(reward_low=1.5, verifier="math,format", verifier_weights="1,1").reward_low == 1.5

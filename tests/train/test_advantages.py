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


# ---- unjudged completions (a checker time-out, a sandbox error, a bad reference) -------------


def _rule_steps(scores: list[list[float]], t: int = 6) -> StepTensors:
    """One group's step scores (every step valid), tokens spread evenly over the steps."""
    s = torch.tensor([scores])
    n_steps = s.shape[-1]
    token_step = (torch.arange(t) * n_steps // t).expand(1, s.shape[1], t).clone()
    return StepTensors(s, torch.ones_like(s, dtype=torch.bool), token_step, [0])


@pytest.mark.parametrize("method", ["grpo", "dr_grpo", "sign", "verigate"])
def test_an_unjudged_completion_is_out_of_its_group_and_gets_no_advantage(method):
    cfg = make_config(advantage=method)
    rewards = torch.tensor([[0.0, 1.0, 0.0, 0.0]])  # completion 0 timed out: 0 is no verdict
    judged = torch.tensor([[False, True, True, True]])
    mask = torch.ones(1, 4, 6)
    steps = _rule_steps([[1.0, 0.0]] * 4)
    adv, _ = compute_advantages(cfg, rewards, mask, steps, judged=judged)
    alone, _ = compute_advantages(cfg, rewards[:, 1:], mask[:, 1:], _rule_steps([[1.0, 0.0]] * 3))
    assert torch.equal(adv[0, 0], torch.zeros(6))
    torch.testing.assert_close(adv[:, 1:], alone)  # as if the group were its three judged ones


def test_an_unjudged_completion_does_not_send_its_group_to_the_prm():
    cfg = make_config(advantage="verigate", gate="any_collapsed")
    # judged: two correct -> collapsed (all correct) once the unjudged one is left out
    rewards = torch.tensor([[0.0, 1.0, 1.0]])
    judged = torch.tensor([[False, True, True]])
    assert prm_groups(cfg, rewards) == []  # read as a 0, the time-out made the group look mixed
    assert prm_groups(cfg, rewards, judged) == [0]
    all_wrong = make_config(advantage="verigate")
    none_judged = torch.zeros(1, 3, dtype=torch.bool)
    assert prm_groups(all_wrong, torch.zeros(1, 3)) == [0]
    assert prm_groups(all_wrong, torch.zeros(1, 3), none_judged) == []  # no verdict, no gate
    adv, _ = compute_advantages(all_wrong, torch.zeros(1, 3), torch.ones(1, 3, 6),
                                _rule_steps([[1.0, 0.0]] * 3), judged=none_judged)
    assert not adv.any()


def test_nonzero_frac_counts_coverage_not_information():
    """A PRM that scores every step 0.5 covers a gated group's tokens as fully as a real one."""
    cfg = make_config(advantage="verigate")
    rewards = torch.zeros(1, 2)
    mask = torch.ones(1, 2, 6)
    steps = StepTensors(torch.full((1, 2, 3), 0.5), torch.tensor([[[True] * 3, [True, True, False]]]),
                        torch.tensor([[[0, 0, 1, 1, 2, 2], [0, 0, 0, 1, 1, 1]]]), [0])
    _, constant = compute_advantages(cfg, rewards, mask, steps)
    steps.step_scores = torch.tensor([[[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]]])
    _, informative = compute_advantages(cfg, rewards, mask, steps)
    assert constant["adv/nonzero_frac"] == informative["adv/nonzero_frac"] == 1.0


@pytest.mark.parametrize("credit", ["suffix", "min", "progress", "delta"])
def test_the_credit_option_reaches_the_gated_groups(credit):
    from veristep import gating

    cfg = make_config(advantage="verigate", credit=credit, adv_std="population", adv_eps=1e-6)
    rewards = torch.tensor([[0.0, 0.0]])
    steps = _rule_steps([[1.0, 0.0, 1.0], [1.0, 1.0, 1.0]])
    adv, _ = compute_advantages(cfg, rewards, torch.ones(1, 2, 6), steps)
    table = gating.prm_step_advantages(steps.step_scores, steps.step_mask, std="population", credit=credit)
    expected = gating.steps_to_tokens(table, steps.token_step)
    assert torch.allclose(adv, expected.float())
    if credit == "progress":  # only the slip (step 1 of completion 0: tokens 2-3) is blamed
        assert adv[0].tolist() == [[0.0, 0.0, -1.0, -1.0, 0.0, 0.0], [0.0] * 6]
    if credit == "delta":  # V_0 = 1 (both first steps score 1): the slip -1, the recovery after it +1
        assert adv[0].tolist() == [[0.0, 0.0, -1.0, -1.0, 1.0, 1.0], [0.0] * 6]

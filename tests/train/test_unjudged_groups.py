"""An unjudged completion has no reward: DAPO's keep and the collapse monitors read each group on
its judged completions alone, as `compute_advantages` trains it."""

from __future__ import annotations

import torch
from veristep.train.monitors import judged_groups
from veristep.train.sampling import informative_groups

from veristep import gating

REWARDS = torch.tensor([
    [1.0, 1.0, 1.0, 0.0],  # the 0 is a time-out: collapsed, all right
    [1.0, 0.0, 1.0, 0.0],  # judged ones mixed
    [0.0, 0.0, 0.0, 0.0],  # nothing judged
    [1.0, 0.0, 0.0, 0.0],  # one judged completion: nothing to compare
    [1.0, 0.0, 1.0, 1.0],  # all judged, mixed
])
JUDGED = torch.tensor([
    [True, True, True, False],
    [True, True, False, False],
    [False, False, False, False],
    [True, False, False, False],
    [True, True, True, True],
])


def test_dapo_keeps_only_groups_whose_judged_rewards_differ():
    # A group [1, 1, 1, time-out] was kept as informative and then trained with zero advantage.
    assert informative_groups(REWARDS, JUDGED).tolist() == [False, True, False, False, True]
    assert informative_groups(REWARDS, torch.ones_like(JUDGED)).tolist() == [True, True, False, True, True]


def test_collapse_monitors_read_the_judged_completions():
    view = judged_groups(REWARDS, JUDGED)
    assert view.tolist() == [[1.0] * 4, [1.0, 0.0, 1.0, 1.0], [1.0] * 4, [1.0, 0.0, 1.0, 1.0]]
    metrics = gating.collapse_metrics(view, 0.0, 0.0, 1.0)
    # collapsed: groups 0 and 3 (one judged value) of the four with a verdict; both all right
    assert float(metrics["acr"]) == 0.5 and float(metrics["all_correct_rate"]) == 0.5
    assert float(metrics["all_wrong_rate"]) == 0.0
    assert torch.equal(judged_groups(REWARDS, torch.ones_like(JUDGED)), REWARDS)

"""PRM-as-outcome aggregation against the reference."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from veristep.gating import outcome_advantages, prm_as_outcome_rewards
from veristep.gating import spec_loops as ref

rows = st.lists(st.lists(st.floats(0.0, 1.0), max_size=5), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None)
@given(ragged=rows, agg=st.sampled_from(["min", "prod", "mean", "last"]), extra=st.integers(0, 2))
def test_matches_reference(ragged, agg, extra):
    s = max(len(r) for r in ragged) + extra
    scores = torch.full((1, len(ragged), s), float("nan"), dtype=torch.float64)
    mask = torch.zeros(scores.shape, dtype=torch.bool)
    for i, row in enumerate(ragged):
        scores[0, i, : len(row)] = torch.tensor(row, dtype=torch.float64)
        mask[0, i, : len(row)] = True
    out = prm_as_outcome_rewards(scores, mask, agg, empty=-1.0)
    assert out.shape == (1, len(ragged))
    assert out[0].tolist() == pytest.approx([ref.prm_as_outcome(r, agg, -1.0) for r in ragged])


def test_feeds_outcome_advantages_for_an_all_wrong_group():
    scores = torch.tensor([[[0.9, 0.5, 0.1], [0.8, 0.2, 0.0]]])
    mask = torch.tensor([[[True, True, True], [True, True, False]]])
    rewards = prm_as_outcome_rewards(scores, mask, "min")
    torch.testing.assert_close(rewards, torch.tensor([[0.1, 0.2]]))
    assert (outcome_advantages(rewards, "grpo").sign() == torch.tensor([[-1.0, 1.0]])).all()


def test_bad_configuration():
    with pytest.raises(ValueError, match="agg='max' is not one of"):
        prm_as_outcome_rewards(torch.zeros(1, 2, 3), torch.ones(1, 2, 3, dtype=torch.bool), "max")
    with pytest.raises(ValueError, match="step_mask shape"):
        prm_as_outcome_rewards(torch.zeros(1, 2, 3), torch.ones(1, 2, 2, dtype=torch.bool))

"""Collapse monitors against the reference, and the closed form under i.i.d. binary rewards."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from veristep.gating import collapse_mask, collapse_metrics, collapse_stats
from veristep.gating import spec_loops as ref

value = st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(-1.0, 2.0, allow_nan=False))


@st.composite
def batches(draw):
    n, g = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    return [[draw(value)] * g if draw(st.booleans()) else [draw(value) for _ in range(g)]
            for _ in range(n)]


@settings(max_examples=40, deadline=None)
@given(groups=batches(), tau=st.sampled_from([0.0, 0.05, 0.3]))
def test_matches_reference(groups, tau):
    rewards = torch.tensor(groups, dtype=torch.float64)
    assert collapse_mask(rewards, tau).tolist() == [ref.collapsed(g, tau) for g in groups]
    actual, expected = collapse_metrics(rewards, tau), ref.collapse_metrics(groups, tau)
    assert actual.keys() == expected.keys()
    for key, v in expected.items():
        assert actual[key] == pytest.approx(v, abs=1e-12), key


def test_keys_and_plain_floats():
    m = collapse_metrics(torch.tensor([[1.0, 0.0], [1.0, 1.0]]))
    assert {"acr", "all_wrong_rate", "all_correct_rate", "reward_mean", "reward_std"} <= m.keys()
    assert all(type(v) is float for v in m.values())
    assert m["pass_at_1"] == 0.75 and m["pass_at_g"] == 1.0
    assert all(t.dim() == 0 for t in collapse_stats(torch.ones(3, 2)).values())


def test_round_off_counts_as_equal():
    # 0.1 + 0.2 != 0.3 in binary, but the group carries no signal.
    r = torch.tensor([[0.1 + 0.2, 0.3, 0.3]], dtype=torch.float64)
    assert collapse_mask(r).tolist() == [True]


def test_custom_levels():
    r = torch.tensor([[-1.0, -1.0], [2.0, 2.0], [-1.0, 2.0]])
    m = collapse_metrics(r, low=-1.0, high=2.0)
    assert (m["all_wrong_rate"], m["all_correct_rate"]) == (pytest.approx(1 / 3), pytest.approx(1 / 3))
    with pytest.raises(ValueError, match="need high > low"):
        collapse_metrics(r, low=1.0, high=1.0)


def test_empty_batch_is_nan():
    m = collapse_metrics(torch.zeros(0, 4))
    assert all(math.isnan(v) for v in m.values())


def test_iid_binary_acr_matches_closed_form():
    """P(collapse) = p^G + (1 - p)^G for i.i.d. Bernoulli(p) rewards (20k groups, 5 sigma)."""
    gen = torch.Generator().manual_seed(0)
    n = 20000
    for p in (0.1, 0.5, 0.8):
        for g in (2, 8):
            rewards = (torch.rand(n, g, generator=gen) < p).float()
            expected = p**g + (1 - p) ** g
            sigma = math.sqrt(expected * (1 - expected) / n)
            assert abs(collapse_metrics(rewards)["acr"] - expected) < 5 * sigma + 1e-9

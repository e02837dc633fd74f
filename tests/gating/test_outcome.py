"""Outcome-only estimators against the plain-Python reference, plus their properties."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from veristep.gating import collapse_mask, outcome_advantages
from veristep.gating import spec_loops as ref

LEVELS = [0.0, 0.25, 0.5, 1.0]


@st.composite
def reward_batches(draw, binary: bool = False, max_g: int = 6):
    """[N][G] rewards with plenty of collapsed groups (all wrong, all right, all equal)."""
    n = draw(st.integers(1, 5))
    g = draw(st.integers(1, max_g))
    value = st.sampled_from([0.0, 1.0]) if binary else st.one_of(
        st.sampled_from(LEVELS), st.floats(-2.0, 3.0, allow_nan=False, width=32)
    )
    groups = []
    for _ in range(n):
        if draw(st.booleans()):
            groups.append([draw(value)] * g)  # collapsed
        else:
            groups.append([draw(value) for _ in range(g)])
    return groups


SETTINGS = settings(max_examples=40, deadline=None)


@SETTINGS
@given(
    groups=reward_batches(),
    method=st.sampled_from(["grpo", "dr_grpo", "wapo", "sign", "avspo"]),
    std=st.sampled_from(["sample", "population"]),
    eps=st.sampled_from([0.0, 1e-6, 1e-4]),
)
def test_matches_reference(groups, method, std, eps):
    rewards = torch.tensor(groups, dtype=torch.float64)
    ddof = 1 if std == "sample" else 0
    actual = outcome_advantages(rewards, method, std=std, eps=eps)
    expected = torch.tensor(ref.outcome_advantages(groups, method, ddof, eps), dtype=torch.float64)
    assert actual.shape == rewards.shape
    # eps = 0 with a near-flat group can be huge; compare relative to scale.
    torch.testing.assert_close(actual, expected, rtol=1e-9, atol=1e-9)


@SETTINGS
@given(groups=reward_batches(), value=st.sampled_from([0.5, 0.0, 1.0, 0.3]))
def test_avspo_fixed_and_random_virtual_values(groups, value):
    rewards = torch.tensor(groups, dtype=torch.float64)
    fixed = outcome_advantages(rewards, "avspo", virtual="fixed", virtual_value=value)
    expected = ref.outcome_advantages(groups, "avspo", 1, 1e-4, virtual=[value] * len(groups))
    torch.testing.assert_close(fixed, torch.tensor(expected, dtype=torch.float64))
    gen = torch.Generator().manual_seed(7)
    rand = outcome_advantages(rewards, "avspo", virtual="random", generator=gen)
    drawn = torch.rand(len(groups), generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    expected = ref.outcome_advantages(groups, "avspo", 1, 1e-4, virtual=drawn.tolist())
    torch.testing.assert_close(rand, torch.tensor(expected, dtype=torch.float64))


@SETTINGS
@given(groups=reward_batches(binary=True), std=st.sampled_from(["sample", "population"]))
def test_avspo_virtual_sample_gets_nothing(groups, std):
    """Only the G real samples get advantages; the virtual one's share is dropped, not spread."""
    rewards = torch.tensor(groups, dtype=torch.float64)
    adv = outcome_advantages(rewards, "avspo", std=std, eps=0.0)
    assert adv.shape == rewards.shape
    collapsed = collapse_mask(rewards)
    g = rewards.shape[1]
    for n in range(rewards.shape[0]):
        if not collapsed[n]:
            continue
        virtual = 1.0 - rewards[n, 0].item()
        augmented = torch.cat([rewards[n], torch.tensor([virtual], dtype=torch.float64)])
        full = outcome_advantages(augmented[None], "grpo", std=std, eps=0.0)[0]
        # The real samples get exactly their share of the augmented group ...
        torch.testing.assert_close(adv[n], full[:g])
        # ... which no longer sums to zero: the virtual sample's term is left out.
        assert adv[n].sum().item() == pytest.approx(-full[g].item(), abs=1e-9)
        assert full[g].item() != 0.0


@SETTINGS
@given(groups=reward_batches())
def test_wapo_keeps_only_winners(groups):
    rewards = torch.tensor(groups, dtype=torch.float64)
    wapo = outcome_advantages(rewards, "wapo")
    dr = outcome_advantages(rewards, "dr_grpo")
    assert (wapo >= 0).all()
    torch.testing.assert_close(wapo, torch.where(dr > 0, dr, 0.0))
    no_winner = ~(dr > 0).any(-1)
    assert (wapo[no_winner] == 0).all()
    assert (wapo[collapse_mask(rewards)] == 0).all()


@SETTINGS
@given(groups=reward_batches(binary=True), repeats=st.integers(1, 4))
def test_sign_does_not_depend_on_group_size(groups, repeats):
    rewards = torch.tensor(groups, dtype=torch.float64)
    base = outcome_advantages(rewards, "sign")
    bigger = outcome_advantages(rewards.repeat(1, repeats), "sign")
    torch.testing.assert_close(bigger, base.repeat(1, repeats))
    # One sample at a time gives the same numbers too.
    torch.testing.assert_close(outcome_advantages(rewards.reshape(-1, 1), "sign").reshape(base.shape), base)
    assert set(base.unique().tolist()) <= {-1.0, 1.0}


@SETTINGS
@given(groups=reward_batches(), method=st.sampled_from(["grpo", "dr_grpo", "wapo", "avspo"]))
def test_float32_matches_float64(groups, method):
    r64 = torch.tensor(groups, dtype=torch.float64)
    a64 = outcome_advantages(r64, method)
    a32 = outcome_advantages(r64.float(), method)
    assert a32.dtype == torch.float32
    torch.testing.assert_close(a32.double(), a64, rtol=1e-4, atol=1e-4)


def test_grpo_single_sample_group_is_zero_not_nan():
    adv = outcome_advantages(torch.tensor([[1.0], [0.0]]), "grpo", std="sample")
    assert adv.tolist() == [[0.0], [0.0]]


def test_integer_and_bool_rewards_accepted():
    as_int = outcome_advantages(torch.tensor([[1, 0, 0, 0]]), "grpo")
    as_bool = outcome_advantages(torch.tensor([[True, False, False, False]]), "grpo")
    assert as_int.dtype == torch.get_default_dtype()
    torch.testing.assert_close(as_int, as_bool)


def test_avspo_acr_threshold_applies_only_to_collapsed_batches():
    rewards = torch.tensor([[0.0, 0, 0, 0], [1, 0, 1, 0], [1, 0, 0, 1]])  # ACR 1/3
    below = outcome_advantages(rewards, "avspo", acr_threshold=0.5)
    above = outcome_advantages(rewards, "avspo", acr_threshold=0.2)
    assert below[0].tolist() == [0.0] * 4
    assert (above[0] < 0).all()
    torch.testing.assert_close(below[1:], above[1:])


def test_empty_batch():
    assert outcome_advantages(torch.zeros(0, 4), "grpo").shape == (0, 4)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"method": "ppo"}, "method='ppo' is not one of"),
        ({"std": "unbiased"}, "std='unbiased' is not one of"),
        ({"eps": -1.0}, "eps must be a finite number >= 0"),
        ({"method": "grpo", "virtual": "fixed"}, "does not take option"),
        ({"method": "avspo", "virtual": "half"}, "virtual='half' is not one of"),
        ({"method": "sign", "low": 1.0, "high": 0.0}, "need high > low"),
    ],
)
def test_bad_configuration_raises(kwargs, message):
    with pytest.raises(ValueError, match=message):
        outcome_advantages(torch.zeros(2, 4), **kwargs)


@pytest.mark.parametrize(
    "rewards, message",
    [
        (torch.zeros(4), r"rewards must have shape \[N, G\], got \(4,\)"),
        (torch.zeros(2, 3, 4), r"got \(2, 3, 4\)"),
        (torch.zeros(2, 0), "at least 1 along G"),
        (torch.tensor([[0.0, float("nan")]]), "NaN or infinite"),
    ],
)
def test_bad_shapes_raise(rewards, message):
    with pytest.raises(ValueError, match=message):
        outcome_advantages(rewards)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_gives_the_float32_advantages(dtype):
    # A group's sum of squares overflowed float16 to inf and every advantage came back 0.
    import veristep.gating as g

    torch.manual_seed(0)
    scores, mask = torch.rand(1, 64, 40), torch.ones(1, 64, 40, dtype=torch.bool)
    want = g.prm_step_advantages(scores, mask)
    got = g.prm_step_advantages(scores.to(dtype), mask)
    assert got.dtype == dtype and torch.allclose(got.float(), want, atol=0.05, rtol=0.02)
    rewards = torch.tensor([[0.0, 300.0, 0.0, 0.0]])
    assert torch.allclose(outcome_advantages(rewards.to(dtype), "grpo").float(),
                          outcome_advantages(rewards, "grpo"), atol=0.01)

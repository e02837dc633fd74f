"""DAPO pieces: dynamic sampling filter, overlong shaping, clip-higher surrogate."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from veristep.gating import clipped_surrogate, dynamic_sampling_keep, overlong_penalty
from veristep.gating import spec_loops as ref


def test_dynamic_sampling_drops_all_right_and_all_wrong():
    r = torch.tensor([[0.0, 0, 0], [1, 1, 1], [1, 0, 0], [0.5, 0.5, 0.5], [0.2, 0.2, 0.9]])
    assert dynamic_sampling_keep(r).tolist() == [False, False, True, False, True]
    with pytest.raises(ValueError, match="G >= 2"):
        dynamic_sampling_keep(torch.zeros(3, 1))


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 3000), min_size=1, max_size=20),
    max_len=st.integers(1, 2000),
    data=st.data(),
)
def test_overlong_matches_reference(lengths, max_len, data):
    cache = data.draw(st.integers(1, max_len))
    out = overlong_penalty(torch.tensor(lengths), max_len, cache).tolist()
    assert out == pytest.approx([ref.overlong_penalty(n, max_len, cache) for n in lengths], abs=1e-6)
    assert all(-1.0 <= v <= 0.0 for v in out)


def test_overlong_accepts_lists_and_checks_config():
    assert overlong_penalty([10, 15, 20], 20, 10).tolist() == [0.0, -0.5, -1.0]
    with pytest.raises(ValueError, match="cache_len <= max_len"):
        overlong_penalty([1], 10, 20)


def test_clipped_surrogate_is_pessimistic_and_bounded():
    rho = torch.linspace(0.1, 3.0, 50)
    for a in (1.0, -1.0, 0.0):
        adv = torch.full_like(rho, a)
        obj = clipped_surrogate(rho, adv)
        assert (obj <= rho * adv + 1e-7).all()  # never more optimistic than the plain ratio
        if a > 0:
            assert obj.max() == pytest.approx(1.28)
        if a < 0:
            assert obj.max() == pytest.approx(-0.8)
    with pytest.raises(ValueError):
        clipped_surrogate(rho, rho, eps_low=1.5)

"""The clipped objective, k3 KL and loss aggregation on hand-computed cases."""

from __future__ import annotations

import pytest
import torch
from veristep.train.loss import aggregation_weights, clipped_policy_loss, k3_kl


def test_clip_higher_hand_computed_t13():
    # gating-spec T13: eps 0.2/0.28; rho 1.35 A +1 -> 1.28 (no grad); rho 0.70 A -1 -> -0.80
    # (no grad); rho 1.10 A +1 -> 1.10 (grad).
    old = torch.zeros(3, 1)
    logp = torch.log(torch.tensor([[1.35], [0.70], [1.10]])).requires_grad_(True)
    adv = torch.tensor([[1.0], [-1.0], [1.0]])
    mask = torch.ones(3, 1)
    objectives = []
    for i in range(3):
        terms = clipped_policy_loss(logp[i : i + 1], old[i : i + 1], adv[i : i + 1], mask[i : i + 1],
                                    torch.ones(1, 1), 0.2, 0.28)
        objectives.append(-terms.policy)
    assert objectives == pytest.approx([1.28, -0.80, 1.10], abs=1e-6)
    terms = clipped_policy_loss(logp, old, adv, mask, torch.ones(3, 1), 0.2, 0.28)
    terms.loss.backward()
    assert logp.grad[0, 0] == 0 and logp.grad[1, 0] == 0
    assert logp.grad[2, 0] == pytest.approx(-1.10, abs=1e-6)  # d(-rho A)/dlogp = -rho A
    assert terms.clipped_high == 1 and terms.clipped_low == 1 and terms.tokens == 3


def test_clipping_does_not_touch_the_other_side():
    # rho 1.35 with A -1 is NOT clipped (min picks the unclipped, more pessimistic term).
    logp = torch.log(torch.tensor([[1.35]])).requires_grad_(True)
    terms = clipped_policy_loss(logp, torch.zeros(1, 1), torch.tensor([[-1.0]]), torch.ones(1, 1),
                                torch.ones(1, 1), 0.2, 0.28)
    assert -terms.policy == pytest.approx(-1.35)
    terms.loss.backward()
    assert logp.grad[0, 0] == pytest.approx(1.35)
    assert terms.clipped_high == 0 and terms.clipped_low == 0


def test_k3_kl_is_zero_at_equality_and_positive_elsewhere():
    logp = torch.tensor([[-1.0, -2.0, -0.5]])
    assert torch.all(k3_kl(logp, logp) == 0)
    ref = torch.tensor([[-1.5, -1.0, -0.5]])
    kl = k3_kl(logp, ref)
    assert torch.all(kl[:, :2] > 0) and kl[0, 2] == 0
    d = -0.5
    assert float(kl[0, 0]) == pytest.approx(torch.exp(torch.tensor(d)).item() - d - 1)


def test_aggregation_weights():
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    tok = aggregation_weights(mask, "token-mean", total_tokens=4, total_seqs=2)
    assert torch.allclose(tok, mask / 4)
    seq = aggregation_weights(mask, "sequence-mean", total_tokens=4, total_seqs=2)
    assert torch.allclose(seq.sum(-1), torch.tensor([0.5, 0.5]))
    const = aggregation_weights(mask, "constant", total_tokens=4, total_seqs=2, constant=8.0)
    assert torch.allclose(const, mask / 16)
    with pytest.raises(ValueError):
        aggregation_weights(mask, "constant", 4, 2)
    with pytest.raises(ValueError):
        aggregation_weights(mask, "median", 4, 2)


def test_winner_constant_is_the_constant_formula_over_the_counted_sequences():
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    winners = aggregation_weights(mask, "winner-constant", total_tokens=3, total_seqs=1, constant=4.0)
    assert torch.allclose(winners, mask / 4)
    assert torch.equal(winners, aggregation_weights(mask, "constant", 3, 1, constant=4.0))
    with pytest.raises(ValueError, match="winner-constant"):
        aggregation_weights(mask, "winner-constant", 3, 1)

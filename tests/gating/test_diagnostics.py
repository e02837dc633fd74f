"""The credit diagnostic: step kinds and which step the advantages blame (gating/diagnostics.py)."""

from __future__ import annotations

import pytest
import torch
from veristep.gating import credit_diagnostics, prm_step_advantages, step_kinds, steps_to_tokens
from veristep.gating import spec_loops as ref

# One all-wrong group: o1 slips at step 2 (step 3 right from the wrong value is wrong to the
# oracle), answer wrong; o2 right steps, miscopied answer; o3 no answer line, its only step wrong.
CORRECT = [[True, False, False, False], [True, True, False], [False]]
ANSWER = [[False, False, False, True], [False, False, True], [False]]
RULE = [[1.0, 0.0, 1.0, 0.5], [1.0, 1.0, 0.5], [0.0]]
TOKENS = [[0, 0, 1, 2, 3, 3], [0, 1, 1, 2], [0, 0]]


def _pad(lists, fill, dtype):
    s = max(len(r) for r in lists)
    return torch.tensor([[list(r) + [fill] * (s - len(r)) for r in lists]], dtype=dtype)


def _tensors():
    _, scores, mask, token_step = ref.pad_case([[0.0] * 3], [RULE], [TOKENS], dtype=torch.float64)
    correct = _pad(CORRECT, False, torch.bool)
    answer = _pad(ANSWER, False, torch.bool)
    return scores, mask, token_step, correct, answer


def test_step_kinds():
    _, mask, _, correct, answer = _tensors()
    assert step_kinds(correct, answer, mask)[0].tolist() == [[0, 1, 2, 3], [0, 0, 1, -1], [1, -1, -1, -1]]


@pytest.mark.parametrize(("credit", "blamed", "means"), [
    # progress on the rule scores: o1's slip -1, o2's miscopied answer line (rule: neutral 0.5) -0.5, o3 -1
    ("progress", 1.0, {"on_track": 0.0, "first_error": (-1.0 - 0.5 - 1.0) / 3, "after_error": 0.0,
                       "answer": 0.0}),
])
def test_hand_computed_progress(credit, blamed, means):
    scores, mask, token_step, correct, answer = _tensors()
    adv = steps_to_tokens(prm_step_advantages(scores, mask, credit=credit), token_step)
    out = credit_diagnostics(adv, token_step, correct, answer, mask, torch.ones(1, 3, dtype=torch.bool))
    assert out["gate/first_error_responses"] == 3
    assert out["gate/first_error_blamed"] == pytest.approx(blamed)
    for kind, value in means.items():
        assert out[f"credit/adv_{kind}"] == pytest.approx(value), kind


def test_suffix_credit_does_not_blame_this_slip_and_rows_select_responses():
    scores, mask, token_step, correct, answer = _tensors()
    # suffix sums [2.5, 1.5, 1.5, 0.5], [2.5, 1.5, 0.5], [0]: mean 10.5/8, so the slip's 1.5 is above it
    adv = steps_to_tokens(prm_step_advantages(scores, mask, credit="suffix"), token_step)
    rows = torch.tensor([[True, False, False]])
    out = credit_diagnostics(adv, token_step, correct, answer, mask, rows)
    assert out["gate/first_error_responses"] == 1
    assert out["gate/first_error_blamed"] == 0.0
    assert out["credit/adv_after_error"] == pytest.approx(float(adv[0, 0, 3]))
    none = credit_diagnostics(adv, token_step, correct, answer, mask, torch.zeros(1, 3, dtype=torch.bool))
    assert none["gate/first_error_blamed"] is None and none["gate/first_error_responses"] == 0
    assert none["credit/adv_on_track"] is None


def test_a_step_mean_is_over_its_tokens():
    # one response, two steps; step 0 has tokens with advantages 1 and -3 -> mean -1 (blamed)
    adv = torch.tensor([[[1.0, -3.0, 2.0]]])
    token_step = torch.tensor([[[0, 0, 1]]])
    out = credit_diagnostics(adv, token_step, torch.tensor([[[False, False]]]), torch.tensor([[[False, True]]]),
                             torch.tensor([[[True, True]]]), torch.tensor([[True]]))
    assert out["credit/adv_first_error"] == pytest.approx(-1.0)
    assert out["credit/adv_answer"] == pytest.approx(2.0)
    assert out["gate/first_error_blamed"] == 1.0


def test_shapes_are_checked():
    with pytest.raises(ValueError, match="token_step"):
        credit_diagnostics(torch.zeros(1, 1, 3), torch.zeros(1, 1, 2, dtype=torch.long),
                           torch.ones(1, 1, 1, dtype=torch.bool), torch.zeros(1, 1, 1, dtype=torch.bool),
                           torch.ones(1, 1, 1, dtype=torch.bool), torch.ones(1, 1, dtype=torch.bool))

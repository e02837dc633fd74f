"""Hand-computed cases T1-T22 of docs/gating-spec.md, for the tensor code and the reference."""

from __future__ import annotations

import math

import pytest
import torch
from veristep.gating import (
    clipped_surrogate,
    collapse_mask,
    collapse_metrics,
    dynamic_sampling_keep,
    future_cumulated_rewards,
    outcome_advantages,
    overlong_penalty,
    prm_as_outcome_rewards,
    prm_step_advantages,
    process_grpo_advantages,
    token_step_from_offsets,
    verigate_advantages,
)
from veristep.gating import spec_loops as ref
from veristep.train.loss import aggregation_weights

T7_STEPS = [[0.9, 0.5, 0.1], [0.8, 0.2]]


def close(actual, expected, tol=1e-4):
    """Elementwise comparison of a tensor / nested list with a nested list of numbers."""
    a = actual.tolist() if isinstance(actual, torch.Tensor) else actual
    assert torch.allclose(
        torch.tensor(a, dtype=torch.float64), torch.tensor(expected, dtype=torch.float64),
        atol=tol, rtol=0,
    ), f"{a} != {expected}"


def test_t1_grpo_sample_std():
    r = torch.tensor([[1.0, 0, 0, 0]])
    expected = [[1.4997, -0.4999, -0.4999, -0.4999]]
    close(outcome_advantages(r, "grpo", std="sample", eps=1e-4), expected)
    close(ref.outcome_advantages([[1.0, 0, 0, 0]], "grpo", ddof=1, eps=1e-4), expected)


def test_t2_grpo_population_std():
    r = torch.tensor([[1.0, 0, 0, 0]])
    expected = [[1.7321, -0.5774, -0.5774, -0.5774]]
    close(outcome_advantages(r, "grpo", std="population", eps=1e-6), expected)
    close(ref.outcome_advantages([[1.0, 0, 0, 0]], "grpo", ddof=0, eps=1e-6), expected)


def test_t3_acr():
    groups = [[0, 0, 0, 0], [1, 1, 1, 1], [1, 0, 1, 0], [0.5, 0.5, 0.5, 0.5]]
    for m in (collapse_metrics(torch.tensor(groups, dtype=torch.float32)),
              ref.collapse_metrics(groups)):
        assert m["acr"] == pytest.approx(0.75)
        assert m["all_wrong_rate"] == pytest.approx(0.25)
        assert m["all_correct_rate"] == pytest.approx(0.25)


def test_t4_avspo_released_rule():
    r = torch.tensor([[0.0] * 4, [1.0] * 4])
    adv = outcome_advantages(r, "avspo", std="sample", eps=1e-4)
    close(adv, [[-0.44711] * 4, [0.44711] * 4], tol=1e-5)
    close(ref.outcome_advantages(r.tolist(), "avspo", ddof=1, eps=1e-4), adv.tolist(), tol=1e-6)
    # Without eps it is exactly -+1/sqrt(5).
    close(outcome_advantages(r, "avspo", eps=0.0), [[-1 / math.sqrt(5)] * 4, [1 / math.sqrt(5)] * 4], 1e-6)


def test_t5_avspo_population_no_eps():
    adv = outcome_advantages(torch.zeros(1, 4), "avspo", std="population", eps=0.0)
    close(adv, [[-0.5] * 4], tol=1e-6)


def test_t6_avspo_mixed_group_is_grpo():
    r = torch.tensor([[1.0, 0, 1, 0], [0.3, 0.9, 0.1, 0.2]])
    for std in ("sample", "population"):
        for virtual in ("opposite", "fixed", "random"):
            assert torch.equal(
                outcome_advantages(r, "avspo", std=std, virtual=virtual),
                outcome_advantages(r, "grpo", std=std),
            )


def _t7_tensors(rewards):
    rewards_, scores, mask, token_step = ref.pad_case(
        [rewards], [T7_STEPS], [[[0, 1, 2], [0, 1]]], dtype=torch.float64
    )
    return rewards_, scores, mask, token_step


def test_t7_verigate_prm_branch_population():
    rewards, scores, mask, token_step = _t7_tensors([0.0, 0.0])
    close(future_cumulated_rewards(scores, mask)[0], [[1.5, 0.6, 0.1], [1.0, 0.2, 0.0]])
    adv, metrics = verigate_advantages(rewards, scores, mask, token_step, std="population")
    close(adv[0], [[1.5793, -0.1541, -1.1170], [0.6163, -0.9244, 0.0]])
    assert metrics["gate/gated_groups"] == 1
    assert metrics["gate/steps_per_gated_response"] == pytest.approx(2.5)
    r_adv = ref.prm_step_advantages(T7_STEPS, ddof=0, eps=1e-6)
    close(r_adv[0], [1.5793, -0.1541, -1.1170])
    close(r_adv[1], [0.6163, -0.9244])


def test_t7b_verigate_prm_branch_sample():
    rewards, scores, mask, token_step = _t7_tensors([0.0, 0.0])
    adv, _ = verigate_advantages(rewards, scores, mask, token_step, std="sample")
    close(adv[0], [[1.4125, -0.1378, -0.9991], [0.5512, -0.8268, 0.0]])
    r_adv = ref.prm_step_advantages(T7_STEPS, ddof=1, eps=1e-6)
    close(r_adv[0] + r_adv[1], [1.4125, -0.1378, -0.9991, 0.5512, -0.8268])


def test_t8_deepseekmath_process_grpo_differs_from_verigate():
    _, scores, mask, _ = _t7_tensors([0.0, 0.0])
    adv = process_grpo_advantages(scores, mask, std="population")
    close(adv[0], [[0.0, -1.2649, -1.2649], [0.0, -0.9487, 0.0]])
    r_adv = ref.process_grpo(T7_STEPS, ddof=0, eps=1e-6)
    close(r_adv[0] + r_adv[1], [0.0, -1.2649, -1.2649, 0.0, -0.9487])


def test_t9_mixed_group_ignores_prm():
    rewards, scores, mask, token_step = _t7_tensors([1.0, 0.0])
    adv, metrics = verigate_advantages(rewards, scores, mask, token_step, std="population")
    grpo = outcome_advantages(rewards, "grpo", std="population", eps=1e-6)
    close(adv[0], [[grpo[0, 0].item()] * 3, [grpo[0, 1].item()] * 2 + [0.0]])
    assert metrics["gate/gated_groups"] == 0
    # The PRM scores are not even read for a mixed group: poisoning them changes nothing.
    adv_nan, _ = verigate_advantages(rewards, scores * torch.nan, mask, token_step)
    assert torch.equal(adv, adv_nan)


def test_t10_sign():
    r = torch.tensor([[1.0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]])
    assert outcome_advantages(r, "sign").tolist() == [[1, -1, -1, -1], [-1] * 4, [1] * 4]
    assert ref.outcome_advantages(r.tolist(), "sign", 1, 1e-4) == [[1, -1, -1, -1], [-1] * 4, [1] * 4]


def test_t11_dr_grpo():
    r = torch.tensor([[1.0, 0, 0, 0]])
    close(outcome_advantages(r, "dr_grpo"), [[0.75, -0.25, -0.25, -0.25]], tol=1e-7)


def test_t12_dapo_overlong():
    lengths = [16384, 16385, 18432, 20480, 20481]
    expected = [0.0, -0.000244, -0.5, -1.0, -1.0]
    close(overlong_penalty(torch.tensor(lengths), 20480, 4096), expected, tol=1e-6)
    close([ref.overlong_penalty(n, 20480, 4096) for n in lengths], expected, tol=1e-6)


def test_t13_clip_higher():
    rho = torch.tensor([1.35, 0.70, 1.10], requires_grad=True)
    adv = torch.tensor([1.0, -1.0, 1.0])
    obj = clipped_surrogate(rho, adv, eps_low=0.2, eps_high=0.28)
    close(obj.detach(), [1.28, -0.80, 1.10], tol=1e-6)
    obj.sum().backward()
    # Clipped terms pass no gradient to the ratio; the unclipped one passes A.
    close(rho.grad, [0.0, 0.0, 1.0], tol=0)


# --- T14-T22: the further cases of docs/gating-spec.md section 11 ---------------------------


def test_t14_wapo():
    r = torch.tensor([[1.0, 0, 0, 0], [1, 1, 0, 0]])
    expected = [[0.75, 0, 0, 0], [0.5, 0.5, 0, 0]]
    close(outcome_advantages(r, "wapo"), expected, tol=1e-7)
    close(ref.outcome_advantages(r.tolist(), "wapo", ddof=1, eps=1e-4), expected, tol=1e-7)


def test_t15_avspo_fixed_virtual_value():
    r = torch.tensor([[0.0] * 4, [1.0] * 4, [0.5] * 4])
    adv = outcome_advantages(r, "avspo", std="population", eps=0.0, virtual="fixed",
                             virtual_value=0.5)
    close(adv, [[-0.5] * 4, [0.5] * 4, [0.0] * 4], tol=1e-6)


def test_t16_prm_as_outcome():
    _, scores, mask, _ = ref.pad_case([[0.0, 0.0, 0.0]], [T7_STEPS + [[]]], [[[0], [0], []]],
                                      dtype=torch.float64)
    expected = {"min": [0.1, 0.2, 0.0], "prod": [0.045, 0.16, 0.0], "mean": [0.5, 0.5, 0.0],
                "last": [0.1, 0.2, 0.0]}
    for agg, want in expected.items():
        close(prm_as_outcome_rewards(scores, mask, agg=agg)[0], want, tol=1e-9)
        close([ref.prm_as_outcome(row, agg) for row in T7_STEPS + [[]]], want, tol=1e-9)


def test_t17_centred_scores():
    adv = prm_step_advantages(*_t7_tensors([0.0, 0.0])[1:3], std="population", centre_scores=True)
    close(adv[0], [[1.2002, -0.9820, -0.9820], [1.2002, -0.4364, 0.0]])
    r_adv = ref.prm_step_advantages(T7_STEPS, ddof=0, eps=1e-6, centre=True)
    close(r_adv[0] + r_adv[1], [1.2002, -0.9820, -0.9820, 1.2002, -0.4364])


def test_t18_uninformative_prm_still_gives_every_token_an_advantage():
    steps = [[0.5, 0.5, 0.5], [0.5, 0.5]]
    _, scores, mask, _ = ref.pad_case([[0.0, 0.0]], [steps], [[[0], [0]]], dtype=torch.float64)
    close(prm_step_advantages(scores, mask, std="population")[0],
          [[1.6036, 0.2673, -1.0690], [0.2673, -1.0690, 0.0]])
    close(prm_step_advantages(scores, mask, std="population", centre_scores=True)[0],
          [[0.0] * 3] * 2, tol=0)


def test_t19_collapse_with_tau_and_dynamic_sampling():
    r = torch.tensor([[0.5, 0.6], [0.5, 0.7], [0.3, 0.3]], dtype=torch.float64)
    assert collapse_mask(r, tau=0.05).tolist() == [True, False, True]
    keep = dynamic_sampling_keep(torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0]]))
    assert keep.tolist() == [False, True, False]


def test_t20_token_to_step_map():
    token_starts = torch.tensor([[[0, 2, 4, 6, 7, 9, 11, 14, 15, 22, 0, 0, 0]]])
    token_mask = torch.tensor([[[True] * 11 + [False] * 2]])
    step_starts = torch.tensor([[[0, 7, 15]]])
    step_mask = torch.ones(1, 1, 3, dtype=torch.bool)
    token_step = token_step_from_offsets(token_starts, token_mask, step_starts, step_mask)
    assert token_step[0, 0].tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, -1, -1]


def test_t21_loss_aggregation_weights():
    mask = torch.tensor([[1.0, 1, 0, 0], [1, 1, 1, 1]])
    close(aggregation_weights(mask, "token-mean", 6, 2), [[1 / 6] * 2 + [0] * 2, [1 / 6] * 4], 1e-7)
    close(aggregation_weights(mask, "sequence-mean", 6, 2), [[0.25] * 2 + [0] * 2, [0.125] * 4], 1e-7)
    close(aggregation_weights(mask, "constant", 6, 2, constant=4), [[0.125] * 2 + [0] * 2, [0.125] * 4], 1e-7)


def test_t22_verigate_batch():
    nan = float("nan")
    rewards = torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    scores = torch.tensor([[[0.9, 0.5, 0.1], [0.8, 0.2, nan]], [[nan] * 3] * 2, [[0.3] * 3] * 2],
                          dtype=torch.float64)
    mask = torch.tensor([[[True] * 3, [True, True, False]], [[False] * 3] * 2, [[True] * 3] * 2])
    token_step = torch.tensor([[[0, 1, 2, 2], [0, 0, 1, -1]], [[0, 0, 0, -1], [0, 0, -1, -1]],
                               [[0, 1, 2, 2], [0, 1, 2, -1]]])
    adv, metrics = verigate_advantages(rewards, scores, mask, token_step, std="population")
    close(adv[0], [[1.5793, -0.1541, -1.1170, -1.1170], [0.6163, 0.6163, -0.9244, 0.0]])
    a = 0.999998
    close(adv[1], [[a, a, a, 0.0], [-a, -a, 0.0, 0.0]], tol=1e-6)
    close(adv[2], [[0.0] * 4] * 2, tol=0)
    assert metrics["gate/gated_groups"] == 1
    assert metrics["gate/steps_per_gated_response"] == pytest.approx(2.5)
    assert metrics["adv/nonzero_frac"] == pytest.approx(12 / 19)
    assert metrics["gate/acr"] == pytest.approx(2 / 3)
    # Under any_collapsed the all-correct group goes to the PRM branch too.
    adv_any, _ = verigate_advantages(rewards, scores, mask, token_step, gate="any_collapsed",
                                     std="population")
    close(adv_any[2], [[1.2247, 0.0, -1.2247, -1.2247], [1.2247, 0.0, -1.2247, 0.0]])


# ---- credit forms (section 8): T23-T27

T23_STEPS = [[1.0, 0.0, 1.0, 0.5], [1.0, 1.0, 0.5]]  # o1 slips at step 2; answer lines neutral


def _credit(steps, credit, **kw):
    _, scores, mask, _ = ref.pad_case([[0.0] * len(steps)], [steps],
                                      [[list(range(len(r))) for r in steps]], dtype=torch.float64)
    return prm_step_advantages(scores, mask, std="population", credit=credit, **kw)[0], mask[0]


def _unpad(t, mask):
    return [[v for v, ok in zip(row, mrow, strict=True) if ok] for row, mrow in zip(t.tolist(), mask.tolist(), strict=True)]


@pytest.mark.parametrize(("credit", "expected"), [
    ("suffix", [[1.3229, 0.0, 0.0, -1.3229], [1.3229, 0.0, -1.3229]]),
    ("min", [[-1.5811, -1.5811, 0.6325, 0.6325], [0.6325, 0.6325, 0.6325]]),
    ("progress", [[0.0, -1.0, 0.0, 0.0], [0.0, 0.0, -0.5]]),
])
def test_t23_credit_forms_on_a_first_error(credit, expected):
    adv, mask = _credit(T23_STEPS, credit)
    close(_unpad(adv, mask)[0], expected[0])
    close(_unpad(adv, mask)[1], expected[1])
    assert (adv[~mask] == 0).all()
    r_adv = ref.prm_step_advantages(T23_STEPS, ddof=0, eps=1e-6, credit=credit)
    close(r_adv[0], expected[0])
    close(r_adv[1], expected[1])


def test_t24_min_credit_on_t7_scores():
    adv, mask = _credit(T7_STEPS, "min")
    expected = [[-0.8165, -0.8165, -0.8165], [1.2247, 1.2247]]
    for got, want in zip(_unpad(adv, mask), expected, strict=True):
        close(got, want)
    for got, want in zip(ref.prm_step_advantages(T7_STEPS, ddof=0, eps=1e-6, credit="min"), expected, strict=True):
        close(got, want)


def test_t25_progress_credit_start_values():
    steps = [*T7_STEPS, [0.2, 0.9]]
    for start, expected in (
        (1.0, [[-0.1, -0.4, -0.4], [-0.2, -0.6], [-0.8, 0.0]]),
        (0.5, [[0.0, 0.0, -0.4], [0.0, -0.3], [-0.3, 0.0]]),
    ):
        adv, mask = _credit(steps, "progress", start=start)
        for got, want in zip(_unpad(adv, mask), expected, strict=True):
            close(got, want)
        for got, want in zip(ref.prm_step_advantages(steps, 0, 1e-6, credit="progress", start=start),
                             expected, strict=True):
            close(got, want)
    # No re-centring: a group whose rollouts all slip at the first step keeps its penalty.
    adv, _ = _credit([[0.0, 0.0], [0.0, 1.0]], "progress")
    close(adv, [[-1.0, 0.0], [-1.0, 0.0]])


def test_t27_delta_credit_on_value_estimates():
    steps = [[0.25, 0.75, 0.0], [0.75, 0.0]]
    for start, expected in (
        (None, [[-0.25, 0.5, -0.75], [0.25, -0.75]]),  # V_0 = the group's mean first value, 0.5
        (1.0, [[-0.75, 0.5, -0.75], [-0.25, -0.75]]),
    ):
        adv, mask = _credit(steps, "delta", start=start)
        for got, want in zip(_unpad(adv, mask), expected, strict=True):
            close(got, want)
        for got, want in zip(ref.prm_step_advantages(steps, 0, 1e-6, credit="delta", start=start),
                             expected, strict=True):
            close(got, want)
    # A masked step in the middle keeps the value of the last valid one.
    scores = torch.tensor([[[0.5, float("nan"), 0.25]]], dtype=torch.float64)
    mask = torch.tensor([[[True, False, True]]])
    close(prm_step_advantages(scores, mask, credit="delta", start=1.0)[0], [[-0.5, 0.0, -0.25]])
    # On tokens through the gate: the all-wrong group gets the deltas, the mixed one GRPO.
    rewards = torch.tensor([[0.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    padded = torch.tensor([[[0.25, 0.75, 0.0], [0.75, 0.0, 0.0]], [[0.0] * 3] * 2], dtype=torch.float64)
    pmask = torch.tensor([[[True] * 3, [True, True, False]], [[False] * 3] * 2])
    token_step = torch.tensor([[[0, 1, 2, 2], [0, 0, 1, -1]], [[0, 0, 0, -1], [0, 0, -1, -1]]])
    adv, _ = verigate_advantages(rewards, padded, pmask, token_step, std="population", credit="delta")
    close(adv[0], [[-0.25, 0.5, -0.75, -0.75], [0.25, 0.25, -0.75, 0.0]])
    with pytest.raises(ValueError, match="start"):
        prm_step_advantages(scores, mask, credit="delta", start=True)


def test_t26_verigate_credit_option_on_tokens():
    nan = float("nan")
    rewards = torch.tensor([[0.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    scores = torch.tensor([[[0.9, 0.5, 0.1], [0.8, 0.2, nan]], [[nan] * 3] * 2], dtype=torch.float64)
    mask = torch.tensor([[[True] * 3, [True, True, False]], [[False] * 3] * 2])
    token_step = torch.tensor([[[0, 1, 2, 2], [0, 0, 1, -1]], [[0, 0, 0, -1], [0, 0, -1, -1]]])
    adv, metrics = verigate_advantages(rewards, scores, mask, token_step, std="population", credit="progress")
    close(adv[0], [[-0.1, -0.4, -0.4, -0.4], [-0.2, -0.2, -0.6, 0.0]])
    a = 0.999998
    close(adv[1], [[a, a, a, 0.0], [-a, -a, 0.0, 0.0]], tol=1e-6)  # mixed groups: GRPO, any credit
    assert metrics["gate/gated_groups"] == 1
    adv_min, _ = verigate_advantages(rewards, scores, mask, token_step, std="population", credit="min")
    close(adv_min[0], [[-0.8165] * 4, [1.2247, 1.2247, 1.2247, 0.0]])  # T24 on tokens
    adv_suffix, _ = verigate_advantages(rewards, scores, mask, token_step, std="population")
    close(adv_suffix[0], [[1.5793, -0.1541, -1.1170, -1.1170], [0.6163, 0.6163, -0.9244, 0.0]])
    with pytest.raises(ValueError, match="credit"):
        verigate_advantages(rewards, scores, mask, token_step, credit="sum")
    with pytest.raises(ValueError, match="centre_scores"):
        verigate_advantages(rewards, scores, mask, token_step, credit="min", centre_scores=True)
    with pytest.raises(ValueError, match="start"):
        prm_step_advantages(scores[:1], mask[:1], credit="progress", start=float("nan"))


def test_t28_prefix_credit_rewards_the_verified_prefix():
    steps = [[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 1.0, 0.0]]  # exact labels: first errors at 3 and 2
    expected = [[0.8165, 0.8165, -1.2247, 0.0], [0.8165, -1.2247, 0.0, 0.0]]
    adv, mask = _credit(steps, "prefix")
    for got, want in zip(_unpad(adv, mask), expected, strict=True):
        close(got, want)
    for got, want in zip(ref.prm_step_advantages(steps, 0, 1e-6, credit="prefix"), expected, strict=True):
        close(got, want)
    # The group's credit sums to 0 (centred), and a step after a first error is never charged.
    assert abs(float(adv.sum())) < 1e-9 and adv[1, 2] == 0 and adv[1, 3] == 0
    # Every rollout wrong at step 1: nothing verified, nothing to compare, so no credit at all
    # (negative-only progress credit would charge both first steps).
    adv, _ = _credit([[0.0, 1.0], [0.0, 0.0]], "prefix")
    assert (adv == 0).all()
    close(_credit([[0.0, 1.0], [0.0, 0.0]], "progress")[0], [[-1.0, 0.0], [-1.0, 0.0]])


@pytest.mark.parametrize(("credit", "neutral", "expected"), [
    # PURE's min form as before: the neutral answer lines are paid (+0.6325) although no step
    # of o2 was checked to be better than o1's locally right step 3.
    ("min", None, [[-1.5811, -1.5811, 0.6325, 0.6325], [0.6325, 0.6325, 0.6325]]),
    ("min", 0.5, [[-1.2247, -1.2247, 0.8165, 0.0], [0.8165, 0.8165, 0.0]]),
    ("prefix", None, [[0.75, -1.75, 0.0, 0.0], [0.75, 0.75, -0.5]]),
    ("prefix", 0.5, [[0.5774, -1.7321, 0.0, 0.0], [0.5774, 0.5774, 0.0]]),
])
def test_t29_neutral_scores_are_no_evidence(credit, neutral, expected):
    adv, mask = _credit(T23_STEPS, credit, neutral=neutral)
    for got, want in zip(_unpad(adv, mask), expected, strict=True):
        close(got, want)
    for got, want in zip(ref.prm_step_advantages(T23_STEPS, 0, 1e-6, credit=credit, neutral=neutral),
                         expected, strict=True):
        close(got, want)
    if neutral is not None:  # a neutral step is never paid
        neutral_steps = torch.tensor([[s == neutral for s in row] + [False] * (4 - len(row)) for row in T23_STEPS])
        assert (adv[neutral_steps] <= 0).all()


def test_t29_neutral_on_tokens_and_bad_values():
    rewards = torch.tensor([[0.0, 0.0]], dtype=torch.float64)
    scores = torch.tensor([[[1.0, 0.5, 0.0], [1.0, 0.5, 0.0]]], dtype=torch.float64)
    scores[0, 1] = torch.tensor([1.0, 0.5, 0.5], dtype=torch.float64)  # o2 drops its steps: step, answer
    mask = torch.tensor([[[True, True, True], [True, True, False]]])
    token_step = torch.tensor([[[0, 1, 2], [0, 1, 1]]])
    adv, _ = verigate_advantages(rewards, scores, mask, token_step, std="population", credit="min", neutral=0.5)
    # o1: [1, neutral, 0] -> minima [0, -, 0]; o2: [1, neutral] -> [1, -]: only o2's checked step is paid.
    close(adv[0], [[-0.7071, 0.0, -0.7071], [1.4142, 0.0, 0.0]])
    with pytest.raises(ValueError, match="neutral"):
        prm_step_advantages(scores, mask, credit="min", neutral=float("inf"))

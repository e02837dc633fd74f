"""VeriGate and the PRM step estimators against the plain-Python reference, plus properties."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from veristep.gating import (
    broadcast_to_tokens,
    collapse_mask,
    future_cumulated_rewards,
    gate_mask,
    outcome_advantages,
    prm_step_advantages,
    process_grpo_advantages,
    steps_to_tokens,
    verigate_advantages,
)
from veristep.gating import spec_loops as ref

SETTINGS = settings(max_examples=35, deadline=None)


@st.composite
def cases(draw, grid: bool = False, min_steps: int = 0):
    """A batch of groups: rewards, ragged step scores, and each token's step index.

    grid=True draws scores from multiples of 1/64 so sums are exact in float32 as well.
    """
    n = draw(st.integers(1, 4))
    g = draw(st.integers(1, 4))
    score = (
        st.integers(0, 64).map(lambda k: k / 64)
        if grid
        else st.floats(0.0, 1.0, allow_nan=False)
    )
    groups, steps, token_steps = [], [], []
    for _ in range(n):
        kind = draw(st.sampled_from(["wrong", "right", "mixed"]))
        if kind == "mixed":
            groups.append([draw(st.sampled_from([0.0, 1.0])) for _ in range(g)])
        else:
            groups.append([0.0 if kind == "wrong" else 1.0] * g)
        g_steps, g_tokens = [], []
        for _ in range(g):
            n_steps = draw(st.integers(min_steps, 4))
            g_steps.append([draw(score) for _ in range(n_steps)])
            n_tokens = draw(st.integers(0, 7))
            top = max(n_steps - 1, 0)
            g_tokens.append(sorted(draw(st.integers(0, top)) for _ in range(n_tokens)))
        steps.append(g_steps)
        token_steps.append(g_tokens)
    return groups, steps, token_steps


def _reference_metrics(groups, steps, token_steps, adv_ref, gated):
    """The metric values recomputed from the reference's ragged output."""
    gated_steps = [len(row) for st_, g in zip(steps, gated, strict=True) if g for row in st_]
    tokens = [a for grp in adv_ref for row in grp for a in row]
    return {
        "gate/gated_groups": sum(gated),
        "gate/steps_per_gated_response": sum(gated_steps) / len(gated_steps) if gated_steps else 0.0,
        "adv/nonzero_frac": sum(a != 0 for a in tokens) / len(tokens) if tokens else 0.0,
    }


@SETTINGS
@given(
    case=cases(),
    gate=st.sampled_from(["all_wrong", "any_collapsed"]),
    std=st.sampled_from(["sample", "population"]),
    centre=st.booleans(),
    extra_steps=st.integers(0, 2),
    extra_tokens=st.integers(0, 3),
    credit=st.sampled_from(["suffix", "min", "progress", "delta"]),
)
def test_matches_reference(case, gate, std, centre, extra_steps, extra_tokens, credit):
    groups, steps, token_steps = case
    ddof = 1 if std == "sample" else 0
    tensors = ref.pad_case(
        groups, steps, token_steps, extra_steps, extra_tokens, torch.float64, fill=float("nan")
    )
    centre = centre and credit == "suffix"  # centring is a suffix-sum option
    adv, metrics = verigate_advantages(*tensors, gate=gate, std=std, centre_scores=centre, credit=credit)
    expected, gated = ref.verigate(groups, steps, token_steps, gate, 0.0, ddof, 1e-6, centre,
                                   credit=credit)
    actual = ref.unpad_tokens(adv, tensors[3])
    for a_grp, e_grp in zip(actual, expected, strict=True):
        for a_row, e_row in zip(a_grp, e_grp, strict=True):
            assert a_row == pytest.approx(e_row, rel=1e-9, abs=1e-9)
    assert (adv[tensors[3] < 0] == 0).all()
    for key, value in _reference_metrics(groups, steps, token_steps, expected, gated).items():
        assert metrics[key] == pytest.approx(value), key
    m = ref.collapse_metrics(groups)
    assert metrics["gate/acr"] == pytest.approx(m["acr"])
    assert metrics["gate/all_wrong_rate"] == pytest.approx(m["all_wrong_rate"])


@SETTINGS
@given(case=cases(), std=st.sampled_from(["sample", "population"]))
def test_step_estimators_match_reference(case, std):
    groups, steps, token_steps = case
    ddof = 1 if std == "sample" else 0
    _, scores, mask, _ = ref.pad_case(groups, steps, token_steps, 1, 0, torch.float64)
    for fn, ref_fn in (
        (prm_step_advantages, lambda s: ref.prm_step_advantages(s, ddof, 1e-6)),
        (lambda *a, **k: prm_step_advantages(*a, credit="min", **k),
         lambda s: ref.prm_step_advantages(s, ddof, 1e-6, credit="min")),
        (lambda *a, **k: prm_step_advantages(*a, credit="progress", start=0.7, **k),
         lambda s: ref.prm_step_advantages(s, ddof, 1e-6, credit="progress", start=0.7)),
        (lambda *a, **k: prm_step_advantages(*a, credit="delta", **k),
         lambda s: ref.prm_step_advantages(s, ddof, 1e-6, credit="delta")),
        (lambda *a, **k: prm_step_advantages(*a, credit="delta", start=0.7, **k),
         lambda s: ref.prm_step_advantages(s, ddof, 1e-6, credit="delta", start=0.7)),
        (process_grpo_advantages, lambda s: ref.process_grpo(s, ddof, 1e-6)),
    ):
        out = fn(scores, mask, std=std)
        assert (out[~mask] == 0).all()
        for n, group_steps in enumerate(steps):
            expected = ref_fn(group_steps)
            for i, row in enumerate(expected):
                assert out[n, i, : len(row)].tolist() == pytest.approx(row, rel=1e-9, abs=1e-9)
    cum = future_cumulated_rewards(scores, mask)
    for n, group_steps in enumerate(steps):
        for i, row in enumerate(group_steps):
            assert cum[n, i, : len(row)].tolist() == pytest.approx(ref.future_cumulated(row))


@SETTINGS
@given(case=cases(), std=st.sampled_from(["sample", "population"]), eps=st.sampled_from([1e-6, 1e-4]))
def test_equals_grpo_on_every_non_collapsed_group(case, std, eps):
    groups, steps, token_steps = case
    rewards, scores, mask, token_step = ref.pad_case(groups, steps, token_steps, dtype=torch.float64)
    for gate in ("all_wrong", "any_collapsed"):
        adv, _ = verigate_advantages(rewards, scores, mask, token_step, gate=gate, std=std, eps=eps)
        grpo = broadcast_to_tokens(
            outcome_advantages(rewards, "grpo", std=std, eps=eps), token_step >= 0
        )
        mixed = ~collapse_mask(rewards)
        assert torch.equal(adv[mixed], grpo[mixed])


@SETTINGS
@given(case=cases(), gate=st.sampled_from(["all_wrong", "any_collapsed"]), extra=st.integers(0, 2))
def test_is_steps_to_tokens_of_one_step_table(case, gate, extra):
    """Token advantages = steps_to_tokens of a [N, G, S] table: step advantages where gated,
    the outcome advantage (0 if collapsed) on every step elsewhere; one gather serves both."""
    groups, steps, token_steps = case
    rewards, scores, mask, token_step = ref.pad_case(groups, steps, token_steps, extra_steps=extra,
                                                     dtype=torch.float64)
    if scores.shape[-1] == 0:  # no step anywhere: VeriGate reads a single masked step
        scores, mask = scores.new_zeros(scores.shape[:2] + (1,)), mask.new_zeros(mask.shape[:2] + (1,))
    adv, _ = verigate_advantages(rewards, scores, mask, token_step, gate=gate)
    outcome = outcome_advantages(rewards, "grpo", std="population", eps=1e-6)
    outcome = torch.where(collapse_mask(rewards)[:, None], 0.0, outcome)
    table = torch.where(gate_mask(rewards, gate)[:, None, None], prm_step_advantages(scores, mask),
                        outcome[..., None].expand_as(scores))
    assert torch.equal(adv, steps_to_tokens(table, token_step))


@SETTINGS
@given(case=cases(min_steps=1), std=st.sampled_from(["sample", "population"]), centre=st.booleans())
def test_prm_branch_has_zero_mean_over_steps(case, std, centre):
    groups, steps, token_steps = case
    _, scores, mask, _ = ref.pad_case(groups, steps, token_steps, 2, 0, torch.float64)
    adv = prm_step_advantages(scores, mask, std=std, centre_scores=centre)
    per_group_mean = (adv * mask).sum((1, 2)) / mask.sum((1, 2))
    torch.testing.assert_close(per_group_mean, torch.zeros_like(per_group_mean), atol=1e-9, rtol=0)
    # Seen through tokens (one token per step) the same holds for VeriGate itself.
    all_wrong = torch.zeros(scores.shape[:2], dtype=torch.float64)
    one_token_per_step = torch.where(mask, torch.arange(scores.shape[2]), -1)
    tok, _ = verigate_advantages(all_wrong, scores, mask, one_token_per_step, std=std, centre_scores=centre)
    torch.testing.assert_close(tok, adv)


@SETTINGS
@given(case=cases(), more_steps=st.integers(1, 3), more_tokens=st.integers(1, 5))
def test_invariant_to_padding(case, more_steps, more_tokens):
    groups, steps, token_steps = case
    tight = ref.pad_case(groups, steps, token_steps, dtype=torch.float64)
    loose = ref.pad_case(groups, steps, token_steps, more_steps, more_tokens, torch.float64, fill=7.0)
    a_tight, m_tight = verigate_advantages(*tight, gate="any_collapsed")
    a_loose, m_loose = verigate_advantages(*loose, gate="any_collapsed")
    t = a_tight.shape[2]
    # Longer reductions may round differently in the last bit, nothing more.
    torch.testing.assert_close(a_loose[..., :t], a_tight, rtol=1e-12, atol=1e-12)
    assert (a_loose[..., t:] == 0).all()
    assert m_tight == pytest.approx(m_loose)


@SETTINGS
@given(case=cases(grid=True), std=st.sampled_from(["sample", "population"]), centre=st.booleans())
def test_float32_matches_float64(case, std, centre):
    groups, steps, token_steps = case
    r, s, m, ts = ref.pad_case(groups, steps, token_steps, dtype=torch.float64)
    a64, m64 = verigate_advantages(r, s, m, ts, gate="any_collapsed", std=std, centre_scores=centre)
    a32, m32 = verigate_advantages(r.float(), s.float(), m, ts, gate="any_collapsed", std=std,
                                   centre_scores=centre)
    assert a32.dtype == torch.float32
    torch.testing.assert_close(a32.double(), a64, rtol=1e-4, atol=1e-4)
    assert m32["gate/gated_groups"] == m64["gate/gated_groups"]


def _t7(rewards=(0.0, 0.0)):
    return ref.pad_case([list(rewards)], [[[0.9, 0.5, 0.1], [0.8, 0.2]]], [[[0, 0, 1, 2], [0, 1]]])


def test_all_correct_group_gets_zero_unless_any_collapsed():
    r, s, m, ts = _t7((1.0, 1.0))
    adv, metrics = verigate_advantages(r, s, m, ts)
    assert (adv == 0).all() and metrics["gate/gated_groups"] == 0
    assert metrics["adv/nonzero_frac"] == 0.0
    adv, metrics = verigate_advantages(r, s, m, ts, gate="any_collapsed")
    assert metrics["gate/gated_groups"] == 1 and (adv[ts >= 0] != 0).all()


def test_flat_prm_scores_give_zero_advantage():
    r, s, m, ts = _t7()
    # Every rollout has one step, all scored 0.7: the suffix sums are all equal.
    same = torch.zeros_like(s)
    same[0, :, 0] = 0.7
    mask = torch.zeros_like(m)
    mask[0, :, 0] = True
    adv, metrics = verigate_advantages(r, same, mask, torch.where(ts >= 0, 0, -1))
    assert (adv == 0).all()
    assert metrics["gate/prm_flat_groups"] == 1


def test_tau_zeros_nearly_collapsed_group():
    r = torch.tensor([[0.0, 0.01, 0.0, 0.0]])
    s = torch.full((1, 4, 1), 0.5)
    m = torch.ones(1, 4, 1, dtype=torch.bool)
    ts = torch.zeros(1, 4, 3, dtype=torch.long)
    adv, metrics = verigate_advantages(r, s, m, ts, tau=0.1, gate="all_wrong")
    assert metrics["gate/acr"] == 1.0 and metrics["gate/gated_groups"] == 0
    assert (adv == 0).all()


def test_tokens_on_masked_steps_get_zero_but_count():
    r, s, m, ts = _t7()
    ts[0, 1, 2] = 2  # step 2 does not exist for rollout 1 (e.g. trailing EOS with no step)
    adv, metrics = verigate_advantages(r, s, m, ts)
    assert adv[0, 1, 2] == 0
    assert metrics["adv/nonzero_frac"] == pytest.approx(6 / 7)


def test_empty_batch():
    adv, metrics = verigate_advantages(
        torch.zeros(0, 4), torch.zeros(0, 4, 3), torch.zeros(0, 4, 3, dtype=torch.bool),
        torch.zeros(0, 4, 5, dtype=torch.long),
    )
    assert adv.shape == (0, 4, 5)
    assert metrics["gate/gated_groups"] == 0


def test_nan_scores_in_gated_group_are_rejected():
    r, s, m, ts = _t7()
    s[0, 0, 1] = float("nan")
    with pytest.raises(ValueError, match="step_scores contains NaN"):
        verigate_advantages(r, s, m, ts)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda a: a.update(step_scores=a["step_scores"][0]), r"step_scores must have shape \[N, G, S\]"),
        (lambda a: a.update(step_mask=a["step_mask"][..., :2]), "step_mask shape"),
        (lambda a: a.update(rewards=torch.zeros(1, 3)), "the first 2 sizes must agree"),
        (lambda a: a.update(token_step=a["token_step"].float()), "integer step indices"),
        (lambda a: a.update(token_step=a["token_step"] + 5), r"in \[0, 2\]"),
        (lambda a: a.update(token_step=a["token_step"] - 5), "-1 \\(padding\\)"),
        (lambda a: a.update(gate="all_right"), "gate='all_right' is not one of"),
        (lambda a: a.update(std="biased"), "std='biased'"),
        (lambda a: a.update(tau=-1.0), "tau must be a finite number >= 0"),
        (lambda a: a.update(tau=float("nan")), "tau must be a finite number >= 0"),  # was 0
        (lambda a: a.update(eps=float("nan")), "eps must be a finite number >= 0"),  # NaN advantages
    ],
)
def test_bad_inputs_raise_clearly(change, message):
    r, s, m, ts = _t7()
    args = {"rewards": r, "step_scores": s, "step_mask": m, "token_step": ts}
    change(args)
    with pytest.raises(ValueError, match=message):
        verigate_advantages(**args)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu():
    gen = torch.Generator().manual_seed(0)
    n, g, s, t = 8, 6, 5, 40
    rewards = (torch.rand(n, g, generator=gen) < 0.3).float()
    rewards[:3] = 0.0
    scores = torch.rand(n, g, s, generator=gen)
    lengths = torch.randint(0, s + 1, (n, g), generator=gen)
    mask = torch.arange(s) < lengths[..., None]
    token_step = torch.sort(torch.randint(0, s, (n, g, t), generator=gen), -1).values
    token_step = torch.minimum(token_step, (lengths[..., None] - 1).clamp(min=0))
    token_step[..., -5:] = -1
    cpu, m_cpu = verigate_advantages(rewards, scores, mask, token_step)
    gpu, m_gpu = verigate_advantages(rewards.cuda(), scores.cuda(), mask.cuda(), token_step.cuda())
    assert gpu.device.type == "cuda"
    torch.testing.assert_close(gpu.cpu(), cpu)
    assert m_cpu == pytest.approx(m_gpu)


@SETTINGS
@given(case=cases(), gate=st.sampled_from(["all_wrong", "any_collapsed"]))
def test_gate_mask_names_exactly_the_prm_groups(case, gate):
    """Only groups in gate_mask read step scores: NaN everywhere else changes nothing."""
    groups, steps, token_steps = case
    rewards, scores, mask, token_step = ref.pad_case(groups, steps, token_steps, dtype=torch.float64)
    to_prm = gate_mask(rewards, gate)
    _, expected_gated = ref.verigate(groups, steps, token_steps, gate)
    assert to_prm.tolist() == expected_gated
    poisoned = torch.where(to_prm[:, None, None], scores, torch.nan)
    adv, metrics = verigate_advantages(rewards, scores, mask, token_step, gate=gate)
    adv_p, metrics_p = verigate_advantages(rewards, poisoned, mask, token_step, gate=gate)
    assert torch.equal(adv, adv_p) and metrics == metrics_p


@pytest.mark.parametrize("call", [
    lambda: outcome_advantages(torch.tensor([[1.0, 0.0]]), eps=float("nan")),
    lambda: outcome_advantages(torch.zeros(1, 2), "avspo", virtual="fixed", virtual_value=float("inf")),
    lambda: prm_step_advantages(torch.rand(1, 2, 2), torch.ones(1, 2, 2, dtype=torch.bool), eps=-1.0),
    lambda: process_grpo_advantages(torch.rand(1, 2, 2), torch.ones(1, 2, 2, dtype=torch.bool), eps=float("nan")),
])
def test_options_that_would_give_nan_advantages_are_refused(call):
    with pytest.raises(ValueError, match="must be a finite number"):
        call()


def test_numpy_scalars_are_numbers():
    import numpy as np

    scores, mask = torch.tensor([[[0.2, 0.9], [0.5, 0.1]]]), torch.ones(1, 2, 2, dtype=torch.bool)
    assert torch.equal(prm_step_advantages(scores, mask, credit="progress", start=np.float64(0.9)),
                       prm_step_advantages(scores, mask, credit="progress", start=0.9))

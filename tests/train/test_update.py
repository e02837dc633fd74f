"""One policy update on hand-made rollouts: the gate's effect on gradients, micro-batching."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from veristep.train.advantages import compute_advantages, prm_groups, winner_groups
from veristep.train.config import make_config
from veristep.train.distributed import DistInfo
from veristep.train.logprobs import collate
from veristep.train.rewards import prm_step_tensors
from veristep.train.rollout import Rollouts
from veristep.train.update import optimise_policy

# Two all-wrong completions of one prompt whose steps are partly right: the rule PRM scores
# them differently step by step, so VeriGate has signal where GRPO has none.
COMPLETIONS = [
    "Step 1: 2 + 3 = 5\n\nStep 2: 5 * 4 = 21\n\nStep 3: 21 - 1 = 20\n\nThe answer is 20.",
    "Step 1: 2 + 3 = 6\n\nStep 2: 6 * 4 = 24\n\nThe answer is 24.",
]


def _rollouts(tokenizer, completions):
    prompt = tokenizer("Compute (2 + 3) * 4 - 1.", add_special_tokens=False).input_ids
    comp = [tokenizer(c, add_special_tokens=False).input_ids + [tokenizer.eos_token_id] for c in completions]
    return Rollouts([prompt] * len(comp), comp, list(completions), [False] * len(comp))


def _update(method, model_dir, ro, rewards, tokenizer, micro_batch_size=0, optimizer_cls=torch.optim.SGD):
    cfg = make_config(model=str(model_dir), advantage=method, group_size=len(ro),
                      prompts_per_step=1, micro_batch_size=micro_batch_size, prm="rule")
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    before = copy.deepcopy(model.state_dict())
    batch = collate(ro.prompt_ids, ro.completion_ids, tokenizer.pad_token_id)
    n, g, t = 1, len(ro), batch.completion_ids.shape[1]
    groups = prm_groups(cfg, rewards)
    steps = None
    if method in ("verigate", "prm_as_outcome"):
        from veristep.prm import load_scorer

        steps = prm_step_tensors(load_scorer("rule"), tokenizer, ["Compute (2 + 3) * 4 - 1."] * n,
                                 ro.completion_ids, ro.texts, g, t, groups)
    adv, metrics = compute_advantages(cfg, rewards, batch.completion_mask.view(n, g, t), steps)
    opt = optimizer_cls(model.parameters(), lr=1.0)
    stats = optimise_policy(cfg, model, None, opt, batch, ro, adv.view(n * g, t),
                            torch.zeros(n * g, dtype=torch.long), winner_groups(adv),
                            cfg.loss_settings(), DistInfo())
    change = max(float((model.state_dict()[k] - before[k]).abs().max()) for k in before)
    return change, metrics, stats, groups, model


def test_collapsed_batch_gives_gradient_under_verigate_not_grpo(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    ro = _rollouts(tok, COMPLETIONS)
    rewards = torch.zeros(1, 2)  # constant reward: the group has collapsed (all wrong)
    change_vg, m_vg, _, groups, _ = _update("verigate", tiny_model_dir, ro, rewards, tok)
    change_grpo, m_grpo, _, _, _ = _update("grpo", tiny_model_dir, ro, rewards, tok)
    assert groups == [0]  # the gate sent the collapsed group to the PRM
    assert m_vg["adv/nonzero_frac"] > 0 and change_vg > 0
    assert m_grpo["adv/nonzero_frac"] == 0 and change_grpo == 0


def test_mixed_group_never_reaches_the_prm(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    ro = _rollouts(tok, COMPLETIONS)
    rewards = torch.tensor([[1.0, 0.0]])
    verigate = make_config(advantage="verigate", gate="all_wrong")
    assert prm_groups(verigate, rewards) == []
    assert prm_groups(verigate, torch.ones(1, 2)) == []
    assert prm_groups(make_config(advantage="verigate", gate="any_collapsed"), torch.ones(1, 2)) == [0]
    assert prm_groups(make_config(advantage="grpo"), torch.zeros(1, 2)) == []
    # A mixed group under verigate updates exactly like GRPO.
    _, _, _, _, m1 = _update("verigate", tiny_model_dir, ro, rewards, tok)
    _, _, _, _, m2 = _update("grpo", tiny_model_dir, ro, rewards, tok)
    for (k, a), b in zip(m1.state_dict().items(), m2.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, msg=k)


def test_micro_batching_does_not_change_the_update(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    ro = _rollouts(tok, COMPLETIONS + ["Step 1: 1 + 1 = 2\n\nThe answer is 2."])
    rewards = torch.tensor([[1.0, 0.0, 1.0]])
    _, _, s_full, _, m_full = _update("grpo", tiny_model_dir, ro, rewards, tok, micro_batch_size=0)
    _, _, s_micro, _, m_micro = _update("grpo", tiny_model_dir, ro, rewards, tok, micro_batch_size=1)
    assert s_full["loss/policy"] == pytest.approx(s_micro["loss/policy"], abs=1e-6)
    for a, b in zip(m_full.state_dict().values(), m_micro.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_non_finite_loss_skips_the_update(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    ro = _rollouts(tok, COMPLETIONS)
    cfg = make_config(model=str(tiny_model_dir), advantage="grpo", group_size=2, prompts_per_step=1)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    before = copy.deepcopy(model.state_dict())
    batch = collate(ro.prompt_ids, ro.completion_ids, tok.pad_token_id)
    adv = torch.full(batch.completion_ids.shape, float("nan"))
    stats = optimise_policy(cfg, model, None, torch.optim.SGD(model.parameters(), lr=1.0), batch, ro,
                            adv, torch.zeros(2, dtype=torch.long), torch.ones(1, dtype=torch.bool),
                            cfg.loss_settings(), DistInfo())
    assert stats["train/skipped_updates"] == 1
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_winner_constant_divides_by_the_groups_that_have_a_winner(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    ro = _rollouts(tok, COMPLETIONS + COMPLETIONS)  # 2 groups of G = 2
    batch = collate(ro.prompt_ids, ro.completion_ids, tok.pad_token_id)
    t = batch.completion_ids.shape[1]
    adv = torch.zeros(2, 2, t)
    adv[0, 0], adv[0, 1] = 1.0, -1.0  # group 0 has a winner; group 1 is all zero
    adv = adv * batch.completion_mask.view(2, 2, t)
    policy = {}
    for loss in ("dr-grpo", "wapo"):
        cfg = make_config(model=str(tiny_model_dir), advantage="wapo", loss=loss, eps_high=0.2,
                          group_size=2, prompts_per_step=2)
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
        stats = optimise_policy(cfg, model, None, torch.optim.SGD(model.parameters(), lr=0.0), batch,
                                ro, adv.view(4, t), torch.tensor([0, 0, 1, 1]), winner_groups(adv),
                                cfg.loss_settings(), DistInfo())
        policy[loss] = stats["loss/policy"]
    assert policy["dr-grpo"] != 0
    # 1 of 2 groups has a winner: the divisor halves, the loss doubles.
    assert policy["wapo"] == pytest.approx(2 * policy["dr-grpo"], rel=1e-6)

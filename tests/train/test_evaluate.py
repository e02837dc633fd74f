"""Held-out evaluation: standard errors by hand, common random numbers on a real tiny model."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from veristep.train.distributed import DistInfo
from veristep.train.evaluate import (
    Estimate,
    EvalResult,
    compare,
    eval_seeds,
    evaluate,
    mean_se,
    paired_difference,
    pass_at_k,
)
from veristep.train.rewards import OutcomeRewards
from veristep.train.rollout import HFRolloutEngine, SamplingConfig

# Four prompts, k = 4 samples each.
BEFORE = [4, 2, 0, 1]  # per-prompt means 1, .5, 0, .25
AFTER = [4, 3, 1, 1]  # 1, .75, .25, .25


def test_mean_and_se_by_hand():
    # mean .4375; deviations .5625 .0625 -.4375 -.1875; sum of squares .546875; / 3 = .18229;
    # SE = sqrt(.18229 / 4) = .213478
    est = mean_se([c / 4 for c in BEFORE])
    assert est.mean == pytest.approx(0.4375)
    assert est.se == pytest.approx(math.sqrt(0.546875 / 3 / 4))
    assert est.se == pytest.approx(0.213478, abs=1e-6)
    assert mean_se([0.3]) == Estimate(0.3, 0.0)
    with pytest.raises(ValueError, match="no values"):
        mean_se([])


def test_paired_difference_by_hand():
    # differences 0 .25 .25 0: mean .125; deviations -.125 .125 .125 -.125; var .0625 / 3;
    # SE = sqrt(.0208333 / 4) = .0721688 -- far below the unpaired SE of either evaluation
    diff = paired_difference([c / 4 for c in BEFORE], [c / 4 for c in AFTER])
    assert diff.mean == pytest.approx(0.125)
    assert diff.se == pytest.approx(0.0721688, abs=1e-6)
    with pytest.raises(ValueError, match="same prompts"):
        paired_difference([0.1, 0.2], [0.3])


def test_eval_result_metrics_compare_and_state():
    before = EvalResult(4, BEFORE, [1, 1, 0, 0])
    after = EvalResult(4, AFTER, [1, 1, 1, 0])
    m = before.metrics(group_size=4)
    assert m["eval/pass@1"] == pytest.approx(0.4375)
    assert m["eval/pass@1_se"] == pytest.approx(0.213478, abs=1e-6)
    # pass@4 from 4 samples: 1 if any sample is right -> prompts 1, 1, 0, 1
    assert m["eval/pass@G"] == pytest.approx(0.75)
    # greedy 1 1 0 0: mean .5, sd sqrt(1/3), SE sqrt(1/3)/2
    assert m["eval/greedy"] == pytest.approx(0.5)
    assert m["eval/greedy_se"] == pytest.approx(math.sqrt(1 / 3) / 2)
    diff = compare(before, after)
    assert diff["pass@1"].mean == pytest.approx(0.125)
    # greedy differences 0 0 1 0: mean .25, var (3 x .0625 + .5625) / 3 = .25, SE .25
    assert diff["greedy"].mean == pytest.approx(0.25) and diff["greedy"].se == pytest.approx(0.25)
    assert EvalResult.from_state(before.to_state()) == before
    with pytest.raises(ValueError, match="same prompts"):
        compare(before, EvalResult(2, AFTER, None))
    assert EvalResult(4, BEFORE, None).metrics(4)["eval/greedy"] is None


def test_pass_at_k():
    assert pass_at_k(4, 0, 2) == 0.0
    assert pass_at_k(4, 3, 2) == 1.0
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2)


@pytest.fixture(scope="module")
def engine_and_prompts(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    engine = HFRolloutEngine(model, tok, SamplingConfig(max_new_tokens=12), torch.device("cpu"))
    prompts = [tok(f"Problem {i}: {i} + {i} =", add_special_tokens=False).input_ids for i in range(6)]
    return engine, prompts


def test_same_seeds_give_the_same_samples_and_others_do_not(engine_and_prompts):
    engine, prompts = engine_and_prompts
    seeds = eval_seeds(0, range(len(prompts)))
    a = engine.generate(prompts, 3, seeds)
    torch.rand(5)  # the global stream moves on between the two evaluations
    b = engine.generate(prompts, 3, seeds)
    assert a.completion_ids == b.completion_ids
    c = engine.generate(prompts, 3, eval_seeds(1, range(len(prompts))))
    assert c.completion_ids != a.completion_ids
    greedy = engine.generate(prompts, 1, seeds, greedy=True)
    assert greedy.completion_ids == engine.generate(prompts, 1, eval_seeds(1, range(6)), greedy=True).completion_ids


def test_generation_leaves_the_global_random_stream_alone(engine_and_prompts):
    engine, prompts = engine_and_prompts
    state = torch.random.get_rng_state()
    engine.generate(prompts, 2, eval_seeds(0, range(len(prompts))))
    assert torch.equal(torch.random.get_rng_state(), state)


class _FirstCharIsDigit:
    """A real scorer of the engine's texts: correct when the completion starts with a digit;
    with `unjudged`, no verdict on a completion that starts with that character."""

    def __init__(self, unjudged: str | None = None) -> None:
        self.unjudged = unjudged

    def score(self, texts, refs):
        judged = [not (self.unjudged and t.startswith(self.unjudged)) for t in texts]
        return OutcomeRewards(torch.zeros(len(texts)),
                              torch.tensor([bool(t[:1].isdigit()) and j for t, j in zip(texts, judged, strict=True)]),
                              torch.tensor(judged), ["?"] * len(texts))


def test_before_and_after_evaluations_of_an_unchanged_model_pair_exactly(engine_and_prompts):
    engine, prompts = engine_and_prompts
    refs = [[None]] * len(prompts)
    before = evaluate(engine, prompts, refs, _FirstCharIsDigit(), 4, seed=0, info=DistInfo())
    after = evaluate(engine, prompts, refs, _FirstCharIsDigit(), 4, seed=0, info=DistInfo())
    assert before.correct == after.correct and before.greedy == after.greedy
    assert before.prompts == len(prompts) and before.samples == 4
    diff = compare(before, after)
    assert diff["pass@1"] == Estimate(0.0, 0.0) and diff["greedy"] == Estimate(0.0, 0.0)


def test_compare_command_pairs_a_model_with_itself_exactly(tiny_model_dir, capsys):
    from veristep.train.evaluate import main

    assert main([str(tiny_model_dir), str(tiny_model_dir), "--dataset", "builtin:arith:level=easy",
                 "--eval-size", "6", "--after-seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "6 prompts x 4 samples" in out
    assert "after - before: pass@1 +0.0 +- 0.0 paired" in out  # same seeds, same model: no noise
    assert "after, other seeds - before" in out


def test_unjudged_completions_are_left_out_of_the_accuracies_and_counted():
    # prompt 2 has no judged sample; prompt 1 two of four; one greedy completion unjudged
    before = EvalResult(4, [4, 1, 0, 0], [1, 0, 0, 0], judged=[4, 2, 0, 4], greedy_judged=[1, 1, 0, 1])
    m = before.metrics(group_size=4)
    assert m["eval/pass@1"] == pytest.approx((1.0 + 0.5 + 0.0) / 3)  # prompt 2 left out
    assert m["eval/unjudged_frac"] == pytest.approx((6 + 1) / (16 + 4))
    # pass@k from the judged samples: prompt 1 has 2 judged, so its k is 2 -> 1 - C(1,2)/C(2,2) = 1
    assert m["eval/pass@k"] == m["eval/pass@G"] == pytest.approx((1.0 + 1.0 + 0.0) / 3) and m["eval/k"] == 4
    assert m["eval/greedy"] == pytest.approx(1 / 3)
    assert EvalResult.from_state(before.to_state()) == before
    # a prompt pairs only if both evaluations judged it: prompts 0, 1, 3 -> differences 0, 0, .5
    after = EvalResult(4, [4, 2, 1, 2], [1, 1, 1, 0], judged=[4, 4, 4, 4])
    assert compare(before, after)["pass@1"].mean == pytest.approx(0.5 / 3)
    # every completion judged: the same numbers as before unjudged results were counted
    full = EvalResult(4, BEFORE, [1, 1, 0, 0])
    assert full.metrics(4)["eval/unjudged_frac"] == 0.0
    assert EvalResult.from_state({"samples": 4, "correct": BEFORE, "greedy": None}).judged is None


def test_evaluate_counts_what_the_verifier_could_not_judge(engine_and_prompts):
    engine, prompts = engine_and_prompts
    texts = engine.generate(prompts, 4, eval_seeds(0, range(len(prompts)))).texts
    mark = texts[0][:1]  # at least the first completion goes unjudged
    result = evaluate(engine, prompts, [[None]] * len(prompts), _FirstCharIsDigit(unjudged=mark), 4, seed=0,
                      info=DistInfo(), greedy=False)
    expected = [sum(not t.startswith(mark) for t in texts[4 * i: 4 * i + 4]) for i in range(len(prompts))]
    assert result.judged == expected and result.judged[0] < 4
    assert result.metrics(4)["eval/unjudged_frac"] == pytest.approx(1 - sum(expected) / (4 * len(prompts)))

"""Monte-Carlo step values (`mc:k=K`) on a real tiny model through the trainer's rollout engine."""

from __future__ import annotations

import pytest
import torch
from veristep.prm.mc_values import MCStepScorer, parse_mc_spec
from veristep.train.config import make_config
from veristep.train.gated_grpo import train
from veristep.train.rewards import OutcomeRewarder
from veristep.train.rollout import HFRolloutEngine, SamplingConfig
from veristep.train.tracking import read_metrics

from .conftest import FIRST_CHAR, HERE, NEVER

CONTAINS = f"{HERE / 'trainer_verifiers.py'}:ContainsMarkVerifier"
PROBLEM = "Problem 0: 0 + 0 ="


def _scorer(tiny_model, char_tokenizer, verifier, k=3, answer="abc"):
    engine = HFRolloutEngine(tiny_model, char_tokenizer, SamplingConfig(12, 1.0, 1.0), torch.device("cpu"))
    prompt_ids = char_tokenizer(PROBLEM)["input_ids"]
    return MCStepScorer(k, engine, char_tokenizer, OutcomeRewarder([verifier], [1.0]),
                        {PROBLEM: (prompt_ids, [answer])}, separator="\n")


def test_values_are_verifier_means_over_k_continuations(tiny_model, char_tokenizer):
    scorer = _scorer(tiny_model, char_tokenizer, FIRST_CHAR, k=3)
    right, wrong = scorer.score_batch([PROBLEM, PROBLEM], ["ab\ncd\nef", "AB\ncd"])
    # The first character is fixed by the prefix, so every continuation is judged alike.
    assert right.scores == [1.0, 1.0, 1.0] and wrong.scores == [0.0, 0.0]
    assert right.steps == ["ab", "cd", "ef"] and right.spans == [(0, 2), (3, 5), (6, 8)]
    assert scorer.rollouts == 3 * (2 + 1)  # k per step prefix; the last step is the completion's own reward
    assert scorer.completion_tokens > 0


def test_values_depend_on_the_continuations(tiny_model, char_tokenizer):
    k = 8
    scorer = _scorer(tiny_model, char_tokenizer, CONTAINS, k=k)
    (with_mark, without) = scorer.score_batch([PROBLEM] * 2, ["az\nb\nc", "ab\nc\nd\ne"])
    assert with_mark.scores == [1.0, 1.0, 1.0]  # the mark is in every prefix already
    assert without.scores[-1] == 0.0  # the completion itself has no mark
    # Random continuations of a random model: each value is a multiple of 1/k in [0, 1], and
    # some continuation somewhere writes the mark or not (not every value is 0 or 1 by construction).
    for v in without.scores[:-1]:
        assert 0.0 <= v <= 1.0 and abs(v * k - round(v * k)) < 1e-9
    # Same call again: new seeds, same estimand; values stay in range.
    again = scorer.score_batch([PROBLEM], ["ab\nc\nd\ne"])[0]
    assert len(again.scores) == 4


def test_a_shared_prefix_is_continued_once(tiny_model, char_tokenizer):
    scorer = _scorer(tiny_model, char_tokenizer, FIRST_CHAR, k=3)
    # Three completions share "ab\n"; two also share "ab\ncd\n": 2 distinct prefixes, not 5.
    out = scorer.score_batch([PROBLEM] * 3, ["ab\ncd\nef", "ab\ncd\nxy", "ab\nzz"])
    assert scorer.rollouts == 3 * 2
    assert [o.scores for o in out] == [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0]]
    # The same prefix under another problem is another state: it is continued separately.
    other = "Problem 1: 1 + 1 ="
    scorer.contexts[other] = (char_tokenizer(other)["input_ids"], ["abc"])
    scorer.score_batch([PROBLEM, other], ["ab\ncd", "ab\ncd"])
    assert scorer.rollouts == 3 * 2 + 3 * 2


def test_no_steps_and_unknown_problems(tiny_model, char_tokenizer):
    scorer = _scorer(tiny_model, char_tokenizer, FIRST_CHAR)
    assert scorer.score_batch([PROBLEM], ["  \n "])[0].scores == []
    assert scorer.rollouts == 0
    with pytest.raises(ValueError, match="no model input"):
        scorer.score_batch(["another problem"], ["a"])


@pytest.mark.parametrize(("spec", "expected"), [("mc", {"k": 4, "seed": 0}), ("mc:k=2", {"k": 2, "seed": 0}),
                                                ("mc:k=8,seed=3", {"k": 8, "seed": 3})])
def test_spec(spec, expected):
    assert parse_mc_spec(spec) == expected


@pytest.mark.parametrize("spec", ["mc:k=0", "mc:k=two", "mc:n=3"])
def test_bad_spec(spec):
    with pytest.raises(ValueError):
        parse_mc_spec(spec)


def test_trainer_counts_mc_rollouts_in_the_budget(small_config):
    # 16 random characters split at spaces, so some completions have several steps
    cfg = make_config(**dict(small_config, verifier=NEVER, prm="mc:k=2", credit="delta",
                             prm_separator=" ", max_completion_len=16))
    summary = train(cfg)
    rows = read_metrics(summary["metrics_path"])
    mc = sum(r["gate/mc_rollouts"] for r in rows)
    assert all(r["gate/gated_groups"] == 2 for r in rows)  # NEVER: every group is all wrong
    assert mc > 0 and mc % 2 == 0
    assert summary["mc_rollouts"] == mc
    assert summary["rollouts"] == 2 * 2 * 4 + mc  # the batches plus every continuation
    assert rows[-1]["train/rollouts_total"] == summary["rollouts"]
    assert all(r["time/prm_s"] > 0 for r in rows)
    # Every value is 0 under NEVER, so is the group's start value: delta credit is 0 throughout
    assert all(r["adv/nonzero_frac"] == 0 for r in rows)
    assert all(r["gate/prm_flat_groups"] == 2 for r in rows)


def test_the_trainer_module_is_an_adapter_of_the_prm_scorer():
    # The scorer lives with the step scorers; the trainer's module keeps its old names.
    from veristep.prm import mc_values as prm_mc
    from veristep.train import mc_values as train_mc

    assert train_mc.MCStepScorer is prm_mc.MCStepScorer and train_mc.parse_mc_spec is prm_mc.parse_mc_spec
    assert train_mc.is_mc_spec("mc:k=2") and not train_mc.is_mc_spec("rule")

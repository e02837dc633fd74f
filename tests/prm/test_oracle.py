"""Oracle and noisy-oracle step scorers of the built-in task (prm/oracle.py)."""

from __future__ import annotations

import pytest
from veristep.prm import load_scorer
from veristep.prm.oracle import oracle_labels
from veristep.train.demo.task import make_noisy_demonstrations, make_problems


def _demos(n=300, rate=0.25):
    problems = make_problems(n, seed=3, level="hard")
    return make_noisy_demonstrations(problems, seed=1, step_error_rate=rate, answer_error_rate=0.2)


def test_exact_labels_follow_the_injected_mistakes():
    oracle = load_scorer("oracle", separator="\n")
    seen_wrong = 0
    for demo in _demos():
        scores = oracle.score(demo.prompt, demo.completion).scores
        n_steps = len(scores) - 1  # the last line is the answer
        first = min(demo.wrong_steps) if demo.wrong_steps else None
        # every step line up to the first injected slip is right, every one from it on is wrong
        expected = [1.0 if first is None or k < first else 0.0 for k in range(n_steps)]
        assert scores[:n_steps] == expected, demo
        assert scores[-1] == float(demo.correct)
        seen_wrong += first is not None
    assert seen_wrong > 100


def test_the_oracle_is_not_the_local_checker():
    # right from the wrong value (step 3) and a copied wrong operand (step 1): locally right, both wrong
    prompt = "Compute: (7+8)*5-3\n"
    assert oracle_labels(prompt, "Step 1: 7+8=15\nStep 2: 15*5=76\nStep 3: 76-3=73\nAnswer: 73").correct == \
        [True, False, False, False]
    labels = oracle_labels(prompt, "Step 1: 7+9=16\nStep 2: 16*5=80\nStep 3: 80-3=77\nAnswer: 72")
    assert labels.correct == [False, False, False, True]
    assert labels.is_answer == [False, False, False, True]
    assert labels.first_error() == 0


@pytest.mark.parametrize("completion", ["", "   \n\n", "Answer: " + "9" * 5000, "Step 1: 1+1=2\n" * 50,
                                        "\x00\ufffd garbage", "Step 1: 7+8=15\nAnswer: 72\nmore"])
def test_any_model_output_gets_labels(completion):
    scores = load_scorer("oracle").score("Compute: (7+8)*5-3\n", completion).scores
    assert all(s in (0.0, 1.0) for s in scores)


def test_noisy_oracle_flips_labels_at_its_rate_and_is_a_fixed_function():
    exact = load_scorer("oracle", separator="\n")
    demos = _demos(400)
    for eps in (0.2, 0.4):
        noisy = load_scorer(f"oracle:eps={eps},seed=7", separator="\n")
        flips = total = 0
        for demo in demos:
            a = exact.score(demo.prompt, demo.completion).scores
            b = noisy.score(demo.prompt, demo.completion).scores
            assert b == noisy.score(demo.prompt, demo.completion).scores  # same trace, same labels
            flips += sum(x != y for x, y in zip(a, b, strict=True))
            total += len(a)
        # binomial: 4 standard errors around eps
        se = (eps * (1 - eps) / total) ** 0.5
        assert abs(flips / total - eps) < 4 * se, (eps, flips / total)
    other = load_scorer("oracle:eps=0.4,seed=8", separator="\n")
    same = load_scorer("oracle:eps=0.4,seed=7", separator="\n")
    d = demos[0]
    differ = sum(other.score(x.prompt, x.completion).scores != same.score(x.prompt, x.completion).scores
                 for x in demos[:50])
    assert differ > 10, d


@pytest.mark.parametrize(("spec", "match"), [("oracle:eps=2", "eps"), ("oracle:k=3", "eps="),
                                             ("oracle:eps=abc", "float"), ("mc:k=4", "trainer")])
def test_bad_specs_say_why(spec, match):
    with pytest.raises(ValueError, match=match):
        load_scorer(spec)


def test_a_prompt_outside_the_task_is_a_clear_error():
    with pytest.raises(ValueError, match="built-in task"):
        load_scorer("oracle").score("What is 2+2?", "Answer: 4")

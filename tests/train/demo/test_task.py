"""The built-in arithmetic task: determinism, exact reference solutions, noisy demonstrations."""

from __future__ import annotations

import ast
import operator

import pytest
from veristep.prm import RuleScorer
from veristep.train.demo import task

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def _evaluate(expr: str) -> int:
    """Evaluate an integer + - * expression by its AST (standard precedence), nothing else."""

    def walk(node: ast.AST) -> int:
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        raise AssertionError(f"unexpected node {ast.dump(node)}")

    return walk(ast.parse(expr, mode="eval").body)


def test_generator_is_deterministic_per_seed():
    a = task.make_problems(50, seed=3, level="hard")
    b = task.make_problems(50, seed=3, level="hard")
    c = task.make_problems(50, seed=4, level="hard")
    assert a == b
    assert a != c
    assert set(a[0]) >= {"prompt", "answer", "solution", "num_steps", "level"}


def test_default_mixes_the_levels_evenly():
    problems = task.make_problems(900, seed=0)
    counts = {lv: sum(p["level"] == lv for p in problems) for lv in task.LEVELS}
    # chain8 (the step-credit condition's level) is drawn only when asked for
    assert all(250 <= counts[lv] <= 350 for lv in task.MIXED_LEVELS), counts
    assert sum(counts[lv] for lv in task.MIXED_LEVELS) == len(problems), counts
    assert problems == task.make_problems(900, seed=0, level="mixed")
    for p in problems[:100]:
        d = task.LEVELS[p["level"]]
        assert d.min_steps <= p["num_steps"] <= d.max_steps


@pytest.mark.parametrize("level", list(task.LEVELS))
def test_reference_solutions_are_exact_and_match_the_prompt(level):
    for problem in task.make_problems(300, seed=11, level=level):
        expr = problem["prompt"].removeprefix(task.PROMPT_PREFIX).rstrip(task.STEP_SEPARATOR)
        # The prompt under standard precedence equals the answer ...
        assert _evaluate(expr) == int(problem["answer"])
        lines = problem["solution"].split(task.STEP_SEPARATOR)
        assert lines[-1] == f"{task.ANSWER_PREFIX}{problem['answer']}"
        assert len(lines) - 1 == problem["num_steps"]
        check = task.check_completion(problem["solution"], problem["answer"])
        # ... and every step of the reference is an exact, true claim.
        assert check.correct and all(check.steps_correct)
        assert len(check.steps_correct) == problem["num_steps"]
        start, chain = task.parse_prompt(problem["prompt"])
        assert task.render_expression(start, chain) == expr
        # Short enough for a character-level policy (chain8's eight steps take up to ~140).
        limit = 120 if level in task.MIXED_LEVELS else 160
        assert len(problem["prompt"]) < 40 and len(problem["solution"]) < limit


def test_difficulty_knob_controls_steps_and_operand_size():
    small = task.make_problems(200, seed=0, steps=2, max_operand=9, max_factor=3)
    assert {p["num_steps"] for p in small} == {2}
    for p in small:
        start, chain = task.parse_prompt(p["prompt"])
        assert 1 <= start <= 9
        assert all(b <= 3 if op == "*" else b <= 9 for op, b in chain)
    ranged = task.make_problems(300, seed=0, steps=(2, 5))
    assert {p["num_steps"] for p in ranged} == {2, 3, 4, 5}
    only_add = task.make_problems(50, seed=0, ops="+")
    assert all("-" not in p["prompt"] and "*" not in p["prompt"] for p in only_add)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"level": "impossible"},
        {"steps": 0},
        {"max_factor": 1},
        {"ops": "/"},
        {"digits": 3},
        {"level": "mixed", "steps": 2},
    ],
)
def test_bad_difficulty_is_rejected_with_the_option_named(kwargs):
    with pytest.raises(ValueError):
        task.make_problems(1, seed=0, **kwargs)


def test_splits_are_disjoint_and_sized():
    train, held_out = task.make_splits(400, 100, seed=0, level="medium")
    assert len(train) == 400 and len(held_out) == 100
    assert not {p["prompt"] for p in train} & {p["prompt"] for p in held_out}
    with pytest.raises(ValueError, match="too few distinct"):
        task.make_splits(500, 10, seed=0, steps=1, max_operand=2, ops="+")


def test_noisy_demonstrations_hit_the_requested_error_rates():
    problems = task.make_problems(3000, seed=5, level="medium")
    demos = task.make_noisy_demonstrations(problems, seed=5, step_error_rate=0.2, answer_error_rate=0.1)
    n_steps = wrong_steps = 0
    for demo, problem in zip(demos, problems, strict=True):
        check = task.check_completion(demo.completion, problem["answer"])
        assert demo.correct == check.correct
        # The injected mistakes are exactly the steps the exact checker rejects.
        assert [i for i, ok in enumerate(check.steps_correct) if not ok] == list(demo.wrong_steps)
        if demo.wrong_answer:
            assert all(check.steps_correct) and not check.correct
        n_steps += len(check.steps_correct)
        wrong_steps += len(demo.wrong_steps)
    assert wrong_steps / n_steps == pytest.approx(0.2, abs=0.02)
    clean = [d for d in demos if not d.wrong_steps]
    assert sum(d.wrong_answer for d in clean) / len(clean) == pytest.approx(0.1, abs=0.02)
    # With no noise every demonstration is the reference solution.
    exact = task.make_noisy_demonstrations(problems[:100], seed=0, step_error_rate=0, answer_error_rate=0)
    assert [d.completion for d in exact] == [p["solution"] for p in problems[:100]]


@pytest.mark.parametrize(
    "completion",
    [
        "",
        "Answer:",
        "Step 1: 3+4=7\nAnswer: 7x",
        "\x00\x00",
        "Step 1: 9" * 50,
        "Answer: 99999999999999999999",
        "Answer: " + "7" * 5000,
        "Step 1: " + "9" * 5000 + "*9=1\nAnswer: 8",
    ],
)
def test_check_completion_survives_garbage(completion):
    check = task.check_completion(completion, "7")
    assert not check.correct


def test_rule_prm_scores_every_reference_step_as_correct():
    scorer = RuleScorer(separator=task.STEP_SEPARATOR)
    for problem in task.make_problems(50, seed=2, level="hard"):
        scores = scorer.score(problem["prompt"], problem["solution"])
        claim_scores = scores.scores[: problem["num_steps"]]
        assert claim_scores == [1.0] * problem["num_steps"]
    # A miscomputed step is caught.
    demo = task.make_noisy_demonstrations(
        task.make_problems(1, seed=2, level="hard"), seed=0, step_error_rate=1.0, answer_error_rate=0
    )[0]
    assert all(s < 1.0 for s in scorer.score(demo.prompt, demo.completion).scores[:4])


def test_the_old_name_of_problem_spec_still_works_and_warns():
    with pytest.warns(DeprecationWarning, match="use ProblemSpec"):
        old = task.Difficulty
    assert old is task.ProblemSpec and task.LEVELS["easy"] == old(2, 2, 9, 3)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        task.Nope  # noqa: B018

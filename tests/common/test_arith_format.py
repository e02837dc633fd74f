"""The arithmetic task's text format, shared by the demo task (writer) and the oracle (reader)."""

from __future__ import annotations

import pytest
from veristep.common import arith_format as fmt
from veristep.prm.oracle import oracle_labels
from veristep.train.demo import task


def test_the_demo_task_keeps_its_names_and_they_are_the_format_modules():
    for name in ("STEP_SEPARATOR", "ANSWER_PREFIX", "PROMPT_PREFIX", "OPS", "apply_op",
                 "render_expression", "format_step", "parse_prompt", "StepCheck",
                 "check_completion"):
        assert getattr(task, name) is getattr(fmt, name), name
        assert name in task.__all__


def test_prompts_written_by_the_task_parse_back_to_their_chain():
    for problem in task.make_problems(60, seed=3):
        start, chain = fmt.parse_prompt(problem["prompt"])
        assert problem["prompt"] == f"{fmt.PROMPT_PREFIX}{fmt.render_expression(start, chain)}\n"
        value = start
        for op, operand in chain:
            value = fmt.apply_op(value, op, operand)
        assert str(value) == problem["answer"]


@pytest.mark.parametrize("bad", ["", "Compute: ", "Compute: 7+", "Compute: 7/2", "Hello 3+4"])
def test_parse_prompt_refuses_what_is_not_a_prompt(bad):
    with pytest.raises(ValueError, match="not a task prompt"):
        fmt.parse_prompt(bad)


def test_reference_solutions_check_right_for_both_readers():
    for problem in task.make_problems(30, seed=5):
        check = fmt.check_completion(problem["solution"], problem["answer"])
        labels = oracle_labels(problem["prompt"], problem["solution"])
        assert check.correct and all(check.steps_correct)
        assert all(labels.correct) and labels.is_answer[-1]
        assert len(check.steps_correct) == problem["num_steps"] == len(labels.correct) - 1


def test_a_slip_is_caught_and_odd_lines_never_raise():
    check = fmt.check_completion("Step 1: 7+8=16\nStep 2: 16*5=80\nAnswer: 80", "75")
    assert check.steps_correct == [False, True] and check.answer == 80 and not check.correct
    long = "9" * (fmt.MAX_DIGITS + 1)
    assert fmt.has_overlong_number(f"Step 1: {long}+1=2") and not fmt.has_overlong_number("9" * 30)
    check = fmt.check_completion(f"Step 1: {long}*{long}=1\nnoise\nAnswer: x", "not a number")
    assert check.steps_correct == [False, False, False] and check.answer is None and not check.correct
    assert fmt.format_step(2, 15, "*", 5, 75) == "Step 2: 15*5=75"
    with pytest.raises(ValueError, match="unknown operation"):
        fmt.apply_op(1, "/", 2)

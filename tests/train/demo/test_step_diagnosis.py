"""The step diagnosis of the built-in task: first errors, their kind, conditional step accuracy."""

from __future__ import annotations

import pytest
from veristep.train.demo.step_diagnosis import (
    conditional_step_accuracy,
    diagnose,
    reference_solution,
    summarise_traces,
)

PROMPT = "Compute: 7+8-3+2\n"
RIGHT = "Step 1: 7+8=15\nStep 2: 15-3=12\nStep 3: 12+2=14\nAnswer: 14"


def test_reference_solution():
    steps, answer = reference_solution(PROMPT)
    assert steps == ["Step 1: 7+8=15", "Step 2: 15-3=12", "Step 3: 12+2=14"] and answer == "Answer: 14"


@pytest.mark.parametrize(("completion", "first", "kind", "char"), [
    (RIGHT, None, None, None),
    # a result slip at step 2: the first wrong character is the '1' of 12 -> '3' of 13
    ("Step 1: 7+8=15\nStep 2: 15-3=13\nStep 3: 13+2=15\nAnswer: 15", 1, "result", ("3", "2")),
    ("Step 1: 7+8=15\nStep 2: 15-4=11\nStep 3: 11+2=13\nAnswer: 13", 1, "operand", ("4", "3")),
    ("Step 1: 7+8=15\nStep 2 15-3=12\nAnswer: 12", 1, "format", (" ", ":")),
    ("Step 1: 7+8=15\nAnswer: 15", 1, "stopped", ("A", "S")),
    ("Step 1: 7+8=15\nStep 2: 15-3=12\nStep 3: 12+2=14\nAnswer: 41", None, "answer", ("4", "1")),
    ("Step 1: 7+8=15\nStep 2: 15-3=12\nStep 3: 12+2=14\nAnswer: 1", None, "answer", None),
])
def test_diagnose(completion, first, kind, char):
    d = diagnose(PROMPT, completion)
    assert d.first_error == first and d.kind == kind
    assert d.correct == (kind is None)
    if char is None:
        assert kind is None or d.expected_char == "4"  # a cut answer: the next reference character
    else:
        got, want = char
        assert completion[d.char_index] == got and d.expected_char == want


def test_conditional_accuracy_and_summary():
    wrong2 = "Step 1: 7+8=15\nStep 2: 15-3=13\nStep 3: 13+2=15\nAnswer: 15"
    wrong1 = "Step 1: 7+8=16\nStep 2: 16-3=13\nStep 3: 13+2=15\nAnswer: 15"
    diags = [diagnose(PROMPT, c) for c in (RIGHT, wrong2, wrong1, wrong1)]
    # step 1: 2 of 4 right; step 2: of the 2 on track, 1 right; step 3: the 1 on track is right
    assert conditional_step_accuracy(diags, 3) == [0.5, 0.5, 1.0]
    s = summarise_traces(diags, group_size=2, n_steps=3)
    assert s["pass@1"] == 0.25 and s["all_wrong_groups"] == 0.5 and s["all_correct_groups"] == 0.0
    assert s["first_error_kinds"]["result"] == 1.0 and s["first_error_position"] == {0: 2, 1: 1}
    with pytest.raises(ValueError, match="group_size"):
        summarise_traces(diags[:3], group_size=2, n_steps=3)


def test_untrusted_text_is_linear():
    d = diagnose(PROMPT, "9" * 1_000_000)
    assert d.kind == "format" and not d.correct

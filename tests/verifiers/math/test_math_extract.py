"""Final-answer extraction: which answer, where, and robustness on hostile text."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from veristep.verifiers.math.extract import ExtractionMethod, choice_letter, extract_answer


@pytest.mark.parametrize(
    ("text", "answer", "method"),
    [
        ("so $\\boxed{42}$.", "42", ExtractionMethod.BOXED),
        ("$\\boxed{12}$ no wait, $\\boxed{14}$", "14", ExtractionMethod.BOXED),
        ("\\fbox{7}", "7", ExtractionMethod.BOXED),
        ("It is $\\boxed 7$.", "7", ExtractionMethod.BOXED),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}", ExtractionMethod.BOXED),
        ("\\boxed{\\{1,2\\}}", "\\{1,2\\}", ExtractionMethod.BOXED),
        ("The final answer is $\\frac{3}{4}$.", "\\frac{3}{4}", ExtractionMethod.ANSWER_PHRASE),
        ("Thus the answer is 12 apples.", "12 apples", ExtractionMethod.ANSWER_PHRASE),
        ("Answer: 9", "9", ExtractionMethod.ANSWER_PHRASE),
        ("**Final Answer:** 36", "36", ExtractionMethod.ANSWER_PHRASE),
        ("Final answer:\n$$ 100 $$", "100", ExtractionMethod.ANSWER_PHRASE),
        ("The answer is \\(\\frac{7}{2}\\).", "\\frac{7}{2}", ExtractionMethod.ANSWER_PHRASE),
        ("The final answer is $\\$25$.", "\\$25", ExtractionMethod.ANSWER_PHRASE),
        ("work\n#### 1,000", "1,000", ExtractionMethod.GSM8K),
        ("<think>x</think><answer> 17 </answer>", "17", ExtractionMethod.ANSWER_TAG),
        ("So the total is **42**.", "42", ExtractionMethod.BOLD),
        ("$\\boxed{5}$ is wrong, the final answer is 6.", "6", ExtractionMethod.ANSWER_PHRASE),
        ("The answer is $\\boxed{5}$.", "5", ExtractionMethod.BOXED),
        ("$\\boxed{63}$ points; the correct answer of 63 holds.", "63", ExtractionMethod.BOXED),
        ("so $\\boxed{44}$. Check: our answer is correct.", "44", ExtractionMethod.BOXED),
    ],
)
def test_extracts_final_answer_with_its_span(text: str, answer: str, method: ExtractionMethod) -> None:
    ext = extract_answer(text)
    assert ext is not None
    assert (ext.answer, ext.method) == (answer, method)
    assert text[ext.start : ext.end] == answer


@pytest.mark.parametrize(
    "text",
    ["", "no answer here", "We have 2 + 3 = 5", "\\boxed{5", "$\\boxed{}$", "<answer></answer>", "$$" * 100],
)
def test_no_answer_is_none(text: str) -> None:
    assert extract_answer(text) is None


def test_choice_letters_only_in_choice_mode() -> None:
    text = "Options (A) and (C) fail; it must be (B)."
    assert extract_answer(text) is None
    ext = extract_answer(text, choices=True)
    assert ext is not None and ext.answer == "B" and ext.method is ExtractionMethod.CHOICE_LETTER


@pytest.mark.parametrize(
    ("answer", "letter"),
    [("B", "B"), ("(b)", "B"), ("\\text{(C)}", "C"), ("(D) 42", "D"), ("B because A is small", "B"),
     ("a+1", None), ("b^2", None), ("A, B, C or D", None), ("42", None)],
)
def test_choice_letter(answer: str, letter: str | None) -> None:
    assert choice_letter(answer) == letter


@pytest.mark.parametrize(
    "text",
    [
        "\\boxed{" + "{" * 100_000,
        "\\boxed{" * 20_000 + "5",
        "$\\boxed{" + "{" * 50_000 + "1" + "}" * 50_000 + "}$",
        "The answer is " + "(" * 50_000,
        "answer is " * 20_000,
        "**" * 50_000,
    ],
)
def test_hostile_text_is_linear_time(text: str) -> None:
    start = time.perf_counter()
    extract_answer(text)
    extract_answer(text, choices=True)
    assert time.perf_counter() - start < 5.0  # a generous hang bound, not a benchmark


def test_non_string_input_is_no_answer() -> None:
    assert extract_answer(None) is None  # type: ignore[arg-type]


@given(st.text(alphabet=st.sampled_from(list("\\boxed{}$()*# \nAnswer:is final0123456789<>/")), max_size=300))
@settings(max_examples=300, deadline=None)
def test_random_text_never_raises_and_spans_are_exact(text: str) -> None:
    for choices in (False, True):
        ext = extract_answer(text, choices=choices)
        if ext is not None:
            assert ext.answer and text[ext.start : ext.end] == ext.answer

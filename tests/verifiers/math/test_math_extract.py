"""Final-answer extraction: which answer, where, and robustness on hostile text."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from veristep.verifiers.math.extract import (
    ExtractionMethod,
    choice_letter,
    extract_answer,
    reference_answer,
)


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
        # PRM800K's traces: a closing "# Answer" line, the answer alone below it (issue 31)
        ("I conclude that my answer is correct.\n# Answer\n\n-50", "-50", ExtractionMethod.ANSWER_HEADING),
        ("so it is $(-1, 6)$.\n# Answer\n(-1, 6)", "(-1, 6)", ExtractionMethod.ANSWER_HEADING),
        ("# Answer:\n\n$x=3$\n", "x=3", ExtractionMethod.ANSWER_HEADING),
        ("# Answer\n\nThe answer is $\\boxed{5}$.", "5", ExtractionMethod.BOXED),
    ],
)
def test_extracts_final_answer_with_its_span(text: str, answer: str, method: ExtractionMethod) -> None:
    ext = extract_answer(text)
    assert ext is not None
    assert (ext.answer, ext.method) == (answer, method)
    assert text[ext.start : ext.end] == answer


@pytest.mark.parametrize(
    "text",
    ["", "no answer here", "\\boxed{5", "$\\boxed{}$", "<answer></answer>", "$$" * 100, "AZYUK2A",
     "What is $6 \\times 7$?", "I hope it is correct. <|im_start|>user", "Answer $ \n $",
     # cut off mid-sentence: no answer was given yet
     "Let the integers be $n-1, n, n+1$; their sum is $3n$. We need $3n$ to be a cube, so",
     "Cubes: 1, 8, 27, 64. Checking each in turn we",
     "We want $k^3 = 3n$. Hmm, let me think about this more carefully. Let me reconsider the problem",
     "The sum is $3n$, hence $3 \\mid m$ and"],
)
def test_no_answer_is_none(text: str) -> None:
    assert extract_answer(text) is None
    assert extract_answer(text, mode="strict") is None


@pytest.mark.parametrize(
    ("text", "answer", "method"),
    [
        # the bare answer: the whole text when it is an expression, not prose
        ("x = 9", "x = 9", ExtractionMethod.BARE),
        ("28 percent", "28 percent", ExtractionMethod.BARE),
        ("-\\frac{10}{9}", "-\\frac{10}{9}", ExtractionMethod.BARE),
        ("1 000", "1 000", ExtractionMethod.BARE),
        ("$\\frac13 $", "\\frac13", ExtractionMethod.MATH),
        # the final sentence: its last math span that is not a name, else its last number
        ("Therefore, $\\cos \\angle RPS = -\\frac{24}{25}$.", "\\cos \\angle RPS = -\\frac{24}{25}", ExtractionMethod.MATH),
        ("So the area is \\(48\\) square units.", "48", ExtractionMethod.MATH),
        ("The volume of $ABCDEFGH$ is 120. I hope it is correct.", "120", ExtractionMethod.NUMBER),
        ("We have 2 + 3 = 5", "5", ExtractionMethod.NUMBER),
        ("the number is not 10 which is 1,000.99€", "1,000.99", ExtractionMethod.NUMBER),
        ("It increases by 100%.", "100%", ExtractionMethod.NUMBER),
        ("The train leaves at 12:00.", "12:00", ExtractionMethod.NUMBER),
        ("the probability is 2/3. <|im_start|>user", "2/3", ExtractionMethod.NUMBER),
        ("Since $x$ is odd, $x$ must be 7.", "7", ExtractionMethod.NUMBER),
        ("Answer \\[ \n 9 \n \\]", "9", ExtractionMethod.MATH),
        # a display formula ending with a period ends its sentence
        ("$$\\frac{a}{b} \\geq \\frac{2}{1}.$$ Therefore, it increases by 100%.", "100%", ExtractionMethod.NUMBER),
        # a question restates the problem and is skipped
        ("The sum is $5$. What is $6 \\times 7$?", "5", ExtractionMethod.MATH),
        # prose after a marker: the answer the prose states
        ("Final Answer: The largest $n$ is 34.", "34", ExtractionMethod.ANSWER_PHRASE),
        ("Final Answer: Jane started 3 hours ago. I hope it is correct.", "3", ExtractionMethod.ANSWER_PHRASE),
        # quotes around an answer are not part of it
        ('The final answer is "$12$".', "12", ExtractionMethod.ANSWER_PHRASE),
        # GSM8K's #### anywhere, before a number (as verl's gsm8k scorer reads it)
        ("so 500 + 500 = 1000 dollars. #### 1000", "1000", ExtractionMethod.GSM8K),
    ],
)
def test_auto_extraction_without_markers(text: str, answer: str, method: ExtractionMethod) -> None:
    ext = extract_answer(text)
    assert ext is not None
    assert (ext.answer, ext.method) == (answer, method)
    assert text[ext.start : ext.end] == answer
    if method in (ExtractionMethod.BARE, ExtractionMethod.MATH, ExtractionMethod.NUMBER):
        assert extract_answer(text, mode="strict") is None  # marker-only keeps today's behaviour


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("$$\\boxed{(2, 2)} \\quad \\text{and} \\quad \\boxed{(6, 2)}$$", "(2, 2), (6, 2)"),
        ("\\boxed{1} papers and \\boxed{2} bins", "1, 2"),
        ("\\boxed{1},\\boxed{2},\\boxed{3}", "1, 2, 3"),
        ("\\(\\boxed{1}\\) and \\(\\boxed{-2}\\).", "1, -2"),
        ("$$\\boxed{(3, 3)} \\text{ for part (a) and } \\boxed{(1, 1)}$$", "(3, 3), (1, 1)"),
        ("The numbers are $21,16$ or $11$.", "21,16, 11"),
    ],
)
def test_boxes_and_spans_joined_by_connectors_form_one_answer(text: str, answer: str) -> None:
    ext = extract_answer(text)
    assert ext is not None and ext.answer == answer and len(ext.parts) >= 2
    assert ", ".join(text[a:b].strip() for a, b in ext.parts) == answer


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("$\\boxed{12}$ no wait, $\\boxed{14}$", "14"),  # a correction is not a list
        ("So $\\boxed{5}$. Wait, that is wrong. The answer is $\\boxed{6}$.", "6"),  # a sentence between
        ("\\boxed{1} no no no no no \\boxed{2}", "2"),  # no connector
        ("\\boxed{4} ... so \\boxed{4}", "4"),  # the same box repeated is one answer
        ("$x=1$ gives $y = 2$", "y = 2"),  # prose between two formulas
    ],
)
def test_boxes_that_are_not_a_list_stay_apart(text: str, answer: str) -> None:
    ext = extract_answer(text)
    assert ext is not None and ext.answer == answer and not ext.parts


def test_references_as_datasets_ship_them() -> None:
    gsm8k = "Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips in April and May.\n#### 72"
    assert reference_answer(gsm8k).answer == "72"
    solution = "Half of them are red, so the fraction is $\\boxed{\\frac{1}{2}}$. Indeed $2 \\cdot 3 = 6$."
    assert reference_answer(solution).answer == "\\frac{1}{2}"
    assert reference_answer("$28\\%$").answer == "28\\%"  # a MATH answer field, delimiters off
    assert reference_answer("\\text{Evelyn}").answer == "\\text{Evelyn}"
    assert reference_answer("(-\\infty, 3] \\cup (4, \\infty)").answer == "(-\\infty, 3] \\cup (4, \\infty)"
    prose = "The stock loses 10 percent on Monday and 20 percent on Tuesday, so the loss is $28\\%$."
    assert reference_answer(prose).answer == "28\\%"
    for unusable in ("", "   ", "We could not find the value of this expression in the book."):
        assert reference_answer(unusable) is None


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


@given(st.text(alphabet=st.sampled_from(list("\\boxed{}$()*# \nAnswer:is final0123456789<>/,.and")), max_size=300))
@settings(max_examples=300, deadline=None)
def test_random_text_never_raises_and_spans_are_exact(text: str) -> None:
    for choices in (False, True):
        for mode in ("auto", "strict"):
            ext = extract_answer(text, choices=choices, mode=mode)  # type: ignore[arg-type]
            if ext is None:
                continue
            assert ext.answer
            if ext.parts:  # a joined answer: each part is exact, the answer joins them
                assert ", ".join(text[a:b].strip() for a, b in ext.parts) == ext.answer
                assert (ext.start, ext.end) == (ext.parts[0][0], ext.parts[-1][1])
            else:
                assert text[ext.start : ext.end] == ext.answer


def test_answer_heading_only_at_the_end_and_as_a_marker_when_cut_off() -> None:
    # not a heading: "# Answer" mid-line, or text after the answer line
    assert extract_answer("x # Answer\n5").method is not ExtractionMethod.ANSWER_HEADING
    assert extract_answer("# Answer\n5\nmore text").method is not ExtractionMethod.ANSWER_HEADING
    from veristep.verifiers.core.text import mark_truncated
    from veristep.verifiers.math import MathVerifier

    with MathVerifier(workers=1, timeout=5.0) as v:
        # before: "answer is correct" was read as the answer phrase and the result was wrong
        assert v.verify("I conclude that my answer is correct.\n# Answer\n\n-50", "-50").status.value == "correct"
        # a marker: a cut-off trace that reached its "# Answer" line keeps its reward
        assert v.verify(mark_truncated("so 13/18.\n# Answer\n\n13/18"), "\\frac{13}{18}").status.value == "correct"

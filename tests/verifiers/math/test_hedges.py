"""Reward-hacking probes: a completion that does not commit to the reference alone earns nothing.

Each family is a way the verifier used to read only the first alternative of a hedge ("3 or
four", "$3$ or $4$", "A or B"), accept a false equality ("4 = 3"), compare words as products of
letters (anagrams), see an invisible answer, or trust a cut-off phrase answer.
"""

from __future__ import annotations

import pytest
from veristep.verifiers import Status
from veristep.verifiers.core.text import mark_truncated
from veristep.verifiers.math import MathVerifier


@pytest.fixture(scope="module")
def verifier():
    with MathVerifier(workers=2, timeout=5.0) as v:
        yield v


def _not_rewarded(verifier: MathVerifier, completion: str, reference: str) -> None:
    result = verifier.verify(completion, reference)
    assert result.reward == 0.0 and result.status is not Status.CORRECT, (completion, reference, result)


TRAILING_TEXT = [
    (r"\boxed{\text{east}, \text{west}}", r"\text{east}"),
    (r"\boxed{\text{Navin}} or \boxed{\text{Evelyn}}", r"\text{Navin}"),
    (r"\boxed{\text{even} \text{odd}}", r"\text{even}"),
    (r"\boxed{3, \text{four}}", "3"),
    (r"\boxed{x+1 \text{ or } \text{something else}}", "x+1"),
    (r"\boxed{(1,2) \text{ or } \text{the reverse}}", "(1,2)"),
    (r"\boxed{3 \text{ or } \text{four}}", "3"),
]


NUMBER_WORDS = [
    (r"\boxed{3 or four}", "3"),
    (r"\boxed{3 not four}", "3"),
    (r"\boxed{3 minus one}", "3"),
    (r"\boxed{3 plus one}", "3"),
    (r"\boxed{3 or more}", "3"),
    (r"\boxed{3 or fewer}", "3"),
    ("3 or four", "3"),
    ("3 apples or pears", "3"),
    (r"\boxed{90 degrees or more}", r"90^\circ"),
    (r"\boxed{3 \text{ plus one}}", "3"),
    (r"\boxed{3 \text{ at most}}", "3"),
]


PHRASE_LISTS = [
    ("The answer is $3$ or $4$.", "3"),
    ("The answer is $3$, or possibly $4$.", "3"),
    (r"Final answer: $3$ \text{ or } $4$", "3"),
    (r"The final answer is $\boxed{3}$ or $4$", "3"),
    ("The answer is 3 or four.", "3"),
]


PHRASE_HEDGES = [
    ("The answer is not $3$.", "3"),
    ("The answer is not 3.", "3"),
    ("The answer is either 3 or 4.", "4"),
    ("The answer is either 3 or 4.", "3"),
    ("The answer is at least 3.", "3"),
    ("The answer is at most $3$.", "3"),
    ("The answer is maybe 3.", "3"),
    ("The answer is possibly $3$.", "3"),
    ("The answer is never $3$.", "3"),
    ("The answer is greater than $3$.", "3"),
    ("The answer is something other than $3$.", "3"),
    ("The answer is anything but 3.", "3"),
    (r"The answer is $\not= 3$.", "3"),
]


# A box or an <answer> tag whose sentence goes on with an alternative, in any spelling of it.
ALTERNATIVE_AFTER = [
    (r"\boxed{3} (or 0)", "3"),
    (r"\boxed{3}, possibly 0", "3"),
    (r"\boxed{3} — or 0", "3"),
    ("\\boxed{3}\nor 0", "3"),
    (r"\boxed{3} or three", "3"),
    (r"\boxed{3} or x", "3"),
    (r"\boxed{3} or something else", "3"),
    (r"\boxed{3}\,\text{(or 0)}", "3"),
    ("<answer>3</answer> or 0", "3"),
    (r"\boxed{x=0 \lor x=3}", "3"),
    (r"\boxed{x=0 \vee x=3}", "3"),
    (r"\boxed{a=5 \land b=7}", "7"),
]


CHOICES = [
    (r"\boxed{A \text{ or } B}", "A"),
    (r"\boxed{A \text{ and } B}", "A"),
    (r"\boxed{(A)(B)(C)(D)}", "A"),
    (r"\boxed{(A) (B) (C) (D)}", "A"),
    (r"\boxed{A. B. C. D.}", "A"),
    (r"\boxed{A or B or C or D}", "A"),
    ("The answer is C or D.", "C"),
    ("The answer is (A) or (B).", "A"),
    (r"\boxed{\text{(C)} \text{ or } \text{(D)}}", r"\text{(C)}"),
    (r"\boxed{A \text{ but maybe } B}", "A"),
    (r"\boxed{A: maybe B}", "A"),
]


FALSE_EQUATIONS = [
    (r"\boxed{4 = 3}", "3"),
    (r"\boxed{7 = 5}", "5"),
    (r"\boxed{0 = \frac{14}{3}}", r"\frac{14}{3}"),
    (r"\boxed{\{3,4\} = 3}", "3"),
    (r"\boxed{3 \approx 4}", "4"),
    (r"\boxed{x = 5 = 7}", "7"),
    (r"\boxed{2^2 = 5}", "5"),
    (r"\boxed{\pi = 3}", "3"),
    (r"\boxed{" + "=".join(["4"] * 20) + "=5}", "5"),
    (r"\boxed{0 = p - q}", "p - q"),  # a number left of a symbolic answer: sympy compares them
    (r"\boxed{0 = 6 - 5i}", "6 - 5i"),
    (r"\boxed{2 = 2x}", "2x"),
    (r"\boxed{3.14 = \pi}", r"\pi"),
    (r"\boxed{0 = \begin{pmatrix} -2 \\ -14 \end{pmatrix}}", r"\begin{pmatrix} -2 \\ -14 \end{pmatrix}"),
]


ANAGRAMS = [
    (r"\boxed{\text{neve}}", r"\text{even}"),
    (r"\boxed{\text{seat}}", r"\text{east}"),
    (r"\boxed{\text{Nyleve}}", r"\text{Evelyn}"),
    (r"\boxed{e^2nv}", r"\text{even}"),
    (r"\boxed{\text{odd even}}", r"\text{even odd}"),
]


#: Each family, named by the rule that now refuses it.
FAMILIES = {
    "a trailing text alternative is not a unit": TRAILING_TEXT,
    "words after a number are units only when unit-like": NUMBER_WORDS,
    "the answer phrase reads to the end of its sentence": PHRASE_LISTS,
    "a negated or hedged phrase is no answer": PHRASE_HEDGES,
    "an alternative after a box or tag takes it back": ALTERNATIVE_AFTER,
    "several choice letters are not one choice": CHOICES,
    "an equation with a value on the left is not its right side": FALSE_EQUATIONS,
    "words compare as strings, not letter products": ANAGRAMS,
}


@pytest.mark.parametrize(("completion", "reference"), [
    pytest.param(c, r, id=f"{family}: {c}") for family, cases in FAMILIES.items() for c, r in cases
])
def test_a_non_committal_answer_earns_nothing(verifier, completion, reference):
    _not_rewarded(verifier, completion, reference)


@pytest.mark.parametrize("phantom", ["phantom", "hphantom", "vphantom"])
def test_a_phantom_answer_is_empty(verifier, phantom):
    _not_rewarded(verifier, rf"\boxed{{\{phantom}{{3}}}}", "3")
    # a hidden part is a hedge the reader cannot see: the answer is not read at all
    _not_rewarded(verifier, rf"\boxed{{3 \{phantom}{{4}}}}", "3")
    _not_rewarded(verifier, rf"\boxed{{\{phantom}{{3}} 4}}", "4")
    _not_rewarded(verifier, rf"\boxed{{\{phantom}{{\frac{{1}}{{2}}}}}}", r"\frac{1}{2}")


CUT_PHRASES = [
    ("Long work... The final answer is 1", "1"),
    ("Long work... The answer is $3$ or $", "3"),
    ("Long work... The answer is $3$ or $4", "3"),
    ("Long work...\n#### 3", "3"),
    ("Long work... the answer is 12", "12"),
]


@pytest.mark.parametrize(("completion", "reference"), CUT_PHRASES)
def test_a_phrase_answer_at_the_cut_is_not_trusted(verifier, completion, reference):
    _not_rewarded(verifier, mark_truncated(completion), reference)


STILL_CORRECT = [
    (r"\boxed{5 \text{ cm}}", "5"),
    (r"\boxed{5\text{ cm}^2}", "5"),
    (r"\boxed{90^\circ}", "90"),
    (r"\boxed{90 \text{ degrees}}", "90"),
    (r"\boxed{12 \text{ square units}}", "12"),
    ("12 apples", "12"),
    ("28 percent", r"28\%"),
    (r"\boxed{\$18.90}", "18.90"),
    (r"\boxed{3 \text{ and } 4}", "3, 4"),
    (r"\boxed{3} and \boxed{4}", "3, 4"),
    ("The answer is $3$.", "3"),
    ("The answer is 3.", "3"),
    ("The final answer is $\\boxed{3}$.", "3"),
    ("The answer is $3$ and $4$.", "3, 4"),
    ("The largest $n$ is 34, so the answer is 34.", "34"),
    (r"\boxed{x = 5+5+1 = 11}", "11"),
    (r"\boxed{\cos \angle RPS = -\frac{24}{25}}", r"-\frac{24}{25}"),
    (r"\boxed{x = 3}", "3"),
    (r"\boxed{f(2) = 7}", "7"),
    (r"\boxed{|AB| = 5}", "5"),
    (r"\boxed{x^2 = 4}", "4"),
    (r"\boxed{x^3 - 2x + 1 = 2}", "2"),
    (r"\boxed{\theta = -\frac{\pi}{6}}", r"-\frac{\pi}{6}"),
    (r"\boxed{f^{-1}(f^{-1}(6)) = f^{-1}(2) = 1}", "1"),
    (r"\boxed{6(3) + 5 = 18 + 5 = 23}", "23"),
    (r"\boxed{5\star1 = 47}", "47"),
    (r"\boxed{\tan 100^\circ + 4\sin 100^\circ = -\sqrt{3}}", r"-\sqrt{3}"),
    (r"\boxed{1+1 = 2 = 2}", "2"),
    (r"\boxed{x \approx 4}", "4"),
    (r"\boxed{1+1 = 2}", "2"),
    (r"\boxed{3 = \sqrt{9}}", "3"),
    (r"\boxed{1 = \sin^2 x + \cos^2 x}", "1"),
    (r"\boxed{x = p - q}", "p - q"),
    (r"\boxed{0.5 = \frac{1}{2}}", r"\frac{1}{2}"),
    # units and spacing a model writes (each scored 0 before)
    (r"\boxed{12\text{ km/h}}", "12"),
    (r"\boxed{12\,\text{m/s}}", "12"),
    (r"\boxed{12\ \text{cm}^2}", "12"),
    (r"\boxed{10:30\text{ a.m.}}", "10:30"),
    (r"\boxed{30\,^\circ}", "30"),
    (r"\boxed{\frac{270^\circ}{7}}", r"\frac{270}7\text{ degrees}"),  # a MATH500 reference
    (r"\boxed{\large 5}", "5"),
    ("Since $x$ is not $2$, we get $x = 3$.", "3"),
    ("We may conclude that $x = 3$.", "3"),
    # real traces (PRMBench) whose final sentence restates or says "either" before the answer: a
    # rule that read these words as a hedge turned 20 of 871 verdicts to no_answer
    ("That means the smallest angle is 60 degrees, and the largest angle is 2x, or 120 degrees.", "120"),
    ("Either way, I get the same answer: 0.", "0"),
    # a restated question before the value: its words are no hedge (a Math-Verify test case)
    ("Final Answer: The maximum number of points that could be in the domain of $f(x)$ is 19.", "19"),
    ("Final answer: the smallest integer greater than 10 is 19.", "19"),
    ("As x approaches either positive or negative infinity, the value of the function approaches "
     "$\\frac{4}{3}$.", "\\frac43"),
    (r"\boxed{x=0 \lor x=3}", "0, 3"),
    ("<answer>3</answer>", "3"),
    (r"\boxed{\vec{v} = \begin{pmatrix} -2 \\ -14 \end{pmatrix}}", r"\begin{pmatrix} -2 \\ -14 \end{pmatrix}"),
    (r"\boxed{\text{Evelyn}}", r"\text{Evelyn}"),
    (r"\boxed{\text{evelyn}}", r"\text{Evelyn}"),
    (r"\boxed{C}", "C"),
    (r"\boxed{\text{(C)}}", r"\text{(C)}"),
    (r"\boxed{(B) 42}", "B"),
    ("The answer is (B).", "B"),
    (r"\boxed{\text{B}}", "B"),
]


@pytest.mark.parametrize(("completion", "reference"), STILL_CORRECT)
def test_committed_answers_still_count(verifier, completion, reference):
    result = verifier.verify(completion, reference)
    assert result.status is Status.CORRECT, (completion, reference, result)


def test_a_closed_box_at_the_cut_is_still_trusted(verifier):
    assert verifier.verify(mark_truncated("Long work... The answer is \\boxed{3}"), "3").status is Status.CORRECT
    assert verifier.verify(mark_truncated("Long work... The final answer is 1.\nThen"), "1").status \
        is Status.CORRECT


@pytest.mark.parametrize("completion", [
    "\\boxed{3} or 4",  # Math-Verify rewards it too: the text after the box was not read
    "so $\\boxed{3}$ or $4$.",
    "\\boxed{3}, or possibly 4",
    "\\[\\boxed{3}\\] or 4",
    "\\boxed{\\phantom{\\frac{3\\sqrt{3}}{4}}}",  # a phantom with nested braces
])
def test_a_box_followed_by_another_value_or_a_hidden_one_is_no_answer(verifier, completion):
    assert verifier.verify(completion, "3" if "phantom" not in completion else "\\frac{3\\sqrt{3}}{4}").reward == 0.0


@pytest.mark.parametrize("completion", [
    "The answer is \\boxed{3}.", "\\boxed{3} and that is it", "\\boxed{3} cm", "\\boxed{3}. Or 4 if I erred",
])
def test_a_box_followed_by_prose_still_counts(verifier, completion):
    assert verifier.verify(completion, "3").status is Status.CORRECT


@pytest.mark.parametrize("completion", [
    "Work. The answer is $3$ or", "Work. \\boxed{3} or", "<answer>3</answer> or", "The answer is $3$ and",
])
def test_a_cut_right_after_a_connector_is_no_answer(verifier, completion):
    # the alternative the answer went on to offer was cut off by the length limit
    assert verifier.verify(mark_truncated(completion), "3").status is Status.NO_ANSWER
    assert verifier.verify(completion, "3").status is Status.CORRECT  # not cut: the sentence just ends

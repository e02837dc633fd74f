"""Normalisation and exact number reading (the in-process fast path)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from veristep.verifiers.core.result import Status
from veristep.verifiers.math.equiv import EquivConfig, compare_numbers
from veristep.verifiers.math.normalize import (
    colon_pair,
    decimal_comma_twin,
    equation_rhs,
    exact_decimals,
    membership_set,
    normalize_answer,
    parse_exact_number,
    split_assignment,
    too_large_to_evaluate,
)


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("\\dfrac{1}{2}", "\\frac{1}{2}"),
        ("\\tfrac12", "\\frac{1}{2}"),
        ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})"),
        ("5\\text{ cm}", "5"),
        ("30^\\circ", "30"),
        ("30°", "30"),
        ("\\$25", "25"),
        ("25 dollars", "25"),
        ("5 million", "5million"),
        ("5.", "5"),
        ("1\\,000", "1000"),
        ("10 000", "10000"),
        ("1{,}234", "1234"),
        ("1,000", "1000"),
        ("√2", "\\sqrt{2}"),
        ("½", "\\frac{1}{2}"),
        ("−5", "-5"),
        ("2π", "2\\pi"),
        ("\\pi r", "\\pi r"),
        ("\\varnothing", "\\emptyset"),
        ("3.2e4", "3.2\\times10^{4}"),
        ("0.\\overline{3}", "\\frac{1}{3}"),
        ("0.1\\overline{6}", "\\frac{1}{6}"),
        ("2\\frac{1}{2}", "\\frac{5}{2}"),
        ("\\text{Evelyn}", "evelyn"),
        ("3 or 4", "3,4"),
        ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}"),
        ("50%", "50\\%"),
    ],
)
def test_normalize(raw: str, canonical: str) -> None:
    assert normalize_answer(raw) == canonical


@pytest.mark.parametrize(
    ("text", "value", "decimals", "percent"),
    [
        ("42", Fraction(42), None, False),
        ("-3.50", Fraction(-7, 2), 2, False),
        ("\\frac{-1}{3}", Fraction(-1, 3), None, False),
        ("-\\frac{1}{3}", Fraction(-1, 3), None, False),
        ("22/7", Fraction(22, 7), None, False),
        ("3.2\\times10^{4}", Fraction(32000), None, False),
        ("1.5\\times10^{-3}", Fraction(3, 2000), None, False),
        ("12.5\\%", Fraction(25, 2), 1, True),
    ],
)
def test_parse_exact_number(text: str, value: Fraction, decimals: int | None, percent: bool) -> None:
    num = parse_exact_number(text)
    assert num is not None
    assert (num.value, num.decimals, num.percent) == (value, decimals, percent)


@pytest.mark.parametrize("text", ["x", "\\sqrt{2}", "1/0", "9" * 5000, "1\\times10^{99999}", ""])
def test_non_numbers_and_oversized_numbers_are_left_to_workers(text: str) -> None:
    assert parse_exact_number(text) is None


def test_exact_comparison_has_no_rounding_false_positives() -> None:
    cfg = EquivConfig()
    def num(s: str):
        return parse_exact_number(normalize_answer(s))
    assert compare_numbers(num("22/7"), num("3.142857"), cfg).status is Status.WRONG
    assert compare_numbers(num("22/7"), num("3.142857"), cfg).numeric_close
    assert compare_numbers(num("1/3"), num("0.3333333"), cfg).status is Status.WRONG
    # a decimal reference is an approximation at its own precision, no further
    assert compare_numbers(num("3.14"), num("3.1416"), cfg).status is Status.CORRECT
    assert compare_numbers(num("3.14"), num("3.146"), cfg).status is Status.WRONG
    assert compare_numbers(num("3.14"), num("3.1416"), EquivConfig(numeric_tolerance=0)).status is Status.WRONG


@pytest.mark.parametrize(
    ("mode", "ref", "pred", "status"),
    [("either", "50\\%", "0.5", Status.CORRECT), ("either", "50", "50\\%", Status.CORRECT),
     ("strip", "0.5", "50\\%", Status.WRONG), ("divide", "50", "50\\%", Status.WRONG),
     ("divide", "0.5", "50\\%", Status.CORRECT)],
)
def test_percent_modes(mode: str, ref: str, pred: str, status: Status) -> None:
    cfg = EquivConfig(percent=mode)  # type: ignore[arg-type]
    assert compare_numbers(parse_exact_number(ref), parse_exact_number(pred), cfg).status is status


def test_split_assignment_and_exact_decimals() -> None:
    assert split_assignment("x=3") == "3"
    assert split_assignment("y=2x+3") == "2x+3"
    assert split_assignment("x\\le3") is None
    assert exact_decimals("x=0.25+1.5") == "x=\\frac{025}{100}+\\frac{15}{10}"


@pytest.mark.parametrize(
    ("latex", "big"),
    [("9^{9^{9^9}}", True), ("10^{10^{10}}", True), ("2^{2^{2^{2^{2^{2}}}}}", True),
     ("100000000!", True), ("(10!)!", True), ("2^{10}", False), ("1000!", False),
     ("9!!", False), ("2^{100}", False), ("(10^{10})!", True), ("\\frac{1}{(10^{9})!}", True),
     ("(10^7)^{10^7}", True), ("(10^2)!", False), ("(2^3)^{4}", False), ("(10^{5}+10^{10})!", False)],
)
def test_too_large_to_evaluate(latex: str, big: bool) -> None:
    assert too_large_to_evaluate(latex) is big


def _spellings(value: Fraction) -> list[str]:
    """Equivalent ways to write an exact rational that models produce."""
    n, d = value.numerator, value.denominator
    out = [f"\\frac{{{n}}}{{{d}}}", f"{n}/{d}", f"\\dfrac{{{n * 3}}}{{{d * 3}}}"]
    if n < 0:
        out.append(f"-\\frac{{{-n}}}{{{d}}}")
    elif n > d > 1:
        out.append(f"{n // d}\\frac{{{n % d}}}{{{d}}}" if n % d else str(n // d))
    k = next((k for k in range(13) if (n * 10**k) % d == 0), None)
    if k:  # a terminating decimal, written digit by digit (no float rounding)
        digits = str(abs(n) * 10**k // d).rjust(k + 1, "0")
        out.append(("-" if n < 0 else "") + digits[:-k] + "." + digits[-k:])
    return out


@given(st.fractions(min_value=-10**6, max_value=10**6, max_denominator=10**4), st.data())
@settings(max_examples=200, deadline=None)
def test_every_spelling_of_a_rational_is_equal_and_a_different_one_is_not(value: Fraction, data) -> None:
    cfg = EquivConfig(numeric_tolerance=0)
    ref = parse_exact_number(normalize_answer(f"\\frac{{{value.numerator}}}{{{value.denominator}}}"))
    assert ref is not None and ref.value == value
    for spelled in _spellings(value):
        pred = parse_exact_number(normalize_answer(spelled))
        assert pred is not None, spelled
        assert compare_numbers(ref, pred, cfg).status is Status.CORRECT, spelled
    other = data.draw(st.fractions(min_value=-10**6, max_value=10**6, max_denominator=10**4))
    if other != value:
        pred = parse_exact_number(normalize_answer(f"{other.numerator}/{other.denominator}"))
        assert compare_numbers(ref, pred, cfg).status is Status.WRONG


@pytest.mark.parametrize(
    ("raw", "plain", "canonical"),
    [
        # thousands separators: groups of three after a non-zero lead, or LaTeX's ",\!"
        ("1,234", False, "1234"),
        ("12,345,678", False, "12345678"),
        ("1,000.99", True, "1000.99"),
        ("32,\\! 349", False, "32349"),
        ("11,\\! 111,\\! 111,\\! 100", False, "11111111100"),
        # a comma and a space separate list items, never thousands
        ("32, 349", False, "32,349"),
        ("1, 234", False, "1,234"),
        ("1 and 234", False, "1,234"),
        # any other comma between digits: a list in an answer field, a decimal comma in prose
        ("-2,1", False, "-2,1"),
        ("0,111", False, "0,111"),
        ("0,111", True, "0.111"),
        ("2,74", True, "2.74"),
        ("1000,99", True, "1000.99"),
        # separators between the parts of one answer
        ("a_{37} = 19, \\quad a_3 = 2", False, "a_{37}=19,a_3=2"),
        ("(x, y) = (5, 8) \\quad \\text{and} \\quad (8, 5)", False, "(x,y)=(5,8),(8,5)"),
        ("19, 46, and 82", False, "19,46,82"),
        ("19, 46, \\text{ and } 82", False, "19,46,82"),
        # percent words
        ("28 percent", False, "28\\%"),
        ("28 pct", False, "28\\%"),
        ("28\\text{ percentage}", False, "28\\%"),
        # chains of equalities say their last value
        ("x = 5+5+1 = 11", False, "x=11"),
        ("z = 1 + 1 = 2", False, "z=2"),
        # ... unless they are false (7 is not 11) or start with a value, not a name: then they
        # stay whole, so that every part is compared with the reference
        ("x = 5+5+1 = 7 =11", False, "x=5+5+1=7=11"),
        ("1 = \\zzz = x = 0", False, "1=\\zzz=x=0"),
        ("x = 5+5+1 = 1/3 \\approx 11", False, "x=1/3"),
        ("x\\approx11", False, "x=11"),
        ("a=1,b=2=c", False, "a=1,b=2=c"),
    ],
)
def test_commas_separators_percent_words_and_chains(raw: str, plain: bool, canonical: str) -> None:
    assert normalize_answer(raw, plain=plain) == canonical


def test_assignments_equations_memberships_and_colons() -> None:
    assert split_assignment("|AB|=1") == "1"
    assert split_assignment("(p,q)=(3,2)") == "(3,2)"
    assert split_assignment("\\frac{NO}{BO}=\\frac{1}{\\sqrt{6}}") == "\\frac{1}{\\sqrt{6}}"
    assert split_assignment("x_{1}=5") == "5"
    assert split_assignment("2x+z=1") is None  # an equation: the left side holds a number
    assert split_assignment("a=1,b=2") is None  # two values
    assert equation_rhs("\\cos\\angle RPS=-\\frac{24}{25}") == "-\\frac{24}{25}"
    assert equation_rhs("x\\le3") is None
    assert membership_set("x\\in[-2,7]") == "[-2,7]"
    assert colon_pair("12:00") == (Fraction(12), Fraction(0), True)
    assert colon_pair("7:32") == (Fraction(7), Fraction(32), True)
    assert colon_pair("14:64") == (Fraction(14), Fraction(64), False)  # 64 minutes: a ratio
    assert colon_pair("x:y") is None
    assert decimal_comma_twin("1,22") == "1.22" and decimal_comma_twin("1,234") is not None
    assert decimal_comma_twin("1.22") is None

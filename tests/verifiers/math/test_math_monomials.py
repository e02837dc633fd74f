"""Exact q·√r·π^k values: canonical forms, certain equality and inequality, bounds."""

from __future__ import annotations

import time
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from veristep.verifiers.core.result import Status
from veristep.verifiers.math.equiv import EquivConfig, compare_monomials
from veristep.verifiers.math.monomials import Monomial, has_several_parts, is_word, parse_monomial
from veristep.verifiers.math.normalize import normalize_answer


def mono(text: str) -> Monomial | None:
    return parse_monomial(normalize_answer(text))


@pytest.mark.parametrize(
    ("a", "b"),
    [("3\\sqrt{13}", "\\sqrt{117}"), ("\\frac{\\sqrt2}{2}", "\\frac{1}{\\sqrt{2}}"), ("\\sqrt{8}", "2\\sqrt2"),
     ("\\frac{\\pi}{6}", "\\pi/6"), ("-\\frac{\\pi}{6}", "\\frac{-\\pi}{6}"), ("2\\sqrt{\\frac12}", "\\sqrt2"),
     ("\\pi^2", "\\pi\\cdot\\pi"), ("2^{10}", "1024"), ("(\\sqrt{3})^2", "3"), ("\\sqrt{0}", "0"),
     ("\\frac{3\\sqrt{3}}{4}", "0.75\\sqrt{3}"), ("2^{-1}", "0.5")],
)
def test_equal_forms_have_one_canonical_value(a: str, b: str) -> None:
    assert mono(a) is not None and mono(a) == mono(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [("\\sqrt{2}", "\\sqrt{3}"), ("\\pi", "3.141593"), ("3\\sqrt{13}", "10.816654"), ("\\pi", "\\frac{22}{7}"),
     ("\\sqrt{2}", "1.4142135623730951"), ("2\\pi", "\\pi^2"), ("\\frac{\\sqrt3}{2}", "\\frac{\\sqrt2}{2}")],
)
def test_different_values_are_wrong_and_close_ones_are_flagged(a: str, b: str) -> None:
    verdict = compare_monomials(mono(a), mono(b), None, EquivConfig())
    assert verdict.status is Status.WRONG


def test_decimal_reference_tolerance_and_closeness() -> None:
    cfg = EquivConfig()
    ref = mono("3.14")
    assert compare_monomials(ref, mono("\\pi"), 2, cfg).status is Status.CORRECT
    assert compare_monomials(ref, mono("\\pi"), 2, EquivConfig(numeric_tolerance=0)).status is Status.WRONG
    assert compare_monomials(mono("\\pi"), mono("3.141593"), None, cfg).numeric_close
    assert not compare_monomials(mono("\\pi"), mono("3"), None, cfg).numeric_close


@pytest.mark.parametrize(
    "text",
    ["x", "\\pi r", "3+2\\sqrt2", "\\sqrt[3]{2}", "\\sqrt{-4}", "2^{100}", "\\sqrt{1000000007}",
     "\\pi^{9}", "1" * 100, "2\\frac{1}{2}\\pi", "\\frac{1}{0}", "", "50\\%", "\\sqrt{" * 50 + "2" + "}" * 50],
)
def test_everything_else_is_left_to_the_workers(text: str) -> None:
    start = time.perf_counter()
    assert parse_monomial(text) is None
    assert time.perf_counter() - start < 1.0


def test_shapes() -> None:
    assert is_word("east") and not is_word("x") and not is_word("\\pi")
    assert has_several_parts("(1,2)") and has_several_parts("1,2") and has_several_parts("\\{1,2\\}")
    assert has_several_parts("(0,1)\\cup(2,3)") and has_several_parts("\\begin{pmatrix}1\\\\2\\end{pmatrix}")
    assert not has_several_parts("f(1,2)") and not has_several_parts("(a+b)") and not has_several_parts("12")


@given(st.fractions(min_value=-1000, max_value=1000, max_denominator=50), st.integers(1, 200), st.integers(0, 2))
@settings(max_examples=200, deadline=None)
def test_canonical_form_matches_exact_arithmetic(q: Fraction, r: int, k: int) -> None:
    """q·√r·π^k spelled with a fraction and a root parses to the same value as q·√(r)."""
    pi = "\\pi" * k
    text = f"\\frac{{{q.numerator}\\sqrt{{{r}}}{pi}}}{{{q.denominator}}}"
    m = parse_monomial(text)
    assert m is not None
    if q == 0:
        assert m == Monomial(Fraction(0))
        return
    # square it: (q sqrt r)^2 = q^2 r, an exact rational check independent of the canonical form
    assert m.coeff**2 * m.radicand == q**2 * r and m.pi_power == k
    s, t = 2, m.radicand
    while s * s <= t:
        assert t % (s * s) != 0
        s += 1

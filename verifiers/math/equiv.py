"""Decide whether two normalised answers are mathematically equal.

Two layers: `compare_numbers` works on exact rationals with `fractions` only (cheap, cannot
hang, used in the caller's process); `parse_answer` + `compare_parsed` use math-verify's LaTeX
parser and sympy and are meant to run inside the isolated workers (worker.py holds the two
functions the worker pool calls). sympy is imported lazily so that the
caller's process does not pay for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any, Literal

from ..core.result import Status
from .monomials import Monomial, has_several_parts
from .normalize import (
    ExactNumber,
    equation_values,
    exact_decimals,
    parse_exact_number,
    too_large_to_evaluate,
)

PercentMode = Literal["either", "strip", "divide"]

# digits in groups of three after commas, left in a normalised answer: a list, not a number
_GROUPED_LIST_RE = re.compile(r"[-+]?\d+(?:,\d{3})+")

# Differences below this, relative to the values' size, count as zero for closed-form constants
# evaluated at _PRECISION digits (sqrt(2)/2 vs 1/sqrt(2), pi-expressions).
_ZERO_REL = Fraction(1, 10**45)
_PRECISION = 60
# math-verify's numeric precision for structured answers: 30 digits still tells 1e-20 from 0
# and costs a third of 60 digits' time (sympy's evalf on sums and relations).
_VERIFY_PRECISION = 30
# What "numerically close" means for the audit flag: Math-Verify's 6-decimal rounding, or a
# relative error of 1e-4.
_CLOSE_ABS = Fraction(5, 10**7)
_CLOSE_REL = Fraction(1, 10**4)
# A chain of equalities states its parts; more distinct ones than this is padding, not an answer
_MAX_EQUATION_PARTS = 8


@dataclass(frozen=True)
class EquivConfig:
    """Knobs of the equivalence decision, shared by the fast path and the workers."""

    # accepted error, in units of the reference's last decimal place, when the reference is a
    # decimal such as 3.14 (0.5 = "rounds to the reference"); 0 = exact only
    numeric_tolerance: float = 0.5
    percent: PercentMode = "either"
    imaginary_unit: bool = True


@dataclass(frozen=True)
class Verdict:
    """The equivalence decision for one pair, before it becomes a VerifyResult."""

    status: Status
    detail: str = ""
    numeric_close: bool = False


def _within_tolerance(ref: Fraction, pred: Fraction, decimals: int | None, tol: float) -> bool:
    """True when `pred` is within `tol` units of the last decimal place of a decimal reference."""
    if not decimals or tol <= 0:
        return False
    return abs(pred - ref) <= Fraction(tol) / Fraction(10) ** decimals


def _is_close(ref: Fraction, pred: Fraction) -> bool:
    """The audit's "close but not equal" test (what a rounding checker would have accepted)."""
    diff = abs(pred - ref)
    return diff <= _CLOSE_ABS or diff <= _CLOSE_REL * abs(ref)


def compare_values(ref: Fraction, pred: Fraction, decimals: int | None, cfg: EquivConfig) -> Verdict:
    """Compare two exact values; tolerance applies only to a decimal reference."""
    if ref == pred:
        return Verdict(Status.CORRECT)
    if _within_tolerance(ref, pred, decimals, cfg.numeric_tolerance):
        return Verdict(Status.CORRECT, f"within the reference's {decimals} decimals")
    return Verdict(Status.WRONG, numeric_close=_is_close(ref, pred))


def _percent_candidates(num: ExactNumber, mode: PercentMode) -> list[tuple[Fraction, int | None]]:
    """The values a number may stand for: 50% is 50 or 0.5 depending on the percent mode."""
    if not num.percent:
        return [(num.value, num.decimals)]
    divided = (num.value / 100, None if num.decimals is None else num.decimals + 2)
    if mode == "strip":
        return [(num.value, num.decimals)]
    if mode == "divide":
        return [divided]
    return [(num.value, num.decimals), divided]


def compare_numbers(ref: ExactNumber, pred: ExactNumber, cfg: EquivConfig) -> Verdict:
    """Fast-path comparison of two exact numbers, honouring the percent mode."""
    close = False
    for rv, rdec in _percent_candidates(ref, cfg.percent):
        for pv, _ in _percent_candidates(pred, cfg.percent):
            verdict = compare_values(rv, pv, rdec, cfg)
            if verdict.status is Status.CORRECT:
                return verdict
            close = close or verdict.numeric_close
    return Verdict(Status.WRONG, numeric_close=close)


def compare_monomials(ref: Monomial, pred: Monomial, decimals: int | None, cfg: EquivConfig) -> Verdict:
    """Fast-path comparison of two exact q·√r·π^k values (rationals included)."""
    if ref == pred:
        return Verdict(Status.CORRECT)
    rv, pv = ref.value(), pred.value()
    diff = abs(pv - rv)
    if decimals and cfg.numeric_tolerance > 0:
        if diff <= Decimal(str(cfg.numeric_tolerance)) * Decimal(10) ** -decimals:
            return Verdict(Status.CORRECT, f"within the reference's {decimals} decimals")
    close = diff <= Decimal(5) * Decimal(10) ** -7 or diff <= abs(rv) * Decimal(10) ** -4
    return Verdict(Status.WRONG, numeric_close=close)


# --------------------------------------------------------------------------- worker side


@dataclass
class ParsedAnswer:
    """An answer parsed to sympy inside a worker (expr is None when parsing failed)."""

    text: str
    parsed: list[Any]
    error: str = ""
    decimals: int | None = None


def _percent_for_sympy(text: str, mode: PercentMode) -> str:
    """Spell a percent sign the way the configured percent mode reads it."""
    if "\\%" not in text:
        return text
    if mode == "divide":
        return text.replace("\\%", "\\cdot\\frac{1}{100}")
    return text.replace("\\%", "")


def _with_imaginary_unit(expr: Any) -> Any:
    """Read a free symbol named i as the imaginary unit (math-verify keeps it a variable)."""
    import sympy

    try:
        syms = [s for s in getattr(expr, "free_symbols", ()) if s.name == "i"]
        return expr.subs({s: sympy.I for s in syms}) if syms else expr
    except Exception:
        return expr


def parse_answer(text: str, cfg: EquivConfig, decimals: int | None = None) -> ParsedAnswer:
    """Parse a normalised answer with math-verify's LaTeX parser (run this in a worker)."""
    from math_verify import LatexExtractionConfig, parse

    if not text:
        return ParsedAnswer(text, [], "empty answer")
    if too_large_to_evaluate(text):
        return ParsedAnswer(text, [], "expression too large to evaluate")
    latex = exact_decimals(_percent_for_sympy(text, cfg.percent))
    if _GROUPED_LIST_RE.fullmatch(latex):
        # normalisation already removed every genuine thousands separator, so "32,349" here is
        # the list 32, 349; math-verify alone would read it as one number
        latex = "\\{" + latex + "\\}"
    parsed = parse(
        "\\boxed{" + latex + "}",
        extraction_config=[LatexExtractionConfig(boxed_match_priority=0, try_extract_without_anchor=False)],
        fallback_mode="no_fallback",
        extraction_mode="first_match",
        parsing_timeout=None,
    )
    if not parsed:
        return ParsedAnswer(text, [], "could not parse")
    if cfg.imaginary_unit:
        parsed = [_with_imaginary_unit(p) for p in parsed]
    return ParsedAnswer(text, parsed, "", decimals)


def _undefined(expr: Any) -> bool:
    """True when an expression holds complex infinity or NaN (a division by zero, 0/0)."""
    import sympy

    try:
        return bool(expr.has(sympy.zoo) or expr.has(sympy.nan))
    except Exception:
        return False


def _is_constant(expr: Any) -> bool:
    """True for a scalar with no free symbols (not a set, tuple, matrix or relation)."""
    import sympy
    from sympy.matrices import MatrixBase

    if not isinstance(expr, sympy.Expr) or isinstance(expr, MatrixBase):
        return False
    try:
        return not expr.free_symbols and not expr.has(sympy.Symbol)
    except Exception:
        return False


def _is_plain_expr(expr: Any) -> bool:
    """A scalar expression (possibly with variables), not a set, tuple, matrix or relation."""
    import sympy
    from sympy.matrices import MatrixBase

    return isinstance(expr, sympy.Expr) and not isinstance(expr, MatrixBase)


def _to_fraction(value: Any) -> Fraction:
    """An exact Fraction from a sympy Rational or Float."""
    import sympy

    r = sympy.Rational(value)
    return Fraction(int(r.p), int(r.q))


def _compare_constants(gold: Any, pred: Any, decimals: int | None, cfg: EquivConfig) -> Verdict:
    """Compare two closed-form constants: exactly when rational, else at 60 digits."""
    import sympy

    a, b = gold.doit(), pred.doit()
    if isinstance(a, sympy.Rational) and isinstance(b, sympy.Rational):
        return compare_values(_to_fraction(a), _to_fraction(b), decimals, cfg)
    if _undefined(a) or _undefined(b):
        return Verdict(Status.WRONG, "undefined value (division by zero)")
    av, bv = sympy.N(a, _PRECISION), sympy.N(b, _PRECISION)
    ar, ai = av.as_real_imag()
    br, bi = bv.as_real_imag()
    if not all(isinstance(x, sympy.Number) and x.is_finite for x in (ar, ai, br, bi)):
        # signed infinities written as such: only the same one (zoo and nan never get here)
        return Verdict(Status.CORRECT if a in (sympy.oo, -sympy.oo) and a == b else Status.WRONG)
    fa, fai, fb, fbi = (_to_fraction(x) for x in (ar, ai, br, bi))
    scale = max(Fraction(1), abs(fa), abs(fb), abs(fai), abs(fbi))
    if abs(fa - fb) + abs(fai - fbi) <= _ZERO_REL * scale:
        return Verdict(Status.CORRECT)
    if fai == 0 and fbi == 0:
        return compare_values(fa, fb, decimals, cfg)
    return Verdict(Status.WRONG, numeric_close=_is_close(fa, fb) and _is_close(fai, fbi))


# Fixed sample points (positive, irrational-looking) for the quick inequality test below.
_PROBES = ("0.6180339887498948482", "1.4142135623730950488", "2.7182818284590452354")


def _differ_at_a_point(gold: Any, pred: Any) -> bool:
    """True when two expressions take different values at a sample point of their variables.

    A cheap proof of inequality: sympy's simplify on a wrong pair (x^3 vs x^2) can take
    seconds, while one substitution takes milliseconds. Agreement proves nothing, so equal
    values fall through to the symbolic comparison.
    """
    import sympy

    gs, ps = getattr(gold, "free_symbols", set()), getattr(pred, "free_symbols", set())
    names = sorted({s.name for s in gs} | {s.name for s in ps})
    if not names or len(names) > 6:
        return False
    for shift in range(len(_PROBES)):
        point = {n: sympy.Float(_PROBES[(i + shift) % len(_PROBES)], 30) for i, n in enumerate(names)}
        try:
            a = complex(sympy.N(gold.subs({s: point[s.name] for s in gs}), 30))
            b = complex(sympy.N(pred.subs({s: point[s.name] for s in ps}), 30))
        except Exception:
            continue  # not a number at this point (a domain edge, a function): no evidence
        if not all(map(_finite, (a.real, a.imag, b.real, b.imag))):
            continue
        scale = max(1.0, abs(a), abs(b))
        return abs(a - b) > 1e-9 * scale
    return False


def _finite(x: float) -> bool:
    return x == x and abs(x) != float("inf")


def _text_like(expr: Any) -> bool:
    """A bare symbol or a product of symbols: how math-verify reads a word such as "Evelyn"."""
    import sympy

    if isinstance(expr, sympy.Symbol):
        return True
    return isinstance(expr, sympy.Mul) and all(isinstance(a, sympy.Symbol) for a in expr.args)


def _intervals(expr: Any) -> list[Any] | None:
    """The intervals of an Interval or a Union of Intervals, sorted by left end (else None)."""
    import sympy

    if isinstance(expr, sympy.Interval):
        return [expr]
    if isinstance(expr, sympy.Union) and all(isinstance(a, sympy.Interval) for a in expr.args):
        try:
            return sorted(expr.args, key=lambda iv: float(sympy.N(iv.start)))
        except (TypeError, ValueError):
            return None
    return None


def _compare_intervals(gold: list[Any], pred: list[Any], cfg: EquivConfig) -> Verdict:
    """Interval unions: same count, same open/closed ends, exactly equal end points."""
    if len(gold) != len(pred):
        return Verdict(Status.WRONG)
    for g, p in zip(gold, pred, strict=True):
        if (g.left_open, g.right_open) != (p.left_open, p.right_open):
            return Verdict(Status.WRONG)
        for ge, pe in ((g.start, p.start), (g.end, p.end)):
            if ge == pe:
                continue
            if not (_is_constant(ge) and _is_constant(pe)):
                return Verdict(Status.WRONG) if ge.is_infinite or pe.is_infinite else Verdict(Status.PARSE_ERROR)
            if _compare_constants(ge, pe, None, cfg).status is not Status.CORRECT:
                return Verdict(Status.WRONG)
    return Verdict(Status.CORRECT)


def _number_differs(part: str, ref: ParsedAnswer, cfg: EquivConfig) -> bool:
    """True when `part`, a plain number, is provably not the reference (`0` against `p - q`, `6 - 5i`
    or a vector): the exact rules before sympy compare a number only with a number reference."""
    if parse_exact_number(part) is None:
        return False  # only numbers: math-verify misreads some other parts ("6(3)" as 6+3)
    number = parse_answer(part, cfg)
    if not number.parsed or not _is_constant(number.parsed[0]):
        return False
    gold = ref.parsed[0]
    if _is_constant(gold):
        return _compare_constants(gold, number.parsed[0], ref.decimals, cfg).status is Status.WRONG
    if _is_plain_expr(gold):
        return _differ_at_a_point(gold, number.parsed[0])
    return not _math_verify_equal(ref, number)  # a matrix, tuple or set: math-verify's reading


def _math_verify_equal(ref: ParsedAnswer, pred: ParsedAnswer) -> bool:
    """math-verify's comparison, with its float rounding made irrelevant (decimals are exact
    fractions by now) and a numeric precision high enough not to call 1e-20 zero."""
    from math_verify import verify

    return bool(verify(ref.parsed, pred.parsed, float_rounding=12, numeric_precision=_VERIFY_PRECISION,
                       timeout_seconds=None))


def compare_parsed(ref: ParsedAnswer, pred: ParsedAnswer, cfg: EquivConfig) -> Verdict:
    """Compare two parsed answers: our exact/precision rules for constants, math-verify otherwise."""
    if not ref.parsed:
        return Verdict(Status.BAD_REFERENCE, f"reference: {ref.error}")
    if not pred.parsed:
        return Verdict(Status.PARSE_ERROR, pred.error)
    values = equation_values(pred.text) if "=" in pred.text and "=" not in ref.text else None
    if values is not None and len(values) > 1:
        # "\{3,4\}=3": math-verify reads the right side alone, but a set, tuple or list stated
        # equal to it is no scalar answer. Other parts are not compared here: math-verify misreads
        # some ("6(3)" as 6+3) and degrees are gone by now ("\tan100^\circ"); exact ones were
        # compared before sympy (sympy_free._equation_verdict).
        if len(set(values)) > _MAX_EQUATION_PARTS:
            return Verdict(Status.WRONG, "an equation with too many parts")
        if not has_several_parts(ref.text) and any(has_several_parts(v) for v in values):
            return Verdict(Status.WRONG, "an equation whose parts are not all the answer")
        if any(_number_differs(v, ref, cfg) for v in values[:-1]):
            return Verdict(Status.WRONG, "an equation whose parts are not all the answer")
        pred = parse_answer(values[-1], cfg)
        if not pred.parsed:
            return Verdict(Status.PARSE_ERROR, pred.error)
    gold_expr, pred_expr = ref.parsed[0], pred.parsed[0]
    if _undefined(gold_expr) or _undefined(pred_expr):
        # 12:00 read as 12/0: an undefined value equals nothing, not even another one
        return Verdict(Status.WRONG, "undefined value (division by zero)")
    if _is_constant(gold_expr) and _is_constant(pred_expr):
        return _compare_constants(gold_expr, pred_expr, ref.decimals, cfg)
    if _is_plain_expr(gold_expr) and _is_plain_expr(pred_expr):
        gold_text, pred_text = _text_like(gold_expr), _text_like(pred_expr)
        if (gold_text and _is_constant(pred_expr)) or (pred_text and _is_constant(gold_expr)):
            return Verdict(Status.WRONG)  # a word or a variable is never a number
        if not (gold_text or pred_text) and _differ_at_a_point(gold_expr, pred_expr):
            return Verdict(Status.WRONG)
    gold_iv, pred_iv = _intervals(gold_expr), _intervals(pred_expr)
    if gold_iv is not None and pred_iv is not None:
        verdict = _compare_intervals(gold_iv, pred_iv, cfg)
        if verdict.status is not Status.PARSE_ERROR:
            return verdict
    # Structured answers (sets, intervals, tuples, matrices, equations, expressions in x)
    return Verdict(Status.CORRECT if _math_verify_equal(ref, pred) else Status.WRONG)

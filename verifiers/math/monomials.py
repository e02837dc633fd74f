"""Exact values of simple closed forms, q·√r·π^k, read and compared without sympy.

Many final answers are such monomials (`3\\sqrt{13}`, `\\frac{\\pi}{6}`, `\\frac{1}{\\sqrt2}`).
Two of them are equal exactly when their canonical (q, r, k) agree, with r square-free:
square roots of distinct square-free integers are linearly independent over the rationals
and π is transcendental. That makes both "equal" and "not equal" certain, so these pairs are
settled in the caller's process in microseconds. Anything else returns None and goes to the
workers.
"""

from __future__ import annotations

import decimal
import re
from dataclasses import dataclass
from fractions import Fraction

# Bounds that keep every operation here cheap on hostile input.
_MAX_DIGITS = 60
_MAX_RADICAND = 10**8  # square-free part by trial division up to 10^4
_MAX_PI_POWER = 4
_MAX_RATIONAL_POWER = 64
_PI_50 = decimal.Decimal("3.14159265358979323846264338327950288419716939937510")

_NUMBER_RE = re.compile(r"\d+(?:\.\d+)?")


@dataclass(frozen=True)
class Monomial:
    """coeff · sqrt(radicand) · π^pi_power, canonical: radicand square-free, zero is (0, 1, 0)."""

    coeff: Fraction
    radicand: int = 1
    pi_power: int = 0

    def times(self, other: Monomial) -> Monomial:
        """The exact product of two monomials."""
        r = self.radicand * other.radicand
        return _canonical(self.coeff * other.coeff, r, self.pi_power + other.pi_power)

    def inverse(self) -> Monomial:
        """1 / self (raises ZeroDivisionError for zero)."""
        # 1/(q sqrt(r) pi^k) = sqrt(r) / (q r) pi^-k
        return _canonical(1 / (self.coeff * self.radicand), self.radicand, -self.pi_power)

    def power(self, n: int) -> Monomial:
        """self ** n for a small integer n."""
        if n < 0:
            return self.inverse().power(-n)
        limit = _MAX_RATIONAL_POWER if (self.radicand, self.pi_power) == (1, 0) else _MAX_PI_POWER
        if n > limit:
            raise ValueError("exponent too large for the exact fast path")
        # (q sqrt(r))^n = q^n r^(n//2) sqrt(r)^(n%2)
        coeff = self.coeff**n * self.radicand ** (n // 2)
        return _canonical(coeff, self.radicand if n % 2 else 1, self.pi_power * n)

    def value(self, digits: int = 40) -> decimal.Decimal:
        """A decimal approximation with `digits` significant digits (for tolerances)."""
        with decimal.localcontext() as ctx:
            ctx.prec = digits
            v = decimal.Decimal(self.coeff.numerator) / decimal.Decimal(self.coeff.denominator)
            if self.radicand != 1:
                v *= decimal.Decimal(self.radicand).sqrt()
            return v * _PI_50**self.pi_power if self.pi_power >= 0 else v / _PI_50 ** (-self.pi_power)


def _square_free(n: int) -> tuple[int, int]:
    """(s, t) with n = s²·t and t square-free; n <= _MAX_RADICAND."""
    s, t, p = 1, n, 2
    while p * p <= t:
        while t % (p * p) == 0:
            t //= p * p
            s *= p
        p += 1 if p == 2 else 2
    return s, t


def _canonical(coeff: Fraction, radicand: int, pi_power: int) -> Monomial:
    if coeff == 0 or radicand == 0:
        return Monomial(Fraction(0))
    if radicand > _MAX_RADICAND or abs(pi_power) > _MAX_PI_POWER:
        raise ValueError("too large for the exact fast path")
    s, t = _square_free(radicand)
    return Monomial(coeff * s, t, pi_power)


class _Reader:
    """A tiny recursive-descent reader over a normalised answer string."""

    def __init__(self, text: str) -> None:
        self.s, self.i = text, 0

    def peek(self, token: str) -> bool:
        return self.s.startswith(token, self.i)

    def take(self, token: str) -> bool:
        if self.peek(token):
            self.i += len(token)
            return True
        return False

    def product(self, depth: int) -> Monomial:
        """[sign] factor (['\\cdot'|'\\times'|'*'|'/'] factor)*"""
        if depth > 8:
            raise ValueError("nested too deep")
        result = Monomial(Fraction(-1 if self.take("-") else 1))
        if result.coeff == 1:
            self.take("+")
        seen = False
        while self.i < len(self.s) and not self.peek("}") and not self.peek(")"):
            divide = self.take("/")
            if not divide:
                for op in ("\\cdot", "\\times", "*"):
                    if self.take(op):
                        break
            factor = self.factor(depth)
            result = result.times(factor.inverse() if divide else factor)
            seen = True
        if not seen:
            raise ValueError("empty product")
        return result

    def group(self, depth: int) -> Monomial:
        if not self.take("{"):
            # \frac12 and \sqrt2 style single-character arguments
            m = re.compile(r"\d").match(self.s, self.i)
            if not m:
                raise ValueError("bad argument")
            self.i = m.end()
            return Monomial(Fraction(int(m.group(0))))
        inner = self.product(depth + 1)
        if not self.take("}"):
            raise ValueError("unclosed group")
        return inner

    def factor(self, depth: int) -> Monomial:
        base = self.atom(depth)
        if not self.take("^"):
            return base
        m = re.compile(r"\{(-?\d{1,3})\}|(\d)").match(self.s, self.i)
        if not m:
            raise ValueError("only small integer exponents")
        self.i = m.end()
        return base.power(int(m.group(1) or m.group(2)))

    def atom(self, depth: int) -> Monomial:
        m = _NUMBER_RE.match(self.s, self.i)
        if m:
            if len(m.group(0)) > _MAX_DIGITS:
                raise ValueError("number too long for the exact fast path")
            self.i = m.end()
            if self.peek("\\frac"):
                raise ValueError("2\\frac{1}{2} may be a mixed number; leave it to sympy")
            return Monomial(Fraction(m.group(0)))
        if self.take("\\frac"):
            num = self.group(depth)
            return num.times(self.group(depth).inverse())
        if self.take("\\sqrt"):
            if self.peek("["):
                raise ValueError("only square roots")
            arg = self.group(depth)
            if arg.radicand != 1 or arg.pi_power != 0 or arg.coeff < 0:
                raise ValueError("root of a non-rational")
            # sqrt(p/q) = sqrt(p q) / q
            p, q = arg.coeff.numerator, arg.coeff.denominator
            return _canonical(Fraction(1, q), p * q, 0)
        if self.take("\\pi"):
            return Monomial(Fraction(1), 1, 1)
        if self.take("("):
            inner = self.product(depth + 1)
            if not self.take(")"):
                raise ValueError("unclosed parenthesis")
            return inner
        raise ValueError("not a monomial")


def parse_monomial(normalized: str) -> Monomial | None:
    """Read a normalised answer as an exact q·√r·π^k, or None if it is anything else."""
    if not normalized or len(normalized) > 200 or "\\%" in normalized:
        return None
    reader = _Reader(normalized)
    try:
        value = reader.product(0)
    except (ValueError, ZeroDivisionError):
        return None
    return value if reader.i == len(normalized) else None


_WORD_RE = re.compile(r"[a-z]{2,}")


def is_word(normalized: str) -> bool:
    """A word answer such as "east" or "evelyn" (normalised answers are lower-cased words)."""
    return bool(_WORD_RE.fullmatch(normalized))


def has_several_parts(normalized: str) -> bool:
    """True for a tuple, list, set, union or matrix: a top-level comma, `\\cup`, `\\begin{`."""
    if "\\cup" in normalized or normalized.startswith("\\begin{"):
        return True
    depth = 0
    for i, c in enumerate(normalized):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and (depth == 0 or (depth == 1 and _outer_bracketed(normalized))) and i > 0:
            return True
    return False


def _outer_bracketed(s: str) -> bool:
    """`(a,b)`, `[a,b)`, `\\{a,b\\}`: the whole string is one bracketed list."""
    return (s[:1] in "([" and s[-1:] in ")]") or (s.startswith("\\{") and s.endswith("\\}"))

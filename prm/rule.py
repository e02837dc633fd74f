"""A model-free process reward: check the arithmetic claims written in each step, exactly.

A claim is an equality chain between arithmetic expressions, `3 \\times 4 = 12`, `12+5=17`,
`2+3 = 5 = 10/2`, in plain text or LaTeX. Each side is evaluated with exact rational
arithmetic (`fractions.Fraction`) under hard size bounds, so model output can never make the
checker slow or raise. The checker is deliberately conservative: a side that may belong to a
larger expression the checker cannot see (`2x + 3 = 11`, `half of 50 = 25`, `= 2\\pi`) is
dropped rather than judged, because a false "wrong" is worse than "uncheckable".
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from .base import StepScores
from .steps import DEFAULT_SEPARATOR, split_steps, step_texts

# Size bounds: model output is untrusted, and 9^9^9^9 must be refused, not computed.
_MAX_LITERAL_DIGITS = 60
_MAX_EXPONENT = 4096
_MAX_BITS = 100_000
_MAX_DEPTH = 60
_MAX_RUN_CHARS = 400
#: Steps longer than this are checked only on their first characters (linear cost bound).
MAX_STEP_CHARS = 20_000

# Words after which a number may be part of a larger, unparsed expression ("half of 50").
_RISKY_WORDS = frozenset(
    "of times plus minus over by divided multiplied squared cubed percent factorial root "
    "half twice double triple thrice power remainder rem with mod modulo".split()
)
# Non-space characters that may touch an expression without being part of it.
_SAFE_BEFORE = frozenset("$:;,\n[")
_SAFE_AFTER = frozenset("$.,;:\n]?")


class _Uncheckable(Exception):
    """An expression that cannot or must not be evaluated (unknown syntax, too big, x/0)."""


@dataclass(frozen=True)
class ArithClaim:
    """One checked relation `left = right` (or `left ≈ right`) found in a step."""

    left: str
    right: str
    relation: str  # "=" or "≈"
    correct: bool
    left_value: Fraction
    right_value: Fraction


@dataclass(frozen=True)
class StepCheck:
    """The claims checked in one step and the score they give."""

    claims: tuple[ArithClaim, ...]

    @property
    def verdict(self) -> bool | None:
        """True if every claim holds, False if one fails, None if nothing was checkable."""
        if not self.claims:
            return None
        return all(c.correct for c in self.claims)


# ---------------------------------------------------------------------------------------------
# Normalisation: LaTeX and Unicode notation -> a small plain arithmetic alphabet.

_FRAC = re.compile(r"\\frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_FRAC_SHORT = re.compile(r"\\frac\s*(\d)\s*(\d)")
_TEXT_CMD = re.compile(r"\\(?:text|mathrm|textbf|textit|mbox|operatorname)\s*\{([^{}]*)\}")
_THOUSANDS = re.compile(r"(?<![\d.,])(\d{1,3})((?:,\d{3})+)(?![\d,])")
_SIMPLE_REPLACEMENTS: tuple[tuple[str, str], ...] = (
    ("\\(", " "), ("\\)", " "), ("\\[", " "), ("\\]", " "),
    ("\\$", ""), ("\\%", "%"), ("{,}", ","),
    ("\\left", ""), ("\\right", ""), ("\\bigl", ""), ("\\bigr", ""), ("\\Bigl", ""),
    ("\\Bigr", ""), ("\\big", ""), ("\\Big", ""),
    ("\\times", "*"), ("\\cdot", "*"), ("\\ast", "*"), ("\\div", "/"), ("\\approx", "≈"),
    ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"),
    ("\\\\", " "), ("&", ""), ("\\,", " "), ("\\;", " "), ("\\:", " "), ("\\!", ""),
    ("\\ ", " "), ("~", " "),
    ("×", "*"), ("·", "*"), ("⋅", "*"), ("∙", "*"), ("÷", "/"), ("−", "-"), ("**", "^"),
)


def _normalise(text: str) -> str:
    for old, new in _SIMPLE_REPLACEMENTS:
        text = text.replace(old, new)
    text = _TEXT_CMD.sub(lambda m: f" {m.group(1)} ", text)
    for _ in range(8):  # nested fractions, innermost first; bounded
        new = _FRAC.sub(lambda m: f"(({m.group(1)})/({m.group(2)}))", text)
        new = _FRAC_SHORT.sub(lambda m: f"(({m.group(1)})/({m.group(2)}))", new)
        if new == text:
            break
        text = new
    text = re.sub(r"\\sqrt\s*\{", "√{", text)
    text = re.sub(r"\\sqrt\s*(?=\d)", "√", text)
    text = text.replace("{", "(").replace("}", ")")
    # "$80 / $40" is currency, "$5+3=8$" opens maths: either way the "$" before a digit goes.
    text = re.sub(r"\$(?=\d)", "", text)
    return _THOUSANDS.sub(lambda m: m.group(1) + m.group(2).replace(",", ""), text)


# ---------------------------------------------------------------------------------------------
# Tokens: arithmetic tokens form runs; anything else (words, commands, symbols) ends a run.

_TOKEN = re.compile(
    r"(?P<num>\d+(?:\.\d+)?|\.\d+)|(?P<op>[-+*/^])|(?P<lp>\()|(?P<rp>\))|(?P<rel>[=≈])"
    r"|(?P<pct>%)|(?P<sqrt>√)|(?P<space>[ \t]+)|(?P<cmd>\\[A-Za-z]+)|(?P<word>[A-Za-z]+)"
    r"|(?P<glued>[.,](?=\S))|(?P<other>[\s\S])"
)
# A "." or "," glued to what follows ("0.\overline{3}") is not punctuation that ends a claim.
_OUTSIDE = ("cmd", "word", "glued", "other")


@dataclass
class _Tok:
    kind: str
    text: str


def _tokenize(text: str) -> list[_Tok]:
    return [_Tok(m.lastgroup or "other", m.group()) for m in _TOKEN.finditer(text)]


def _risky_neighbour(tok: _Tok | None, spaced: bool, safe: frozenset[str]) -> bool:
    """Whether the token next to a run may carry the run's expression further."""
    if tok is None:
        return False
    if not spaced:
        return tok.kind == "glued" or tok.text not in safe
    if tok.kind == "cmd":
        return True
    if tok.kind == "word":
        # A single letter is read as a variable ("a", "x"), never as an English word.
        return len(tok.text) == 1 or tok.text.lower() in _RISKY_WORDS
    return tok.kind == "glued" or (tok.text not in safe and tok.text not in ".!?()")


def _first_side_detached(side: list[_Tok]) -> bool:
    """Whether a run's first side starts cleanly rather than continuing an expression."""
    if not side or side[0].kind != "op":
        return True
    # "+ 3" and "- 4" (binary, or a bullet dash) continue something unseen; "-3" is a number.
    return side[0].text == "-" and len(side) > 1 and side[1].kind != "space"


def check_claims(text: str) -> list[ArithClaim]:
    """Find and check every arithmetic equality chain in `text`; never raises on any input."""
    if len(text) > MAX_STEP_CHARS:
        # The cut may split a number ("= 1|7"): a trailing command makes that edge unjudgeable.
        text = text[:MAX_STEP_CHARS] + "\\truncated"
    toks = _tokenize(_normalise(text))
    claims: list[ArithClaim] = []
    i = 0
    while i < len(toks):
        if toks[i].kind in _OUTSIDE:
            i += 1
            continue
        j = i
        while j < len(toks) and toks[j].kind not in _OUTSIDE:
            j += 1
        claims.extend(_check_run(toks, i, j))
        i = j
    return claims


def _check_run(toks: list[_Tok], i: int, j: int) -> list[ArithClaim]:
    run = toks[i:j]
    if not any(t.kind == "rel" for t in run) or sum(len(t.text) for t in run) > _MAX_RUN_CHARS:
        return []
    before = toks[i - 1] if i > 0 else None
    after = toks[j] if j < len(toks) else None
    left_risky = _risky_neighbour(before, run[0].kind == "space", _SAFE_BEFORE)
    right_risky = _risky_neighbour(after, run[-1].kind == "space", _SAFE_AFTER)
    sides: list[list[_Tok]] = [[]]
    relations: list[str] = []
    for t in run:
        if t.kind == "rel":
            relations.append(t.text)
            sides.append([])
        elif t.kind != "space":
            sides[-1].append(t)
        elif sides[-1] and sides[-1][-1].kind != "space":
            sides[-1].append(t)  # keep one space: "2 3" must not read as 23
    sides = [s[:-1] if s and s[-1].kind == "space" else s for s in sides]
    usable = [True] * len(sides)
    # A side at the edge of the run may continue into text the checker cannot read.
    if left_risky or not _first_side_detached(sides[0]):
        usable[0] = False
    if right_risky or (sides[-1] and sides[-1][-1].kind == "op"):
        usable[-1] = False
    # "0.2 * 100 = 20%" and "20% = 0.2" are both common: a percent sign may scale by 1/100 or
    # merely label the number, so a claim holds if it holds under either reading.
    readings = [Fraction(1, 100), Fraction(1)] if any(t.kind == "pct" for t in run) else [None]
    evaluated = [[_evaluate(s, pct) if ok else None for s, ok in zip(sides, usable, strict=True)] for pct in readings]
    claims = []
    for k, relation in enumerate(relations):
        best: ArithClaim | None = None
        for values in evaluated:
            a, b = values[k], values[k + 1]
            if a is None or b is None:
                continue
            ok = _holds(a, b, sides[k], sides[k + 1], approx=relation == "≈")
            if best is None or (ok and not best.correct):
                best = ArithClaim(_render(sides[k]), _render(sides[k + 1]), relation, ok, a, b)
        if best is not None:
            claims.append(best)
    return claims


def _render(side: list[_Tok]) -> str:
    return "".join(t.text for t in side)


def _holds(a: Fraction, b: Fraction, side_a: list[_Tok], side_b: list[_Tok], approx: bool) -> bool:
    if a == b:
        return True
    # A written decimal may be rounded or truncated: 2/3 = 0.67, 2/3 = 0.666.
    tol = Fraction(0)
    for side in (side_a, side_b):
        places = _decimal_places(side)
        if places is not None and (places > 0 or approx):
            tol = max(tol, Fraction(1, 10**places))
    if approx:
        tol = max(tol, max(abs(a), abs(b)) / 100)
    return abs(a - b) < tol or (approx and abs(a - b) == tol)


def _decimal_places(side: list[_Tok]) -> int | None:
    """Decimal places of a side that is one (possibly negative) literal, else None."""
    toks = side[1:] if side and side[0].text == "-" else side
    if len(toks) != 1 or toks[0].kind != "num":
        return None
    text = toks[0].text
    return len(text.split(".", 1)[1]) if "." in text else 0


# ---------------------------------------------------------------------------------------------
# Exact evaluation: a recursive-descent parser over one side's tokens.


def _evaluate(side: list[_Tok], percent: Fraction | None = None) -> Fraction | None:
    if not side:
        return None
    # A percentage inside a sum is ambiguous ("50 + 10% = 55" means 50 * 1.1).
    if any(t.kind == "pct" for t in side) and any(
        t.kind == "op" and t.text in "+-" for t in side[1:]
    ):
        return None
    parser = _Parser(side, percent if percent is not None else Fraction(1, 100))
    try:
        value = parser.expression(0)
        if parser.pos != len(parser.toks):
            return None
        return value
    except (_Uncheckable, ZeroDivisionError, OverflowError, ValueError):
        return None


class _Parser:
    def __init__(self, toks: list[_Tok], percent: Fraction) -> None:
        self.toks = toks
        self.pos = 0
        self.percent = percent

    def _peek(self) -> _Tok | None:
        return self.toks[self.pos] if self.pos < len(self.toks) else None

    def _skip_space(self) -> None:
        while (t := self._peek()) is not None and t.kind == "space":
            self.pos += 1

    def _take(self, kind: str, text: str | None = None) -> bool:
        self._skip_space()
        t = self._peek()
        if t is not None and t.kind == kind and (text is None or t.text in text):
            self.pos += 1
            return True
        return False

    def expression(self, depth: int) -> Fraction:
        """expression := term (("+" | "-") term)*"""
        if depth > _MAX_DEPTH:
            raise _Uncheckable("nesting too deep")
        value = self.term(depth)
        while True:
            self._skip_space()
            t = self._peek()
            if t is None or t.kind != "op" or t.text not in "+-":
                return value
            self.pos += 1
            rhs = self.term(depth)
            value = value + rhs if t.text == "+" else value - rhs
            _check_size(value)

    def term(self, depth: int) -> Fraction:
        """term := unary (("*" | "/" | implicit product) unary)*"""
        value = self.unary(depth)
        while True:
            self._skip_space()
            t = self._peek()
            if t is not None and t.kind == "op" and t.text in "*/":
                self.pos += 1
                rhs = self.unary(depth)
                value = value * rhs if t.text == "*" else value / rhs
            elif t is not None and t.kind in ("lp", "sqrt") and self._glued():
                value = value * self.unary(depth)  # implicit product: 3(0.29), 4√2
            else:
                return value
            _check_size(value)

    def _glued(self) -> bool:
        # Implicit multiplication only when nothing separates the factors: "2(3)", not "2 (3)".
        prev = self.toks[self.pos - 1] if self.pos > 0 else None
        return prev is not None and prev.kind in ("num", "rp", "pct")

    def unary(self, depth: int) -> Fraction:
        """unary := ("+" | "-") unary | power"""
        self._skip_space()
        t = self._peek()
        if t is not None and t.kind == "op" and t.text in "+-":
            self.pos += 1
            value = self.unary(depth + 1)
            return -value if t.text == "-" else value
        return self.power(depth)

    def power(self, depth: int) -> Fraction:
        """power := postfix ("^" unary)?, bounded"""
        base = self.postfix(depth)
        self._skip_space()
        t = self._peek()
        if t is not None and t.kind == "op" and t.text == "^":
            self.pos += 1
            exponent = self.unary(depth + 1)  # right-associative: 2^3^2 = 2^9
            return _bounded_power(base, exponent)
        return base

    def postfix(self, depth: int) -> Fraction:
        """postfix := atom "%"*"""
        value = self.atom(depth)
        while self.pos < len(self.toks) and self.toks[self.pos].kind == "pct":
            self.pos += 1
            value *= self.percent
        return value

    def atom(self, depth: int) -> Fraction:
        """atom := number | "(" expression ")" | "√" atom"""
        self._skip_space()
        t = self._peek()
        if t is None:
            raise _Uncheckable("missing operand")
        if t.kind == "num":
            self.pos += 1
            if len(t.text) > _MAX_LITERAL_DIGITS:
                raise _Uncheckable("literal too long")
            return Fraction(t.text)
        if t.kind == "lp":
            self.pos += 1
            value = self.expression(depth + 1)
            if not self._take("rp"):
                raise _Uncheckable("unbalanced parenthesis")
            return value
        if t.kind == "sqrt":
            self.pos += 1
            return _exact_sqrt(self.atom(depth + 1))
        raise _Uncheckable(f"unexpected {t.text!r}")


def _bits(x: Fraction) -> int:
    return x.numerator.bit_length() + x.denominator.bit_length()


def _check_size(x: Fraction) -> None:
    if _bits(x) > _MAX_BITS:
        raise _Uncheckable("value too large")


def _bounded_power(base: Fraction, exponent: Fraction) -> Fraction:
    if exponent.denominator != 1:
        raise _Uncheckable("non-integer exponent")
    e = exponent.numerator
    if abs(e) > _MAX_EXPONENT or max(_bits(base), 1) * abs(e) > _MAX_BITS:
        raise _Uncheckable("power too large")
    return base**e


def _exact_sqrt(x: Fraction) -> Fraction:
    if x < 0:
        raise _Uncheckable("square root of a negative number")
    num, den = math.isqrt(x.numerator), math.isqrt(x.denominator)
    if num * num != x.numerator or den * den != x.denominator:
        raise _Uncheckable("irrational square root")
    return Fraction(num, den)


def check_step(text: str) -> StepCheck:
    """Check every arithmetic claim in one step."""
    return StepCheck(tuple(check_claims(text)))


# ---------------------------------------------------------------------------------------------


class RuleScorer:
    """Score each step 1 (all arithmetic claims right), 0 (one is wrong) or `neutral` (none)."""

    kind = "rule"

    def __init__(
        self,
        neutral: float = 0.5,
        separator: str = DEFAULT_SEPARATOR,
        regex: str | None = None,
    ) -> None:
        if not 0.0 <= neutral <= 1.0:
            raise ValueError(f"neutral must be in [0, 1], got {neutral}")
        if regex is None and not separator:
            raise ValueError("separator must be a non-empty string (or pass regex=)")
        self.neutral = float(neutral)
        self.separator = separator
        self.regex = regex

    def score(self, prompt: str, completion: str) -> StepScores:
        """Split `completion` into steps and score the arithmetic of each one."""
        start = time.perf_counter()
        spans = split_steps(completion, self.separator, self.regex)
        steps = step_texts(completion, spans)
        scores = []
        for text in steps:
            verdict = check_step(text).verdict
            scores.append(self.neutral if verdict is None else float(verdict))
        return StepScores(steps, spans, scores, {"score_s": time.perf_counter() - start})

    def score_batch(self, prompts: Sequence[str], completions: Sequence[str]) -> list[StepScores]:
        """Score many completions; the rule scorer has no batching gain, so this is a loop."""
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
        return [self.score(p, c) for p, c in zip(prompts, completions, strict=True)]

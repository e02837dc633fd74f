"""One (completion, reference) pair decided without sympy, when exact rules can settle it.

`prepare_reference` reads a reference as datasets ship it (once per batch); `decide` extracts
the completion's final answer, normalises it, reads it in the reference's shape and compares
exact numbers, q·√r·π^k values, clock times, ratios and restated boxes. What it cannot settle
comes back undecided, with the normalised prediction for the sympy workers. Everything here is
bounded string and `fractions` work: pure functions, safe in the caller's process and in a
worker alike.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ..core.result import Status
from ..core.text import is_truncated
from .equiv import EquivConfig, Verdict, compare_monomials, compare_numbers
from .extract import (
    Extraction,
    ExtractionMethod,
    ExtractionMode,
    choice_letter,
    extract_answer,
    reference_answer,
)
from .monomials import Monomial, has_several_parts, is_word, parse_monomial
from .normalize import (
    ExactNumber,
    colon_pair,
    decimal_comma_twin,
    equation_rhs,
    equation_values,
    membership_set,
    normalize_answer,
    parse_exact_number,
    split_assignment,
)

# Longest answer we hand to sympy; longer "answers" are padding or attacks, not answers.
MAX_ANSWER_CHARS = 2000
# A reference longer than this is not one a dataset ships; it is not read at all.
MAX_REFERENCE_CHARS = 100_000


@dataclass(frozen=True)
class Reference:
    """A reference answer prepared once per batch: its normal form and exact readings."""

    raw: str
    normalized: str
    number: ExactNumber | None = None
    letter: str | None = None  # the choice letter, when the reference names one
    rhs: str | None = None  # right-hand side when the reference is an assignment such as x=3
    monomial: Monomial | None = None  # exact q·√r·π^k value, when the reference is one
    problem: str = ""  # why the reference cannot be used; "" when it can

    @property
    def decimals(self) -> int | None:
        """Digits after the point when the reference is a decimal such as 3.14."""
        return self.number.decimals if self.number is not None else None


@dataclass(frozen=True)
class Decision:
    """The outcome of `decide`: a verdict, or the normalised prediction sympy must judge."""

    verdict: Verdict | None
    extraction: Extraction | None
    prediction: str = ""


def missing_number(value: Any) -> bool:
    """A NaN or infinite float: how pandas writes a missing label."""
    return isinstance(value, float) and not math.isfinite(value)


def not_one_answer(value: Any) -> str | None:
    """Why a container (dict, list, tuple, set) is no reference, or None for any other value: its
    Python spelling ("{'x': 1}") is no answer a model could write."""
    if isinstance(value, (dict, list, tuple, set)):
        return f"reference is a {type(value).__name__}, not one answer"
    return None


def prepare_reference(reference: Any) -> Reference:
    """Read a reference as datasets ship it; an unusable one carries its `problem`."""
    raw = reference.decode("utf-8", "replace") if isinstance(reference, bytes) else reference
    if missing_number(raw):
        # pandas writes a missing label as NaN: it is no answer, not the answer "nan"
        return Reference(str(raw), "", problem=f"reference is not a number ({raw})")
    several = not_one_answer(raw)
    if several is not None:
        return Reference(repr(raw)[:200], "", problem=several)
    raw = "" if raw is None else str(raw)
    if len(raw) > MAX_REFERENCE_CHARS:
        return Reference(raw[:200], "", problem=f"reference longer than {MAX_REFERENCE_CHARS} characters")
    found = reference_answer(raw)
    if found is None:
        return Reference(raw, "", problem=_no_reference(reference))
    text = found.answer
    if len(text) > MAX_ANSWER_CHARS:
        return Reference(raw, "", problem="reference answer too long to parse")
    normalized = normalize_answer(text, plain=found.plain)
    if not normalized:
        return Reference(raw, "", problem="empty reference answer")
    letter = choice_letter(text) if len(text.strip()) <= 12 else None
    if letter is not None and not _looks_like_choice(text):
        letter = None
    return Reference(raw, normalized, parse_exact_number(normalized), letter, split_assignment(normalized),
                     parse_monomial(normalized))


#: Extractions without a marker: not trusted in a completion its generator cut off.
LOOSE_METHODS = frozenset({ExtractionMethod.BARE, ExtractionMethod.MATH, ExtractionMethod.NUMBER})
#: Markers with no closing delimiter of their own: in a cut-off completion they count only
#: when something closes the answer ("The final answer is 1" at the cut could have been 12).
#: PRM800K's "# Answer" line is left out: its traces end on that line (a documented choice).
OPEN_ENDED_METHODS = frozenset({ExtractionMethod.ANSWER_PHRASE, ExtractionMethod.GSM8K})
# LaTeX that wraps a word answer in a reference: "\text{even}" names a word, not e*v*e*n
_TEXT_WORD_RE = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mbox)\s*\{")


# After an answer, only closers, then a connector at the very end of a cut-off completion
_CUT_AT_CONNECTOR_RE = re.compile(r"\A[\s}$*)\]]*(?:</answer>)?[\s$*]*(?:,|;|(?i:or|and|either|possibly))\s*\Z")


def decide(completion: Any, ref: Reference, cfg: EquivConfig, mode: ExtractionMode = "auto") -> Decision:
    """Decide a pair with exact rules; an undecided Decision carries the prediction for sympy."""
    if not isinstance(completion, str):
        return Decision(Verdict(Status.NO_ANSWER, "completion is not a string"), None)
    if ref.problem:
        # nothing to compare with, so the completion is not read: a long one would cost the
        # caller's process its extraction for no verdict
        return Decision(Verdict(Status.BAD_REFERENCE, ref.problem), None)
    ext = extract_answer(completion, choices=ref.letter is not None, mode=mode)
    if ext is None:
        return Decision(Verdict(Status.NO_ANSWER, "no final answer found"), None)
    if is_truncated(completion) and (ext.method in LOOSE_METHODS or (
            ext.method in OPEN_ENDED_METHODS and not _closed_at(completion, ext.end))):
        # A cut-off text ends wherever the length limit fell: its last number is not an answer,
        # nor is a phrase answer that the cut may have ended mid-number.
        return Decision(Verdict(Status.NO_ANSWER, f"truncated completion; only a marked answer "
                                f"counts, not one found as {ext.method.value}"), ext)
    if is_truncated(completion) and _CUT_AT_CONNECTOR_RE.search(completion[ext.end : ext.end + 200]):
        # "\boxed{3} or" at the cut: the alternative it offered was cut off
        return Decision(Verdict(Status.NO_ANSWER, "truncated completion: the cut falls after a "
                                "connector, so what follows the answer is missing"), ext)
    if ref.letter is not None:
        letter = choice_letter(ext.answer)
        if letter is None:
            return Decision(Verdict(Status.WRONG, "answer is not a choice letter"), ext)
        return Decision(Verdict(Status.CORRECT if letter == ref.letter else Status.WRONG), ext)
    if len(ext.answer) > MAX_ANSWER_CHARS:
        return Decision(Verdict(Status.PARSE_ERROR, "answer too long to parse"), ext)
    pred = normalize_answer(ext.answer, plain=ext.plain)
    if not pred:
        return Decision(Verdict(Status.NO_ANSWER, "empty final answer"), ext)
    verdict = _exact_verdict(completion, ext, pred, ref, cfg)
    return Decision(verdict, ext, "" if verdict is not None else _same_shape(pred, ref)[0])


def _closed_at(completion: str, end: int) -> bool:
    """True when the answer ending at `end` is closed: a newline, a sentence end or a closing
    delimiter follows it before the text ends."""
    tail = completion[end : end + 200].lstrip(" \t*")
    return tail[:1] in ("\n", ".", "!", "?", ",", ";", "$", ")", "]", "}", "<", "\\")


def _exact_verdict(completion: str, ext: Extraction, pred: str, ref: Reference, cfg: EquivConfig) -> Verdict | None:
    """The verdict exact rules give, or None when only sympy can tell."""
    if pred == ref.normalized:
        return Verdict(Status.CORRECT)
    pred, ref = _same_shape(pred, ref)
    if pred == ref.normalized or _decimal_twins(pred, ref.normalized):
        return Verdict(Status.CORRECT)
    words = _compare_words(pred, ref)
    if words is not None:
        return words
    if "=" in pred and "=" not in ref.normalized:
        values = equation_values(pred)
        verdict = _equation_verdict(values, ref, cfg) if values is not None else None
        if verdict is not None:
            return verdict
    if ext.parts and not _is_compound(ref.normalized):
        verdict = _restated(completion, ext, ref, cfg)
        if verdict is not None:
            return verdict
    pred_num = parse_exact_number(pred)
    colons = colon_pair(ref.normalized), colon_pair(pred)
    if colons != (None, None):
        verdict = _compare_colons(colons[0], colons[1], ref.number, pred_num, cfg)
        if verdict is not None:
            return verdict
    if pred_num is not None and ref.number is not None:
        return compare_numbers(ref.number, pred_num, cfg)
    pred_mono = parse_monomial(pred)
    if pred_mono is not None and ref.monomial is not None:
        return compare_monomials(ref.monomial, pred_mono, ref.decimals, cfg)
    # a number is never a word, a tuple, a set, an interval union or a matrix
    ref_scalar = ref.number is not None or ref.monomial is not None
    pred_scalar = pred_num is not None or pred_mono is not None
    if (ref_scalar and _is_compound(pred)) or (pred_scalar and _is_compound(ref.normalized)):
        return Verdict(Status.WRONG, "different kind of answer")
    return None


def _compare_words(pred: str, ref: Reference) -> Verdict | None:
    """Word answers compare as words: "neve" is not "even" (sympy reads both as e*v*e*n).

    Two words of three letters or more compare as (lower-cased) strings; a reference written
    as a word in \\text{} is answered only by that word. None when the rule does not apply.
    """
    ref_word, pred_word = is_word(ref.normalized), is_word(pred)
    if ref_word and pred_word and max(len(pred), len(ref.normalized)) >= 3:
        return Verdict(Status.CORRECT if pred == ref.normalized else Status.WRONG)
    if ref_word and len(ref.normalized) >= 3 and _TEXT_WORD_RE.search(ref.raw[:MAX_ANSWER_CHARS]):
        return Verdict(Status.WRONG, "the reference is a word")
    return None


def _exact_part_verdict(part: str, ref: Reference, cfg: EquivConfig) -> Verdict | None:
    """One part of an answer against the reference by exact rules (a number, a monomial); None
    when only sympy can compare them."""
    num, mono = parse_exact_number(part), parse_monomial(part)
    if num is not None and ref.number is not None:
        return compare_numbers(ref.number, num, cfg)
    if mono is not None and ref.monomial is not None:
        return compare_monomials(ref.monomial, mono, ref.decimals, cfg)
    return None


def _equation_verdict(values: list[str], ref: Reference, cfg: EquivConfig) -> Verdict | None:
    """An equation answer that states several values (`4=3`, `x=5=7`, `0=\\frac{14}{3}`) is
    correct only when each is the answer: WRONG as soon as an exact one differs, CORRECT when
    all are exact and equal, else None (sympy compares the parts)."""
    if len(values) < 2:
        return None
    undecided = False
    for value in dict.fromkeys(values):
        verdict = _exact_part_verdict(value, ref, cfg)
        if verdict is None:
            undecided = True
            continue
        if verdict.status is not Status.CORRECT:
            return Verdict(Status.WRONG, "an equation whose parts are not all the answer")
    return None if undecided else Verdict(Status.CORRECT, "every part of the equation is the answer")


def _same_shape(pred: str, ref: Reference) -> tuple[str, Reference]:
    """Read the prediction in the reference's shape, as Math-Verify does.

    An equation answers a reference that is not one with its last right-hand side
    ("\\cos A = -\\frac{24}{25}" for "-\\frac{24}{25}"), "x \\in [-2,7]" answers "[-2,7]", and an
    assignment reference ("k=1") is answered by its value.
    """
    ref_eq = "=" in ref.normalized
    if not ref_eq and "\\in" not in ref.normalized:
        member = membership_set(pred)
        if member is not None:
            return member, ref
    if not ref_eq and "=" in pred:
        rhs = equation_rhs(pred)
        if rhs is not None:
            return rhs, ref
    if ref.rhs is not None and "=" not in pred:
        return pred, Reference(ref.raw, ref.rhs, parse_exact_number(ref.rhs), None, None, parse_monomial(ref.rhs))
    return pred, ref


def _decimal_twins(a: str, b: str) -> bool:
    """`1,22` against `1.22` written exactly so: the decimal-comma reading of an answer field."""
    return decimal_comma_twin(a, min_decimals=2) == b or decimal_comma_twin(b, min_decimals=2) == a


def _restated(completion: str, ext: Extraction, ref: Reference, cfg: EquivConfig) -> Verdict | None:
    """Several boxes against a one-part reference: correct only when every box states its value.

    "$\\boxed{15\\frac{39}{40}}$, or $\\boxed{\\frac{639}{40}}$" restates one value; "$\\boxed{2}$ and
    $\\boxed{3}$" is a list and wrong. None when a part needs sympy (then the list goes on).
    """
    if ref.number is None and ref.monomial is None:
        return None
    for start, end in ext.parts:
        verdict = _exact_part_verdict(normalize_answer(completion[start:end]), ref, cfg)
        if verdict is None:
            return None
        if verdict.status is not Status.CORRECT:
            return Verdict(Status.WRONG, "several different answers")
    return Verdict(Status.CORRECT, "the same value restated")


def _compare_colons(
    ref: tuple[Fraction, Fraction, bool] | None,
    pred: tuple[Fraction, Fraction, bool] | None,
    ref_num: ExactNumber | None,
    pred_num: ExactNumber | None,
    cfg: EquivConfig,
) -> Verdict | None:
    """`a:b` answers: clock times compare as times, ratios as ratios; never as a division by 0.

    Two clock times (`h:mm`) are equal only when they are the same time (12:00 is not 1:00); a
    ratio equals a proportional ratio or its value; a time, or a ratio with a zero part, is
    never a number. None when the pair is not for this rule (a ratio against an expression).
    """
    if ref is not None and pred is not None:
        if ref[:2] == pred[:2]:
            return Verdict(Status.CORRECT)
        if (ref[2] and pred[2]) or 0 in (ref[1], pred[1]):
            return Verdict(Status.WRONG, "different times" if ref[2] and pred[2] else "ratio with a zero part")
        same = ref[0] * pred[1] == pred[0] * ref[1]
        return Verdict(Status.CORRECT if same else Status.WRONG)
    colon, number = (ref, pred_num) if ref is not None else (pred, ref_num)
    assert colon is not None
    if colon[2] or colon[1] == 0:
        return Verdict(Status.WRONG, "a clock time is not a number" if colon[2] else "ratio with a zero part")
    if number is None:
        return None
    value = ExactNumber(colon[0] / colon[1])
    return compare_numbers(value, number, cfg) if ref is not None else compare_numbers(number, value, cfg)


def _no_reference(reference: Any) -> str:
    """Why a reference yields no answer."""
    if reference is None:
        return "no reference answer (None)"
    if not str(reference).strip():
        return "empty reference answer"
    return "no answer found in the reference"


def _is_compound(normalized: str) -> bool:
    """A word answer, or one with several parts (tuple, set, union, matrix)."""
    return is_word(normalized) or has_several_parts(normalized)


def _looks_like_choice(text: str) -> bool:
    """A reference names a choice when it is a lone capital letter, optionally "(B)" or "\\text{B}"."""
    text = text.strip()  # adjacent \s* backtrack cubically on long white space: bound it first
    return len(text) <= 40 and bool(
        re.fullmatch(r"(?:\\text\{)?\s*\(?\s*[A-J]\s*\)?\s*\}?\s*\.?", text))

"""Bring an extracted answer to one canonical LaTeX spelling, and read exact numbers from it.

All functions here are bounded string work (simple regexes, single passes) and never call
sympy, so the verifier can run them in the caller's process on untrusted text.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

# Digits Python will turn into an int without tripping its str->int limit (4300 by default).
_MAX_DIGITS = 4000
# Largest power of ten the fast path will build; bigger ones go to the isolated workers.
_MAX_EXPONENT = 1000
# An integer power tower or factorial whose result would have more digits than this is not
# evaluated at all (sympy would try, in C, for minutes).
MAX_RESULT_DIGITS = 100_000

_UNICODE = {
    "−": "-", "–": "-", "—": "-", "‐": "-", "＋": "+",
    "×": "\\times ", "·": "\\cdot ", "⋅": "\\cdot ", "÷": "\\div ",
    "π": "\\pi ", "∞": "\\infty ", "≤": "\\le ", "≥": "\\ge ", "≠": "\\ne ",
    "∅": "\\emptyset ", "∪": "\\cup ", "∩": "\\cap ", "∈": "\\in ",
    "½": "\\frac{1}{2}", "⅓": "\\frac{1}{3}", "⅔": "\\frac{2}{3}", "¼": "\\frac{1}{4}",
    "¾": "\\frac{3}{4}", "⅕": "\\frac{1}{5}", "⅙": "\\frac{1}{6}", "⅛": "\\frac{1}{8}",
    "²": "^{2}", "³": "^{3}", "°": "", "º": "",
    "\u00a0": " ", "\u2009": " ", "\u202f": " ", "\u2002": " ", "\u2003": " ", "\u200b": "",
}
_UNICODE_RE = re.compile("|".join(re.escape(k) for k in _UNICODE))
_SQRT_UNICODE_RE = re.compile(r"√\s*(?:\(([^()]{0,200})\)|\{([^{}]{0,200})\}|(\d+(?:\.\d+)?|[A-Za-z]))")
_SQRT_PAREN_RE = re.compile(r"\\sqrt\s*\(([^()]{0,200})\)")
_DROP_RE = re.compile(
    r"\\(?:displaystyle|textstyle|left|right|bigl|bigr|Bigl|Bigr|biggl|biggr|big|Big|bigg|Bigg"
    r"|tiny|scriptsize|footnotesize|small|normalsize|large|Large|LARGE|huge|Huge)(?![A-Za-z])"
    r"|(?<!\\)\\[,;:! ]|~"
)
# LaTeX spacing before it goes too ("30\,^\circ"); the braces of ^{\circ} only as a pair, so that
# "\frac{270^\circ}{7}" keeps its numerator's closing brace
_DEGREE_RE = re.compile(
    r"(?<!\s)(?<!\\[,;:! ])"  # from the start of a run of spacing only: linear in a long run
    r"(?:\\[,;:! ]|\s)*(?:\^\s*(?:\{\s*\\circ\s*\}|\\circ)|\\circ|\\degree|\\text\{\s*degrees?\s*\})")
_TRIG_RE = re.compile(r"\\(?:sin|cos|tan|cot|sec|csc)(?![A-Za-z])")
_TRIG_DEGREES_RE = re.compile(r"(?<![\d.])(\d{1,12}(?:\.\d{1,12})?)\s*\^\s*(?:\{\s*\\circ\s*\}|\\circ)")
_FRAC_CMD_RE = re.compile(r"\\[dt]frac(?![A-Za-z])")
_FRAC_SHORT_RE = re.compile(r"\\frac\s*(\d)\s*(\d)")
_FRAC_HALF_SHORT_RE = re.compile(r"\\frac\s*\{([^{}]*)\}\s*(\d)")
_TEXT_CMD_RE = re.compile(r"\\(?:text|textbf|textit|textrm|textnormal|mathrm|mbox|mathbf|operatorname)\s*\{([^{}]*)\}")
_OR_RE = re.compile(r"\\text\{\s*(?:or|and)\s*\}|\s+(?:or|and)\s+|\\(?:quad|qquad|lor|vee|land|wedge)(?![A-Za-z])")
# ", \quad", "\quad \text{and} \quad", ", and" all become one comma
_COMMA_RUN_RE = re.compile(r"\s*,(?:\s*,)+\s*")
# "28 percent", "28 pct", "28\text{ percentage}" -> 28\%
_PERCENT_WORD_RE = re.compile(r"(?<=\d)\s*(?:\\(?:text|mbox|mathrm)\s*\{\s*)?(?:percent(?:age)?|pct)\b\.?\s*\}?", re.I)
_EMPTYSET_RE = re.compile(r"\\(?:varnothing|emptyset)(?![A-Za-z])|\\\{\s*\\\}")
# "5 apples": a number, then 1-4 words (see _trailing_words_end; a regex for it backtracks
# exponentially on a long run of letters).
_LEAD_NUMBER_RE = re.compile(r"[-+]?[\d.,/]*+")
_SUFFIX_RE = re.compile(r"(\s*+)(\\%|%)?(\s*+)")
# "5 million" is not 5: words that scale the number are never dropped as units
_MAGNITUDE_RE = re.compile(r"(?i)\b(?:hundred|thousand|million|billion|trillion|dozen|percent|times)\b")
# A unit in \text{} at the end: words split by single runs of spaces, so that no run of white
# space can be matched two ways (the pattern this replaced was cubic on one).
_TRAILING_UNIT_RE = re.compile(
    r"\\(?:text|mbox|mathrm)\s*\{\s*([A-Za-z]+(?:(?: +|/|\. ?)[A-Za-z]+)*\.?)\s*\}(?:\s*\^\{?\d\}?)?\s*$"
)
_MAX_TRAILING_UNITS = 3
# White space and LaTeX spacing between a number and its unit ("12\ \text{cm}", "12\,\text{m/s}"),
# matched on the reversed text: one pass, where a `$`-anchored search is quadratic in a long run
_SPACING_REVERSED_RE = re.compile(r"(?:\s|[,;:!]\\|\\)*")
# What a unit may follow: a number's last digit, a closing brace or parenthesis (`4\sqrt{2}`,
# `\frac{1}{2}`), `\pi` or a percent sign. Not a comma or a word: "3, \text{four}" is a list.
_UNIT_AFTER_RE = re.compile(r"(?:[\d})%]|\\pi)$")
# A \text{} group ending the text before a unit: "\text{even} \text{odd}" is two words, not a unit.
_TEXT_GROUP_END_RE = re.compile(r"\\(?:text|mbox|mathrm|textbf|textit|textrm)\s*\{[^{}]*\}$")
# Words that change or hedge the value before them: never dropped as a unit ("3 or four",
# "3 not four", "3 minus one", "3 or more", "3 at most", "5 is wrong", "3 squared").
_VALUE_WORDS = frozenset(
    "or and nor not no either neither plus minus times over divided by more less fewer least most "
    "than approximately about around roughly nearly almost maybe possibly perhaps probably is are "
    "was wrong incorrect if else otherwise but to squared cubed half halves third thirds quarter "
    "quarters zero one two three four five six seven eight nine ten eleven twelve thirteen "
    "fourteen fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy "
    "eighty ninety hundred hundreds thousand thousands million millions billion billions trillion "
    "dozen dozens percent radian radians tenth tenths hundredth hundredths thousandth thousandths "
    "lakh lakhs crore crores".split()
)
_SPACE_AFTER_CMD_RE = re.compile(r"(\\[A-Za-z]+)\s+(?=[A-Za-z0-9])")
# 1,234 and 12,345,678.5: groups of three after a non-zero lead ("0,111" is a decimal comma)
_THOUSANDS_RE = re.compile(r"^[-+]?[1-9]\d{0,2}(?:(?:,|\{,\})\d{3})+(?:\.\d+)?$")
# 1,22 / 1000,99 / 0,111 written in plain text: a decimal comma (see normalize_answer)
_DECIMAL_COMMA_RE = re.compile(r"^([-+]?\d+),(\d+)((?:\\%)?)$")
_LIST_COMMA_RE = re.compile(r",\s")
_CURRENCY_RE = re.compile(r"[€£¥₹]")
# "32,\\!349" and "32,\\! 349": LaTeX's spacing for a thousands separator
_LATEX_THOUSANDS_RE = re.compile(r"(?<=\d),\\!\s*(?=\d{3})")
_SUBSCRIPT_RE = re.compile(r"_\{[^{}]*\}|_\w")
# Commands that write a value or an operation, not a variable (`\theta`, `\star` name things)
_CONSTANT_COMMANDS = frozenset(
    "pi infty sqrt frac dfrac tfrac cdot times div pm mp sin cos tan cot sec csc arcsin arccos "
    "arctan log ln exp lg left right circ degree text mathrm mbox operatorname".split()
)
_COMMAND_NAME_RE = re.compile(r"\\[A-Za-z]+")
# \phantom{3} renders as blank space: it is no answer
_PHANTOM_RE = re.compile(r"\\[hv]?phantom\s*\{")
# relations other than "=": an inequality or membership is not an assignment or a chain
_RELATION_RE = re.compile(r"[<>]|\\(?:le|ge|ne|leq|geq|neq|lt|gt|in|subset|subseteq|notin|not)(?![A-Za-z])|!=")
_COLON_RE = re.compile(r"(-?\d+(?:\.\d+)?):(\d+(?:\.\d+)?)")
_TIME_RE = re.compile(r"(?:[01]?\d|2[0-3]):[0-5]\d")
_SCI_E_RE = re.compile(r"^([-+]?\d+(?:\.\d+)?)[eE]([-+]?\d+)$")
_MIXED_RE = re.compile(r"^(-?)(\d+)\\frac\{(\d+)\}\{(\d+)\}$")
_REPEAT_RE = re.compile(r"(\d*)\.(\d*)\\overline\{(\d{1,50})\}")
_DECIMAL_LITERAL_RE = re.compile(r"(?<![\d.])(\d{1,200})\.(\d{1,200})(?![\d.])")

# Exact-number grammar of the fast path (the string is already normalised: no spaces).
_INT = r"[-+]?\d+"
_DEC = r"[-+]?(?:\d+\.\d*|\.\d+|\d+)"
_NUM_RE = re.compile(rf"^({_DEC})$")
_FRAC_RE = re.compile(rf"^([-+]?)\\frac\{{({_INT})\}}\{{({_INT})\}}$")
_SLASH_RE = re.compile(rf"^({_INT})/({_INT})$")
_SCI_RE = re.compile(rf"^({_DEC})(?:\\times|\\cdot|\*)10\^(?:\{{({_INT})\}}|(\d))$")


_NUMBER_WORDS = {
    w: str(i)
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
        "fifteen sixteen seventeen eighteen nineteen twenty".split()
    )
}


@dataclass(frozen=True)
class ExactNumber:
    """A number read exactly from an answer string, with how it was written."""

    value: Fraction
    decimals: int | None = None  # digits after the point when written as a non-integer decimal
    percent: bool = False


def _unwrap_text(s: str) -> str:
    """Drop trailing unit words in \\text{} and unwrap the rest ("5\\text{ cm}" -> "5")."""
    stripped = s.strip()
    whole = _TEXT_CMD_RE.fullmatch(stripped)
    if whole:
        return whole.group(1)
    # trailing "\text{ cm}" / "\mbox{units}" after a value is a unit, not part of the value;
    # "\text{ million}" is part of it. At most a few: each strip searches the whole string.
    for _ in range(_MAX_TRAILING_UNITS):
        m = _TRAILING_UNIT_RE.search(stripped)
        left = _without_trailing_spacing(stripped[: m.start()]) if m else ""
        if (not m or not left or m.group(1) in ("i",) or _MAGNITUDE_RE.search(m.group(1))
                or not _unit_may_follow(left) or not _unit_words(m.group(1).split())):
            break
        stripped = left
    return _TEXT_CMD_RE.sub(lambda m: m.group(1), stripped)


def _without_blank_phantoms(s: str) -> str:
    r"""`s` without its empty `\phantom{}` groups; "" when one holds something (nested braces read)."""
    out, pos = [], 0
    for m in _PHANTOM_RE.finditer(s):
        if m.start() < pos:
            continue  # inside a group already read
        depth, k = 1, m.end()
        while k < len(s) and depth:
            depth += {"{": 1, "}": -1}.get(s[k], 0)
            k += 1
        if depth or s[m.end() : k - 1].strip():
            return ""  # unclosed, or a value the reader cannot see
        out.append(s[pos : m.start()] + " ")
        pos = k
    return ("".join(out) + s[pos:]).strip()


def _without_trailing_spacing(s: str) -> str:
    """`s` without the white space and LaTeX spacing commands at its end."""
    return s[: len(s) - _SPACING_REVERSED_RE.match(s[::-1]).end()]


def _unit_may_follow(left: str) -> bool:
    """True when `left` ends in a number (digit, closing brace, `\\pi`, `%`) that a unit may follow."""
    return bool(_UNIT_AFTER_RE.search(left[-4:])) and not _TEXT_GROUP_END_RE.search(left[-220:])


def _unit_words(words: list[str]) -> bool:
    """True when none of `words` is a connector, negation, comparison, operator or number word."""
    return not any(w.rstrip(".").lower() in _VALUE_WORDS for w in words)


def _trailing_words_end(s: str) -> int | None:
    """Where the number ends in "5 apples" / "12.5% of them" (a number, optional percent sign,
    white space, then one to four words of two or more letters, each optionally ending in a
    dot), else None; linear."""
    number = _LEAD_NUMBER_RE.match(s)
    end = number.end()
    digits = s[number.start() : end].lstrip("+-")
    if not (digits[-1:].isdigit() or (digits.endswith(".") and digits[-2:-1].isdigit())):
        return None
    suffix = _SUFFIX_RE.match(s, end)
    before, percent, after = suffix.groups()
    if not (after if percent else before):
        return None  # white space must come before the words (after the percent sign)
    words = 0
    tokens = s[suffix.end() :].split()
    if len(tokens) > 4 or not _unit_words(tokens):
        return None  # "3 or four", "3 minus one": the words change the value, they are no unit
    for token in tokens:
        pieces = token.split(".")
        if pieces[-1] == "":
            pieces.pop()  # one dot may end a word
        for piece in pieces:
            if len(piece) < 2 or not all(c in _ASCII_LETTER_SET for c in piece):
                return None
        words += len(pieces)
    return end if 1 <= words <= 4 else None


_ASCII_LETTER_SET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def normalize_answer(answer: str, plain: bool = False) -> str:
    """Return the canonical spelling of an answer: LaTeX with no spaces, units or decorations.

    Equal strings after normalisation mean equal answers; different strings mean "compare
    further", never "different". Commas between digits: "1,234" and "12,345,678" are thousands
    separators; a comma followed by a space ("32, 349") always separates list items; any other
    comma separates list items too ("-2,1"), except with `plain=True` (a number read from prose)
    where one comma between digits is a decimal comma ("2,74"); see `decimal_comma_twin`.
    """
    s = answer.strip()
    if "phantom" in s:
        # \phantom{3} renders as blank space: "\phantom{3}" is no answer, and "3\phantom{4}" hides
        # a part of one (a hedge the reader cannot see), so neither is read
        s = _without_blank_phantoms(s)
    s = _SQRT_UNICODE_RE.sub(lambda m: "\\sqrt{" + (m.group(1) or m.group(2) or m.group(3)) + "}", s)
    s = _UNICODE_RE.sub(lambda m: _UNICODE[m.group(0)], s)
    s = s.replace("\\$", "").replace("$", "")
    s = _CURRENCY_RE.sub("", s)
    s = _LATEX_THOUSANDS_RE.sub("{,}", s)
    s = _PERCENT_WORD_RE.sub("\\\\%", s)
    if _TRIG_RE.search(s):
        # inside a trigonometric expression degrees are an angle: sin 80^\circ is not sin 80
        s = _TRIG_DEGREES_RE.sub(r"(\\frac{\1\\pi}{180})", s)
    s = _DEGREE_RE.sub("", s)
    s = s.replace("\\%", "%").replace("%", "\\%")
    tw = _trailing_words_end(s)
    if tw is not None and not _MAGNITUDE_RE.search(s[tw:]):
        s = s[:tw] + ("\\%" if "%" in s[tw:] else "")
    s = _OR_RE.sub(", ", s)
    s = _COMMA_RUN_RE.sub(", ", s).strip(" ,")
    s = _unwrap_text(s)
    s = _EMPTYSET_RE.sub("\\\\emptyset", s)
    s = _DROP_RE.sub(" ", s)
    s = _FRAC_CMD_RE.sub("\\\\frac", s)
    s = _SQRT_PAREN_RE.sub(lambda m: "\\sqrt{" + m.group(1) + "}", s)
    # keep "\pi r" apart, drop every other space ("1 000", "x + 1")
    s = _SPACE_AFTER_CMD_RE.sub(lambda m: m.group(1) + "\x00", s)
    listed = _LIST_COMMA_RE.search(s) is not None  # "32, 349" is two items, never 32349
    s = re.sub(r"\s+", "", s).replace("\x00", " ")
    s = _FRAC_SHORT_RE.sub(r"\\frac{\1}{\2}", s)
    s = _FRAC_HALF_SHORT_RE.sub(r"\\frac{\1}{\2}", s)
    s = s.rstrip(".,;:")
    if s.startswith("{") and s.endswith("}") and _balanced_group(s):
        s = s[1:-1]
    if not listed and _THOUSANDS_RE.match(s):
        s = s.replace("{,}", "").replace(",", "")
    elif plain and not listed and (twin := decimal_comma_twin(s)):
        s = twin
    sci = _SCI_E_RE.match(s)
    if sci:
        s = f"{sci.group(1)}\\times10^{{{int(sci.group(2))}}}" if len(sci.group(2)) < 6 else s
    s = _REPEAT_RE.sub(_repeating_to_frac, s)
    mixed = _MIXED_RE.match(s)
    if mixed and int(mixed.group(3)) < int(mixed.group(4)) and len(s) < 200:
        sign, whole, num, den = mixed.groups()
        s = f"{sign}\\frac{{{int(whole) * int(den) + int(num)}}}{{{den}}}"
    if re.fullmatch(r"[A-Za-z][A-Za-z ]+", s) and len(s) > 1:
        s = s.lower()  # a word answer ("Monday", "Evelyn") is case-insensitive
        s = _NUMBER_WORDS.get(s, s)
    return collapse_chain(s)


def decimal_comma_twin(normalized: str, min_decimals: int = 1) -> str | None:
    """`1,22` read with a decimal comma (`1.22`); None unless the answer is one such number with
    at least `min_decimals` digits after the comma.

    In an answer field `1,22` is ambiguous (the list 1, 22 or the number 1.22): normalisation
    keeps the list, and the verifier also accepts this twin, with two digits or more after the
    comma ("-2,1" stays the roots -2 and 1), when the other side is written exactly so. In prose
    ("costs 2,74 $") it is the number.
    """
    dec = _DECIMAL_COMMA_RE.fullmatch(normalized)
    if dec is None or len(dec.group(2)) < min_decimals:
        return None
    return f"{dec.group(1)}.{dec.group(2)}{dec.group(3)}"


def _top_level_split(s: str, sep: str) -> list[str]:
    """Split on `sep` outside (), [], {} (one pass)."""
    parts, depth, last = [], 0, 0
    for i, c in enumerate(s):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(s[last:i])
            last = i + 1
    parts.append(s[last:])
    return parts


def _is_symbolic_name(lhs: str) -> bool:
    """A left-hand side made of symbols only (`x`, `x_{1}`, `\\frac{NO}{BO}`, `|AB|`, `(p,q)`)."""
    bare = _SUBSCRIPT_RE.sub("", lhs)
    return bool(re.search(r"[A-Za-z]", bare)) and not re.search(r"\d", bare)


def collapse_chain(normalized: str) -> str:
    """Shorten a chain of equalities to what it asserts: `x=5+5+1=11` -> `x=11`, `1+1=2` -> ...

    A symbol on the left keeps it (`z=1+1=2` -> `z=2`); otherwise the last value remains.
    `\\approx` ends the exact part (`x=1/3\\approx0.33` -> `x=1/3`) or, with no `=` before it,
    reads as one (`x\\approx11` -> `x=11`).
    """
    s = normalized
    if "\\approx" in s:
        head = s.split("\\approx", 1)[0]
        s = head if "=" in head else s.replace("\\approx", "=")
        s = s.lstrip("=")
    if s.count("=") < 2 or _RELATION_RE.search(s):
        return s
    parts = _top_level_split(s, "=")
    if len(parts) < 3 or not all(parts) or any("," in p for p in _top_level_split(s, ",")[1:2]):
        return s
    if len(_top_level_split(s, ",")) > 1:
        return s  # a system such as x=1,y=2=... is not one chain
    # "4=3=3" or "x=5=7" asserts a false equality: kept whole, so that every part is compared
    if not _is_symbolic_name(parts[0]) or _numbers_differ(parts[1:]):
        return s
    return f"{parts[0]}={parts[-1]}"


def _numbers_differ(parts: list[str]) -> bool:
    """True when two of `parts` are exact numbers with different values (`5` and `7`)."""
    seen: Fraction | None = None
    for part in parts:
        num = parse_exact_number(part)
        if num is None or num.percent:
            continue
        if seen is not None and num.value != seen:
            return True
        seen = num.value
    return False


def _names_a_quantity(lhs: str) -> bool:
    """A left side that names what is asked (`x`, `f^{-1}(2)`, `x^3-2x+1`, `\\theta`, `|AB|`), not
    a value written out (`4`, `\\frac{1}{2}`, `\\pi`, `\\{3,4\\}`): it holds a variable."""
    bare = _COMMAND_NAME_RE.sub(lambda m: " " if m.group(0)[1:] in _CONSTANT_COMMANDS else "x", lhs)
    return re.search(r"[A-Za-z]", bare) is not None


def equation_values(normalized: str) -> list[str] | None:
    """The parts of an equation that state the answer's value, or None if it is no equation.

    `x=3` states 3; `4=3`, `0=\\frac{14}{3}` and `\\{3,4\\}=3` state every part (a left side that
    is a value, not a name), so each must equal the answer: "4 = 3" is not an answer of 3.
    """
    if "=" not in normalized or _RELATION_RE.search(normalized) or len(_top_level_split(normalized, ",")) > 1:
        return None
    parts = [p.strip() for p in _top_level_split(normalized, "=")]
    if len(parts) < 2 or not all(parts):
        return None
    return parts[1:] if _names_a_quantity(parts[0]) else parts


def _balanced_group(s: str) -> bool:
    """True when the opening brace of `s` closes at its last character."""
    depth = 0
    for i, c in enumerate(s):
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i == len(s) - 1
    return False


def _repeating_to_frac(m: re.Match[str]) -> str:
    """`0.1\\overline{6}` -> `\\frac{1}{6}`: exact value of a repeating decimal."""
    whole, fixed, rep = m.group(1) or "0", m.group(2), m.group(3)
    if len(whole) + len(fixed) > 200:
        return m.group(0)
    value = Fraction(int(whole + fixed), 10 ** len(fixed))
    value += Fraction(int(rep), (10 ** len(rep) - 1) * 10 ** len(fixed))
    return f"\\frac{{{value.numerator}}}{{{value.denominator}}}"


def _to_fraction(text: str) -> tuple[Fraction, int | None] | None:
    """Read a plain decimal string exactly; also return its number of decimals if non-integer."""
    if len(text) > _MAX_DIGITS:
        return None
    try:
        value = Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None
    decimals = None
    if "." in text:
        frac_part = text.split(".", 1)[1]
        decimals = len(frac_part) if frac_part else None
    return value, decimals


def parse_exact_number(normalized: str) -> ExactNumber | None:
    """Read a normalised answer as an exact rational (int, decimal, fraction, sci, percent)."""
    s = normalized
    percent = s.endswith("\\%")
    if percent:
        s = s[:-2]
    if not s or len(s) > _MAX_DIGITS:
        return None
    m = _NUM_RE.match(s)
    if m:
        got = _to_fraction(s)
        return None if got is None else ExactNumber(got[0], got[1], percent)
    m = _FRAC_RE.match(s) or _SLASH_RE.match(s)
    if m:
        groups = m.groups()
        sign = groups[0] if len(groups) == 3 else ""
        num, den = int(groups[-2]), int(groups[-1])
        if den == 0:
            return None
        value = Fraction(num, den)
        return ExactNumber(-value if sign == "-" else value, None, percent)
    m = _SCI_RE.match(s)
    if m:
        exp = int(m.group(2) or m.group(3))
        got = _to_fraction(m.group(1))
        if got is None or abs(exp) > _MAX_EXPONENT:
            return None
        return ExactNumber(got[0] * Fraction(10) ** exp, None, percent)
    return None


def split_assignment(normalized: str) -> str | None:
    """The right-hand side of an assignment such as `x=3`, `|AB|=1` or `(p,q)=(3,2)` (else None).

    The left side must be symbols only (no digits outside subscripts): `2x+z=1` is an equation.
    """
    if normalized.count("=") != 1 or _RELATION_RE.search(normalized):
        return None
    parts = _top_level_split(normalized, "=")
    if len(parts) != 2 or not parts[0] or not parts[1] or not _is_symbolic_name(parts[0]):
        return None
    if len(_top_level_split(normalized, ",")) > 1:
        return None  # "a=1,b=2" names two values
    return parts[1]


def equation_rhs(normalized: str) -> str | None:
    """The value an equation names (`\\cos A=-\\frac{24}{25}` -> `-\\frac{24}{25}`), else None.

    Only when the left side is a name and what follows it is one value: `4=3` and `x=5=7` are
    None (see `equation_values`).
    """
    values = equation_values(normalized)
    return values[0] if values is not None and len(values) == 1 else None


def membership_set(normalized: str) -> str | None:
    """The set of `x\\in[-2,7]` (a symbol on the left), else None."""
    m = re.fullmatch(r"([A-Za-z](?:_\{?\w+\}?)?)\\in(.+)", normalized)
    return m.group(2) if m else None


def colon_pair(normalized: str) -> tuple[Fraction, Fraction, bool] | None:
    """`a:b` with plain numbers: (a, b, looks like a clock time `h:mm`), else None."""
    m = _COLON_RE.fullmatch(normalized)
    if not m or len(m.group(1)) > 30 or len(m.group(2)) > 30:
        return None
    return Fraction(m.group(1)), Fraction(m.group(2)), _TIME_RE.fullmatch(normalized) is not None


def exact_decimals(latex: str) -> str:
    """Rewrite decimal literals as exact fractions (`3.14` -> `\\frac{314}{100}`) for sympy."""
    return _DECIMAL_LITERAL_RE.sub(
        lambda m: f"\\frac{{{m.group(1)}{m.group(2)}}}{{1{'0' * len(m.group(2))}}}", latex
    )


def _tower_log10(s: str, i: int, depth: int) -> tuple[float, int] | None:
    """log10 of an integer power tower starting at s[i] (`9^{9^{9^9}}`), and where it ends."""
    m = re.compile(r"\d{1,400}").match(s, i)
    if not m or depth > 50:
        return None
    base = int(m.group(0))
    i = m.end()
    if i >= len(s) or s[i] != "^":
        return (math.log10(base) if base > 0 else 0.0), i
    i += 1
    if i < len(s) and s[i] == "{":
        inner = _tower_log10(s, i + 1, depth + 1)
        if inner is None or inner[1] >= len(s) or s[inner[1]] != "}":
            return None
        exp_log, i = inner[0], inner[1] + 1
    else:
        inner = _tower_log10(s, i, depth + 1)
        if inner is None:
            return None
        exp_log, i = inner
    if base <= 1:
        return 0.0, i
    # log10(base^e) = e * log10(base); e = 10^exp_log, capped so the float never overflows
    return min(10.0 ** min(exp_log, 300.0) * math.log10(base), 1e300), i


def too_large_to_evaluate(latex: str) -> bool:
    """True when the answer holds an integer power tower or factorial too big to evaluate."""
    for m in re.finditer(r"(?<![\d.])\d{1,400}\^", latex):
        got = _tower_log10(latex, m.start(), 0)
        if got is not None and got[0] > MAX_RESULT_DIGITS:
            return True
    for m in re.finditer(r"(\d{1,400})\)?\s*!", latex):
        n = int(m.group(1))
        if n > 25_000:  # 25000! already has ~100k digits
            return True
    # a parenthesised tower used as a base or under a factorial: (10^7)^{10^7}, (10^{10})!
    for m in re.finditer(r"\(\s*(\d{1,400}\^[\d^{}]{1,400})\s*\)", latex):
        inner = _tower_log10(m.group(1), 0, 0)
        if inner is None or inner[1] != len(m.group(1)):
            continue
        after = latex[m.end() : m.end() + 400].lstrip()
        if after.startswith("!") and inner[0] > math.log10(25_000):
            return True
        if after.startswith("^"):
            exp = _tower_log10(after, 2, 1) if after[1:2] == "{" else _tower_log10(after, 1, 1)
            if exp is not None and 10.0 ** min(exp[0], 300.0) * inner[0] > MAX_RESULT_DIGITS:
                return True
    # (n!)!: anything beyond (8!)! is astronomically large
    for m in re.finditer(r"\(\s*(\d{1,400})\s*!\s*\)\s*!", latex):
        if int(m.group(1)) >= 9:
            return True
    return False

"""Find the final answer in a whole completion: which text, where, and how it was found.

Everything here is linear-time string scanning (no backtracking-prone regexes, no sympy), so it
is safe to run in the caller's process on untrusted model output of any size.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class ExtractionMethod(str, enum.Enum):
    """Which marker located the final answer."""

    BOXED = "boxed"
    ANSWER_TAG = "answer_tag"
    GSM8K = "gsm8k"
    ANSWER_PHRASE = "answer_phrase"
    BOLD = "bold"
    CHOICE_LETTER = "choice_letter"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Extraction:
    """The final answer of a completion and its character span [start, end) in that completion."""

    answer: str
    start: int
    end: int
    method: ExtractionMethod


# A bold answer only counts near the end: earlier bold text is headings and emphasis.
_BOLD_WINDOW = 400

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\b\s*")
_ANSWER_TAG_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_GSM8K_RE = re.compile(r"^[ \t]*####[ \t]*(\S[^\n]*)$", re.MULTILINE)
# "final answer is", "the answer is", "Answer:", "**Final Answer:**", "answer would be"
_PHRASE_RE = re.compile(
    r"(?:(?<![A-Za-z])(?:final|correct)\s+answer|(?<![A-Za-z])answer)"
    r"(?:\*\*)?\s*(?:is|would\s+be|will\s+be|should\s+be|=)?\s*(?:[:：]\s*)?(?:\*\*)?[ \t]*",
    re.IGNORECASE,
)
# "Answer:" only opens an answer at the start of a line, so "the answer: we" prose is skipped.
_LINE_ANSWER_RE = re.compile(r"^[ \t#>*]*(?:final\s+)?answer\b", re.IGNORECASE | re.MULTILINE)
_BOLD_RE = re.compile(r"\*\*([^*\n]{1,200})\*\*")
_LETTER_RE = re.compile(r"^\s*[\(\[]?\s*([A-Ja-j])\s*[\)\]]?(?=$|[\s.,:;)])")
_PAREN_LETTER_RE = re.compile(r"\(([A-J])\)")
_WORDS_RE = re.compile(r"[A-Za-z][a-z]+(?:[ -][a-z]+)*")


def _matching_braces(text: str) -> dict[int, int]:
    """Map the index of every structural `{` to its matching `}` in one left-to-right pass."""
    match: dict[int, int] = {}
    stack: list[int] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n and text[i + 1] in "{}":
            i += 2  # \{ and \} are literal braces, not grouping
            continue
        if c == "{":
            stack.append(i)
        elif c == "}" and stack:
            match[stack.pop()] = i
        i += 1
    return match


def _boxed_candidates(text: str) -> list[Extraction]:
    """Every closed \\boxed{...} / \\fbox{...} (and brace-less `\\boxed 5`) in the text."""
    found: list[Extraction] = []
    braces: dict[int, int] | None = None
    for m in _BOX_RE.finditer(text):
        pos = m.end()
        if pos < len(text) and text[pos] == "{":
            if braces is None:
                braces = _matching_braces(text)
            close = braces.get(pos)
            if close is None:
                continue
            found.append(Extraction(text[pos + 1 : close], pos + 1, close, ExtractionMethod.BOXED))
        else:
            # `\boxed 5` (brace-less, one token) as some models write it
            tok = re.match(r"[^\s$,;]+", text[pos : pos + 200])
            if tok and m.group(0)[-1:].isspace():
                end = pos + tok.end()
                found.append(Extraction(text[pos:end], pos, end, ExtractionMethod.BOXED))
    return found


def _strip_math_delimiters(text: str, start: int) -> tuple[str, int]:
    """Remove one layer of $...$, $$...$$, \\(...\\), \\[...\\] around an answer; keep offsets."""
    for left, right in (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$")):
        if text.startswith(left) and text.endswith(right) and len(text) >= len(left) + len(right):
            inner = text[len(left) : len(text) - len(right)]
            lead = len(inner) - len(inner.lstrip())
            return inner.strip(), start + len(left) + lead
    return text, start


def _phrase_answer(text: str, pos: int) -> tuple[int, int] | None:
    """The span of the answer that starts at `pos` after an answer phrase, up to its sentence end."""
    n = len(text)
    while pos < n and text[pos] in " \t":
        pos += 1
    if pos >= n or text[pos] == "\n":
        # "Final Answer:\n$$ 42 $$": the answer may sit on the next non-empty line
        nl = pos
        while nl < n and text[nl] in " \t\n":
            nl += 1
        if nl >= n or nl - pos > 4:
            return None
        pos = nl
    for left, right in (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$")):
        if text.startswith(left, pos):
            close = text.find(right, pos + len(left))
            while close > 0 and right == "$" and text[close - 1] == "\\":
                close = text.find(right, close + 1)  # "\$" is a dollar sign, not a delimiter
            if close < 0:
                return None
            return pos, close + len(right)
    end = pos
    while end < n:
        c = text[end]
        if c == "\n":
            break
        if c in ".!?;" and (end + 1 >= n or text[end + 1] in " \t\n"):
            break
        end += 1
    while end > pos and text[end - 1] in " \t*.,":
        end -= 1
    return (pos, end) if end > pos else None


def _phrase_candidates(text: str) -> list[Extraction]:
    """Answers introduced by "the final answer is", "the answer is" or a line-leading "Answer:"."""
    found: list[Extraction] = []
    line_starts = {m.start() for m in _LINE_ANSWER_RE.finditer(text)}
    for m in _PHRASE_RE.finditer(text):
        phrase = m.group(0).lower()
        has_verb = any(w in phrase for w in (" is", "be", "="))
        has_colon = ":" in phrase or "：" in phrase
        # "the answer is", "final answer:" open an answer; "our answer is correct" and
        # "the correct answer of 63" do not
        before = text[max(0, m.start() - 4) : m.start()].lower()
        determined = "final" in phrase or "correct" in phrase or before.endswith(("the ", "my "))
        at_line_start = any(s <= m.start() <= s + 12 for s in line_starts)
        if not ((has_verb and determined) or (has_colon and (determined or at_line_start))):
            continue
        span = _phrase_answer(text, m.end())
        if span is None:
            continue
        found.append(Extraction(text[span[0] : span[1]], span[0], span[1], ExtractionMethod.ANSWER_PHRASE))
    return found


def _tagged_candidates(text: str) -> list[Extraction]:
    """<answer>...</answer> contents and GSM8K `#### 42` lines."""
    found = [
        Extraction(m.group(1), m.start(1), m.end(1), ExtractionMethod.ANSWER_TAG)
        for m in _ANSWER_TAG_RE.finditer(text)
    ]
    found += [
        Extraction(m.group(1).rstrip(), m.start(1), m.start(1) + len(m.group(1).rstrip()), ExtractionMethod.GSM8K)
        for m in _GSM8K_RE.finditer(text)
    ]
    return found


def _bold_candidate(text: str) -> Extraction | None:
    """The last **bold** span in the closing part of the text, if any."""
    offset = max(0, len(text) - _BOLD_WINDOW)
    last = None
    for m in _BOLD_RE.finditer(text, offset):
        last = m
    if last is None:
        return None
    return Extraction(last.group(1), last.start(1), last.end(1), ExtractionMethod.BOLD)


def choice_letter(answer: str) -> str | None:
    """The multiple-choice letter an answer string names ("B", "(b)", "\\text{(B)} 42"), if any."""
    s = answer.strip()
    s = re.sub(r"^\\(?:text|textbf|mathrm|mathbf)\{(.*)\}$", r"\1", s)
    s = s.replace("\\text{", "").replace("}", " ").strip()
    m = _LETTER_RE.match(s)
    if not m:
        return None
    rest = s[m.end() :].strip()
    # "(B) 42" and "B because ..." name B; "a + 1" or "b^2" is an expression, not a letter
    bracketed = m.group(0).strip().startswith(("(", "["))
    prose = m.group(1).isupper() and re.match(r"[a-z]{2,}\b", rest) is not None
    if rest and not (bracketed or prose or rest[0] in ".:)"):
        return None
    return m.group(1).upper()


def extract_answer(text: str, *, choices: bool = False) -> Extraction | None:
    """Return the final answer of `text` (the last one given) with its span, or None if absent.

    Boxed answers, <answer> tags, GSM8K `####` lines and "the (final) answer is" phrases compete
    on position: the one that starts last wins, so a later box corrects an earlier one. Bold text
    near the end is used only when none of those exist. With `choices=True` (the reference is a
    multiple-choice letter) a letter in prose such as "the answer is (B)" is also recognised.
    """
    if not isinstance(text, str) or not text:
        return None
    phrases = _phrase_candidates(text)
    # a phrase that yields only words ("... is correct", "is shown below") is a weak answer: it
    # counts only when nothing stronger exists (a word answer such as "Evelyn" still works)
    strong = [c for c in phrases if not _WORDS_RE.fullmatch(c.answer.strip())]
    weak = [c for c in phrases if _WORDS_RE.fullmatch(c.answer.strip())]
    candidates = _boxed_candidates(text) + _tagged_candidates(text) + strong
    if not any(c.answer.strip() for c in candidates):
        candidates = weak
    best: Extraction | None = None
    for cand in candidates:
        if not cand.answer.strip():
            continue
        # ties on start favour the box: "Answer: \boxed{5}" has both starting close together
        if best is None or cand.start > best.start or (
            cand.start == best.start and cand.method is ExtractionMethod.BOXED
        ):
            best = cand
    if best is None:
        best = _bold_candidate(text)
    if best is None and choices:
        tail_start = max(0, len(text) - _BOLD_WINDOW)
        last = None
        for m in _PAREN_LETTER_RE.finditer(text, tail_start):
            last = m
        if last is not None:
            best = Extraction(last.group(1), last.start(1), last.end(1), ExtractionMethod.CHOICE_LETTER)
    if best is None:
        return None
    # A phrase answer that contains a box ("The answer is $\boxed{5}$.") yields the box itself.
    if best.method is not ExtractionMethod.BOXED:
        inner = _boxed_candidates(best.answer)
        if inner:
            last_box = inner[-1]
            best = Extraction(
                last_box.answer, best.start + last_box.start, best.start + last_box.end, ExtractionMethod.BOXED
            )
    raw = best.answer
    lead = len(raw) - len(raw.lstrip())
    answer, start = _strip_math_delimiters(raw.strip(), best.start + lead)
    if not answer:
        return None
    return Extraction(answer, start, start + len(answer), best.method)

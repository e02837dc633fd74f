"""Find the final answer in a whole completion: which text, where, and how it was found.

Priority (docs/verifiers.md, "Extraction"):

1. Markers; the one that starts last wins, so a later answer corrects an earlier one:
   `\\boxed{}` / `\\fbox{}` (boxes joined by a connector such as ", ", "and", "\\quad" form one
   answer; a correction such as "no wait," or a sentence end between them does not),
   `<answer>...</answer>`, GSM8K `#### 42` (at a line start, or anywhere before a number),
   "the (final) answer is ..." / a line-leading "Answer:"; bold text near the end only when none
   of these exist. A marker that introduces prose ("Final Answer: The largest $n$ is 34.")
   yields the answer that prose states, chosen as in 2b.
2. Without a marker (`mode="auto"`, the default; `mode="strict"` stops after 1):
   a. a bare answer: the whole text when it is a short expression, not prose ("x = 9",
      "28 percent", "$\\frac{1}{3}$");
   b. else the last sentence that holds math or a number, questions skipped; in it the last
      math span (`$...$`, `$$...$$`, `\\(...\\)`, `\\[...\\]`; spans with only connectors
      between them form one list) that does not merely name something (`$n$`, `$ABCD$`,
      `$f(x)$`), else the last number (with its percent word or unit), else that name.

Everything here is linear-time string scanning (no backtracking-prone regexes, no sympy): about
a second of CPU per megabyte on the worst inputs, safe in the caller's process; the verifier
hands very long completions to its workers so that even that runs under the time limit.
"""

from __future__ import annotations

import bisect
import enum
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

ExtractionMode = Literal["auto", "strict"]
EXTRACTION_MODES: tuple[str, ...] = ("auto", "strict")


class ExtractionMethod(str, enum.Enum):
    """Which marker (or which fallback) located the final answer."""

    BOXED = "boxed"
    ANSWER_TAG = "answer_tag"
    GSM8K = "gsm8k"
    ANSWER_HEADING = "answer_heading"  # PRM800K's closing "# Answer" line, the answer below it
    ANSWER_PHRASE = "answer_phrase"
    BOLD = "bold"
    CHOICE_LETTER = "choice_letter"
    BARE = "bare"  # the whole text is the answer
    MATH = "math"  # the last math span of the final sentence (no marker)
    NUMBER = "number"  # the last number of the final sentence (no marker)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Extraction:
    """The final answer of a completion and its character span [start, end) in that completion.

    `parts` holds the span of each piece when the answer joins several boxes or math spans
    (then `answer` is the pieces joined by ", "); otherwise it is empty and
    `text[start:end] == answer`. `plain` is True for a number read from prose ("... costs 2,74 $"),
    where a comma between digits with no space is a decimal comma.
    """

    answer: str
    start: int
    end: int
    method: ExtractionMethod
    parts: tuple[tuple[int, int], ...] = ()
    plain: bool = False


# A bold answer only counts near the end: earlier bold text is headings and emphasis.
_BOLD_WINDOW = 400
# Longest answer read after a phrase or as a sentence; longer text is not an answer.
_MAX_SPAN = 2000
# A bare answer is a short text; a long one is a solution.
_MAX_BARE = 300
# Boxes (or math spans) closer than this with a connector between them form one answer.
_MAX_GAP = 70
# More parts than this are not one answer; a group stops growing there.
_MAX_PARTS = 32

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\b\s*")
_DELIM_RE = re.compile(r"\\[$\\\[(]|\$\$?")
_BRACE_RE = re.compile(r"\\\\|\\[{}]|[{}]")
# Tags only: `<answer>(.*?)</answer>` rescans to the end from every unclosed tag (quadratic).
_ANSWER_TAG_RE = re.compile(r"<(/?)answer>", re.IGNORECASE)
# `#### 72` at a line start (any answer), or anywhere before a number, as verl's gsm8k scorer reads it
_GSM8K_LINE_RE = re.compile(r"^[ \t]*####[ \t]*(\S[^\n]*)$", re.MULTILINE)
_GSM8K_INLINE_RE = re.compile(r"####[ \t]*(-?[$]?[0-9][0-9.,]*)")
# PRM800K's traces end with a "# Answer" line and the answer alone on the last line; read in
# the text's tail only, so the cost does not grow with the text
_ANSWER_HEADING_RE = re.compile(r"(?:^|\n)[ \t]*#{1,6}[ \t]*answer[ \t]*:?[ \t]*\n\s*([^\n]*\S)\s*\Z", re.IGNORECASE)
_ANSWER_HEADING_TAIL = 400
# "final answer is", "the answer is", "Answer:", "**Final Answer:**", "answer would be"
_PHRASE_RE = re.compile(
    r"(?:(?<![A-Za-z])(?:final|correct)\s+answer|(?<![A-Za-z])answer)"
    r"(?:\*\*)?\s*(?:is|would\s+be|will\s+be|should\s+be|=)?\s*(?:[:：]\s*)?(?:\*\*)?[ \t]*",
    re.IGNORECASE,
)
_QUOTES_RE = re.compile(r"\\?[\"'“‘]")
_BOLD_RE = re.compile(r"\*\*([^*\n]{1,200})\*\*")
_LETTER_RE = re.compile(r"^\s*[\(\[]?\s*([A-Ja-j])\s*[\)\]]?(?=$|[\s.,:;)])")
_PAREN_LETTER_RE = re.compile(r"\(([A-J])\)")
_LEAD_LETTER_RE = re.compile(r"\s*(?:\*\*)?([A-J])(?:\*\*)?(?:[.):]|\s*$)")
_LONE_LETTER_RE = re.compile(r"(?<![A-Za-z0-9\\$(])([A-J])(?![A-Za-z0-9$'(])")
# `\text{ or }` read as its words (the connector between two answers)
_TEXT_UNWRAP_RE = re.compile(r"\\text\s*\{([^{}]*)\}")
# What may stand between a final answer and an alternative offered after it: spaces, one line break,
# LaTeX spacing, a comma, an opening bracket, a dash ("\boxed{3} (or 4)", "\boxed{3} — or 4").
_BEFORE_ALTERNATIVE_RE = re.compile(r"(?:[ \t,(\[—–-]|\n(?![ \t]*\n)|\\[,;:! ]|\\q?quad\b)*")
_ALTERNATIVE_RE = re.compile(r"(?i)(?:or|possibly|maybe|perhaps)\b")
_PROSE_OR_RE = re.compile(r"(?i)(?<![\\\w])or(?!\w)")
_LEAD_CONNECTOR_RE = re.compile(r"(?i)(?:or|and)\b|\\q?quad")
# A phrase answer that negates or hedges states no answer ("The answer is not $3$", "either 3
# or 4", "at least 3"); `\not` is a LaTeX command, not the word.
_HEDGE_RE = re.compile(
    r"(?i)(?<![\\\w])(?:not|either|neither|possibly|maybe|perhaps|probably|at\s+(?:least|most))(?!\w)"
)
# Right before the value ("The answer is never $3$", "... greater than $3$", "... other than 3");
# anywhere else in the body they belong to a restated question ("Final Answer: The largest
# number that could be ... of $f(x)$ is 19", a Math-Verify test case).
_HEDGE_BEFORE_RE = re.compile(
    r"(?i)(?<![\\\w])(?:never|cannot|can't|isn't|except|other\s+than|anything\s+but|could|might|may|"
    r"likely|unlikely|(?:greater|less|more|fewer|larger|smaller|bigger|higher|lower)\s+than)(?:\s+be)?\s*$"
)
_STATES_VALUE_RE = re.compile(r"(?i)(?<!\w)(?:is|are|equals)(?!\w)|=")
_VALUE_START_RE = re.compile(r"\d|\$|\\[(\[]|\\(?:boxed|fbox)")
# Another choice letter after the first one: a capital A-J that is no part of a word or command
_OTHER_LETTER_RE = re.compile(r"(?<![A-Za-z0-9\\])[A-J](?![A-Za-z0-9'])")
_LETTERS_RE = re.compile(r"[A-Za-z \t-]*")
# Boxes or math spans joined by one of these form a list: ", ", "and", "or", ";", "\quad".
_CONNECTOR_RE = re.compile(r"\b(?:and|or)\b|[,;]|\\q?quad", re.IGNORECASE)
# A sentence ends at . ! ? followed by a space, or at a blank line.
_SENTENCE_END_RE = re.compile(r"(?<!\\)[.!?](?=\s|$)|\n[ \t]*\n")
# "$\boxed{12}$ no wait, $\boxed{14}$": words that take an answer back never join two boxes
_CORRECTION_RE = re.compile(
    r"(?i)\b(?:no|not|wait|actually|oops|sorry|mistake|wrong|instead|rather|hmm|but|correct(?:ion|ed)?|recheck\w*)\b"
)
# What separates two boxes or math spans besides the connector itself: delimiters, box commands.
_GAP_NOISE_RE = re.compile(r"\\(?:boxed|fbox)\s*|[{}$]|\\[()\[\]]")
# A number in prose: optional currency, thousands groups or a decimal point/comma, an optional
# "/n" or ":n" (a fraction, a clock time, a ratio), then an optional percent word. It must not
# continue a word, a LaTeX command or a number.
_NUMBER_RE = re.compile(
    r"(?<![\w.,:\\^_{}])(?P<num>[-−]?[$€£¥₹]?\s?(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:[.,]\d+)?|\.\d+)"
    r"(?:\s?/\s?\d+(?![.,]\d)|:\d+(?![.,]\d))?)"
    r"(?P<pct>\s?(?:%|\\%|percent(?:age)?\b|pct\b))?"
)
_PLAIN_FRAC_RE = re.compile(r"-?\\[dt]?frac\{-?\d+\}\{-?\d+\}")
# prose words: two letters or more, not a LaTeX command
_PROSE_WORD_RE = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")
# \text{...} groups and \begin{pmatrix}-style environment names: their words are not prose
_TEXT_GROUP_RE = re.compile(r"\\(?:text|textbf|mathrm|mbox|operatorname|begin|end)\s*\{[^{}]{0,200}\}")
_ALNUM_RE = re.compile(r"[A-Za-z0-9]")
# A text that ends on one of these was cut off mid-sentence ("..., so", "... turn we").
_DANGLING_WORDS = frozenset(
    "and or but so then thus hence therefore because since which that we i it is are was be the a an of "
    "to in on for with by as at from if when where this these let get gives yields equals becomes into than "
    "must can will would should".split()
)
_ASCII_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
# chat-template tokens a completion may end with ("<|im_start|>user", "<|eot_id|>")
# One token, matched only in a window at the end (a repeated regex over the whole text is
# quadratic on long whitespace runs).
_CHAT_TOKEN_RE = re.compile(r"<\|[^|<>]{1,40}\|>\w{0,20}\Z")
_CHAT_TOKEN_MAX = 64
_CONNECTOR_WORDS = frozenset({"or", "and"})
_UNIT_LIKE_RE = re.compile(r"(?i)percent(?:age)?|pct")
# A math span that only names something: $n$, $ABCD$, $f(x)$, $\angle ABC$, $x_1$.
_NAME_RE = re.compile(
    r"(?:\\(?:angle|triangle|overline|mathrm|text)\s*(?:\{\s*)?)?[A-Za-z]{1,10}(?:_\{?[A-Za-z0-9]{1,4}\}?)?'*"
    r"(?:\([A-Za-z]\))?\}?"
)
_MAX_NAME = 64  # a name is short; a longer span is never read as one


@dataclass(frozen=True)
class _Span:
    """A math span: delimiters at [start, end), content at [inner_start, inner_end)."""

    start: int
    end: int
    inner_start: int
    inner_end: int


def _matching_braces(text: str, start: int = 0) -> dict[int, int]:
    """Map the index of every structural `{` from `start` on to its matching `}` (one pass over
    the braces only; `\\{` and `\\}` are literal braces, not grouping)."""
    match: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACE_RE.finditer(text, start):
        c = m.group(0)
        if c == "{":
            stack.append(m.start())
        elif c == "}" and stack:
            match[stack.pop()] = m.start()
    return match


def _boxes(text: str) -> list[Extraction]:
    """Every closed \\boxed{...} / \\fbox{...} (and brace-less `\\boxed 5`) in the text, in order."""
    found: list[Extraction] = []
    braces: dict[int, int] | None = None
    for m in _BOX_RE.finditer(text):
        pos = m.end()
        if pos < len(text) and text[pos] == "{":
            if braces is None:
                braces = _matching_braces(text, pos)
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


def _joinable_gap(gap: str) -> bool:
    """Two answers with this text between them form one list answer.

    The gap must be short, hold no sentence end, and have a connector ("and", "or", ",", ";",
    "\\quad") or nothing but a few symbols: "$\\boxed{2}$ and $\\boxed{3}$" is one answer,
    while "$\\boxed{5}$. Wait, that is wrong. The answer is $\\boxed{6}$" is a correction.
    """
    if len(gap) > _MAX_GAP + 20:
        return False
    core = _GAP_NOISE_RE.sub(" ", gap)
    if len(core) > _MAX_GAP or "\n\n" in gap or _SENTENCE_END_RE.search(core.strip()) or _CORRECTION_RE.search(core):
        return False
    if len(core.strip()) < 10 and not re.search(r"[A-Za-z0-9]", core):
        return True
    return bool(_CONNECTOR_RE.search(core))


def _connector_gap(gap: str) -> bool:
    """Between two math spans: nothing but connectors ("$19$, $46$, and $82$", "$x=1$ or $x=2$")."""
    if len(gap) > _MAX_GAP:
        return False
    rest = _CONNECTOR_RE.sub(" ", _GAP_NOISE_RE.sub(" ", re.sub(r"\\text\s*\{([^{}]*)\}", r" \1 ", gap)))
    return not rest.strip()


def _group(text: str, items_from_end: Iterable[Extraction], method: ExtractionMethod) -> Extraction | None:
    """The last item, joined with the items before it that a connector links to it.

    `items_from_end` yields candidates from the last one backwards; only the tail that forms
    the group is consumed, at most `_MAX_PARTS` of them. Boxes join across a short gap with a
    connector (`_joinable_gap`); math spans only when nothing but connectors lies between them
    (`_connector_gap`): prose between two formulas makes them two statements, not one list.
    """
    joinable = _joinable_gap if method is ExtractionMethod.BOXED else _connector_gap
    group: list[Extraction] = []  # from the last item backwards
    for item in items_from_end:
        if not item.answer.strip():
            if group:
                break
            continue
        if group and (item.end > group[-1].start or not joinable(text[item.end : group[-1].start])):
            break
        group.append(item)
        if len(group) >= _MAX_PARTS:
            break
    if not group:
        return None
    group.reverse()
    # the same box repeated ("\boxed{4} ... so \boxed{4}") is one answer, not a list
    pieces: list[Extraction] = []
    for it in group:
        if not pieces or pieces[-1].answer.strip() != it.answer.strip():
            pieces.append(it)
    if len(pieces) == 1:
        last = pieces[0]
        return Extraction(last.answer, last.start, last.end, method)
    answer = ", ".join(p.answer.strip() for p in pieces)
    return Extraction(answer, pieces[0].start, pieces[-1].end, method, tuple((p.start, p.end) for p in pieces))


def math_spans(text: str, lo: int = 0, hi: int | None = None) -> list[_Span]:
    """Every non-empty `$...$`, `$$...$$`, `\\(...\\)`, `\\[...\\]` in text[lo:hi], in one pass.

    Inline spans (`$`, `\\(`) end on their own line; display spans may cross lines. An
    unclosed opener is text. The scan jumps from delimiter to delimiter, and each search is
    bounded (by the line for inline spans; a display opener that never closes disables that
    kind for the rest of the text), so the work is linear in the text.
    """
    hi = len(text) if hi is None else hi
    spans: list[_Span] = []
    closed_kinds = {"$$": True, "\\[": True}  # False once an opener of that kind never closed
    line_end = -1  # the end of the line holding position i, found lazily
    i = lo
    while i < hi:
        m = _DELIM_RE.search(text, i, hi)
        if m is None:
            break
        i, tok = m.start(), m.group(0)
        if tok in ("\\$", "\\\\"):
            i += 2
            continue
        if tok in ("$$", "\\["):
            right = "$$" if tok == "$$" else "\\]"
            close = text.find(right, i + 2, hi) if closed_kinds[tok] else -1
            if close < 0:
                closed_kinds[tok] = False
                i += 2
                continue
        else:  # inline: "$" or "\\(", closed on the same line
            if line_end < i:
                line_end = text.find("\n", i, hi)
                if line_end < 0:
                    line_end = hi
            close = _inline_close(text, i + len(tok), line_end, "$" if tok == "$" else "\\)")
            if close < 0:
                i = line_end  # no opener on the rest of this line can close either
                continue
            right = "$" if tok == "$" else "\\)"
        inner_start = i + len(tok)
        if text[inner_start:close].strip():
            spans.append(_Span(i, close + len(right), inner_start, close))
        i = close + len(right)
    return spans


def _inline_close(text: str, start: int, stop: int, right: str) -> int:
    """The next unescaped `right` in text[start:stop], or -1."""
    j = start
    while j < stop:
        k = text.find(right, j, stop)
        if k < 0 or right != "$" or text[k - 1] != "\\":
            return k
        j = k + 1
    return -1


def _phrase_answer(text: str, pos: int, ends: list[int]) -> tuple[int, int] | None:
    """The span of the answer that starts at `pos` after an answer phrase, up to its sentence end."""
    n = len(text)
    while pos < n and text[pos] in " \t":
        pos += 1
    if pos >= n or text[pos] == "\n":
        # "Final Answer:\n$$ 42 $$": the answer may sit on the next non-empty line
        nl = pos
        while nl < n and nl - pos <= 4 and text[nl] in " \t\n":
            nl += 1
        if nl >= n or nl - pos > 4:
            return None
        pos = nl
    for left, right in (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$")):
        if text.startswith(left, pos):
            close = text.find(right, pos + len(left), pos + _MAX_SPAN)
            while close > 0 and right == "$" and text[close - 1] == "\\":
                close = text.find(right, close + 1, pos + _MAX_SPAN)  # "\$" is a dollar sign
            if close < 0:
                return None
            end = close + len(right)
            # "$3$ or $4$", "$3$, or possibly $4$": the sentence goes on with another answer,
            # so the answer is all of it (a list, or a hedge), not the first span
            stop = _sentence_stop(text, end, ends, pos + _MAX_SPAN)
            if _continues_with_answer(text[end:stop]):
                while stop > end and text[stop - 1] in " \t*.,":
                    stop -= 1
                return pos, stop
            return pos, end
    # up to the sentence end or the line end, whichever is first
    end = _sentence_stop(text, pos, ends, pos + _MAX_SPAN)
    while end > pos and text[end - 1] in " \t*.,":
        end -= 1
    # 'The final answer is "$12$ and $13$".': quotes are not part of the answer
    q = _QUOTES_RE.match(text, pos, end)
    if q and q.end() < end and text[end - 1] in "\"'”’":
        pos, end = q.end(), end - 1
        if end > pos and text[end - 1] == "\\":
            end -= 1
    return (pos, end) if end > pos else None


def _sentence_stop(text: str, pos: int, ends: list[int], limit: int) -> int:
    """The end of the sentence or line that holds `pos`, at most `limit`."""
    k = bisect.bisect_right(ends, pos)
    end = min(ends[k] if k < len(ends) else len(text), limit)
    line_end = text.find("\n", pos, end)
    return line_end if line_end >= 0 else end


def _continues_with_answer(rest: str) -> bool:
    """After an answer's math span: a connector ("or", "and", ", $", "\\text{ or }") and then
    another math span or number, so the span is not the whole answer."""
    core = _TEXT_UNWRAP_RE.sub(r" \1 ", rest[:_MAX_GAP * 4]).lstrip()
    if core[:1] in (",", ";"):
        core = core[1:].lstrip()
        if core.startswith(("$", "\\(", "\\[")):
            return True
    return _LEAD_CONNECTOR_RE.match(core) is not None and _holds_value(core)


def _alternative_follows(text: str, pos: int) -> bool:
    """After a final answer that ends at `pos` (its box or tag closed): its sentence goes on with
    another value or an alternative ("\\boxed{3} or 4", "$\\boxed{3}$, or $4$", "(or 4)", "or three",
    ", possibly 4"), so the answer is not committed to."""
    rest = _TEXT_UNWRAP_RE.sub(r" \1 ", text[pos : pos + _MAX_GAP * 4])
    for closer in ("$$", "$", "\\]", "\\)"):
        if rest.startswith(closer):
            rest = rest[len(closer):]
            break
    rest = rest[_BEFORE_ALTERNATIVE_RE.match(rest).end():]
    # only "or" and its hedges offer an alternative: "x=\boxed{4},$ since $10000$ ..." and "...,
    # and $y$" go on about something else
    found = _ALTERNATIVE_RE.match(rest)
    return found is not None and bool(rest[found.end():].strip(" \t.)"))


def _holds_value(text: str) -> bool:
    """True when `text` has a number or a math span in it: another value, not only words."""
    return any(c.isdigit() for c in text) or "$" in text or "\\(" in text


def _hedged(body: str) -> bool:
    """True when an answer phrase's body negates or hedges ("not 3", "either 3 or 4", "at least 3",
    "never $3$")."""
    if _HEDGE_RE.search(body) is not None:
        return True
    value = _VALUE_START_RE.search(body)
    if value is None or _HEDGE_BEFORE_RE.search(body, 0, value.start()) is None:
        return False
    # "the smallest integer greater than 10 is 19" restates the question, then answers it
    return _STATES_VALUE_RE.search(body, value.end()) is None


def _phrase_list(text: str, ext: Extraction, boxes: Sequence[Extraction]) -> Extraction | None:
    """The math spans of a phrase answer joined by connectors ("$3$ or $\\boxed{4}$") as one list
    answer (a box inside a span stands for it); None when the phrase holds fewer than two."""
    spans = math_spans(text, ext.start, ext.end)
    if len(spans) < 2 or len(spans) > _MAX_PARTS:
        return None
    items: list[Extraction] = []
    for k, span in enumerate(spans):
        if k and not _connector_gap(text[spans[k - 1].end : span.start]):
            return None
        inner = [b for b in boxes if span.inner_start <= b.start and b.end <= span.inner_end]
        item = inner[-1] if inner else _tight(text, span.inner_start, span.inner_end)
        if not item.answer.strip():
            return None
        items.append(item)
    answer = ", ".join(it.answer.strip() for it in items)
    return Extraction(answer, items[0].start, items[-1].end, ExtractionMethod.ANSWER_PHRASE,
                      tuple((it.start, it.end) for it in items))


def _sentence_ends(text: str) -> list[int]:
    """Positions of the . ! ? that end sentences and of blank lines, in order (one pass)."""
    return [m.start() for m in _SENTENCE_END_RE.finditer(text)]


def _line_starts(text: str) -> list[int]:
    """Positions where lines start (one pass)."""
    return [0] + [m.end() for m in re.finditer(r"\n", text)]


def _phrase_candidate(text: str, ends: list[int]) -> tuple[Extraction | None, Extraction | None]:
    """The last strong and the last weak answer phrase (weak: the answer is only words)."""
    matches = list(_PHRASE_RE.finditer(text))
    if not matches:
        return None, None
    lines = _line_starts(text)
    weak: Extraction | None = None
    # (start, end, words only) of the candidate seen last: the phrases of one sentence share
    # its end, so "words only" is checked on the new part alone (linear in the text overall)
    prev: tuple[int, int, bool] | None = None
    for m in reversed(matches):  # from the end: the first strong candidate is the last one
        phrase = m.group(0).lower()
        has_verb = any(w in phrase for w in (" is", "be", "="))
        has_colon = ":" in phrase or "：" in phrase
        # "the answer is", "final answer:" open an answer; "our answer is correct" and
        # "the correct answer of 63" do not
        before = text[max(0, m.start() - 4) : m.start()].lower()
        determined = "final" in phrase or "correct" in phrase or before.endswith(("the ", "my "))
        line_start = lines[bisect.bisect_right(lines, m.start()) - 1]
        at_line_start = m.start() - line_start <= 12 and not text[line_start : m.start()].strip(" \t#>*")
        if not ((has_verb and determined) or (has_colon and (determined or at_line_start))):
            continue
        span = _phrase_answer(text, m.end(), ends)
        if span is None:
            continue
        start, end = span
        if prev is not None and prev[1] == end and start <= prev[0]:
            words = prev[2] and _LETTERS_RE.fullmatch(text, start, prev[0]) is not None
        else:
            words = _LETTERS_RE.fullmatch(text, start, end) is not None
        prev = (start, end, words)
        cand = Extraction(text[start:end], start, end, ExtractionMethod.ANSWER_PHRASE)
        if not cand.answer.strip():
            continue
        if words:
            # "... is correct", "is shown below": words only, a weak answer (a word answer
            # such as "Evelyn" still counts when nothing stronger exists)
            weak = weak or cand
            continue
        return cand, weak
    return None, weak


def _tagged_candidates(text: str) -> list[Extraction]:
    """The last <answer>...</answer> content, the last GSM8K `#### 42`, and a closing "# Answer"
    line's answer."""
    found: list[Extraction] = []
    # What `<answer>(.*?)</answer>` finds last: each opening tag is closed by the next closing one.
    last_tag: tuple[int, int] | None = None
    opened: int | None = None
    if "answer>" in text.lower():
        for m in _ANSWER_TAG_RE.finditer(text):
            if not m.group(1):
                if opened is None:
                    opened = m.end()
            elif opened is not None:
                last_tag, opened = (opened, m.start()), None
    if last_tag is not None:
        found.append(Extraction(text[last_tag[0] : last_tag[1]], last_tag[0], last_tag[1], ExtractionMethod.ANSWER_TAG))
    best: tuple[int, int] | None = None
    if "####" in text:
        for m in _GSM8K_LINE_RE.finditer(text):
            val = m.group(1).rstrip()
            best = (m.start(1), m.start(1) + len(val))
        for m in _GSM8K_INLINE_RE.finditer(text):
            if best is None or m.start(1) > best[0]:
                best = (m.start(1), m.end(1))
    if best is not None:
        found.append(Extraction(text[best[0] : best[1]], best[0], best[1], ExtractionMethod.GSM8K, plain=True))
    if "#" in text:
        offset = max(0, len(text) - _ANSWER_HEADING_TAIL)
        m = _ANSWER_HEADING_RE.search(text, offset)
        if m is not None:
            found.append(Extraction(m.group(1), m.start(1), m.end(1), ExtractionMethod.ANSWER_HEADING))
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
    if rest and _names_another_choice(rest):
        return None  # "A or B", "(A)(B)(C)(D)", "A. B. C. D.": a hedge over choices names none
    return m.group(1).upper()


def _names_another_choice(rest: str) -> bool:
    """True when `rest` holds a capital A-J standing alone (not the article "A word")."""
    for m in _OTHER_LETTER_RE.finditer(rest):
        if m.group(0) == "A" and re.match(r"\s+[a-z]", rest[m.end() : m.end() + 2]):
            continue  # "(B) A triangle ...": the article
        return True
    return False


def _choice_fallback(text: str) -> Extraction | None:
    """A choice letter without a marker: "(B)" near the end, a leading "B.", or a lone capital."""
    tail_start = max(0, len(text) - _BOLD_WINDOW)
    last = None
    for m in _PAREN_LETTER_RE.finditer(text, tail_start):
        last = m
    if last is not None:
        return Extraction(last.group(1), last.start(1), last.end(1), ExtractionMethod.CHOICE_LETTER)
    lead = _LEAD_LETTER_RE.match(text)
    if lead:
        return Extraction(lead.group(1), lead.start(1), lead.end(1), ExtractionMethod.CHOICE_LETTER)
    # "Because B is valid": the last capital A-J standing alone in the final sentence (not the
    # article "A" opening a sentence, not the pronoun "I")
    ends = _sentence_ends(text)
    lo = _sentence_start(text, ends, len(text.rstrip()) - 1)
    cand = None
    for m in _LONE_LETTER_RE.finditer(text, lo):
        letter, at = m.group(1), m.start(1)
        if letter == "I" or (letter == "A" and not text[lo:at].strip()):
            continue
        cand = m
    if cand is None:
        return None
    return Extraction(cand.group(1), cand.start(1), cand.end(1), ExtractionMethod.CHOICE_LETTER)


def _sentence_start(text: str, ends: list[int], pos: int) -> int:
    """Start of the sentence that holds `pos` (just after the previous sentence end)."""
    k = bisect.bisect_left(ends, pos)
    return ends[k - 1] + 1 if k > 0 else 0


def _is_name(content: str) -> bool:
    """A math span that only names something ($n$, $ABCD$, $f(x)$), not an answer."""
    content = content.strip()
    return len(content) <= _MAX_NAME and bool(_NAME_RE.fullmatch(content))


def _is_expression_text(text: str) -> bool:
    """Short text that is an answer, not prose: no sentence inside, and words only as connectors
    ("3 or 4") or as up to three unit words after the last digit ("28 percent", "12 apples")."""
    if len(text) > _MAX_BARE or "\n\n" in text.strip() or _SENTENCE_END_RE.search(text.strip().rstrip(".")):
        return False
    outside = _strip_text_commands(text)
    digits = [m.start() for m in re.finditer(r"\d", outside)]
    units = 0
    for w in _PROSE_WORD_RE.finditer(outside):
        word = w.group(0)
        if word.lower() in _CONNECTOR_WORDS:
            continue
        if (digits and w.start() > digits[-1]) or _UNIT_LIKE_RE.fullmatch(word):
            units += 1
            continue
        return False
    return units <= 3


def _strip_text_commands(text: str) -> str:
    """Blank out \\text{...}-style groups and environment names: their words are content, not prose."""
    return _TEXT_GROUP_RE.sub(" ", text)


def _refine(text: str, ext: Extraction) -> Extraction:
    """Within prose after a marker ("The largest $n$ is 34"), the answer the prose states."""
    body = ext.answer
    if _is_expression_text(body) or not _PROSE_WORD_RE.search(_strip_text_commands(body)):
        return ext
    if _PROSE_OR_RE.search(_strip_text_commands(body)):
        return Extraction("", ext.start, ext.start, ext.method)  # "3, or so I think 4": a hedge
    found = _sentence_answer(text, ext.start, ext.end, math_spans(text, ext.start, ext.end))
    if found is None:
        return ext
    return Extraction(found.answer, found.start, found.end, ext.method, found.parts, found.plain)


def _sentence_answer(text: str, lo: int, hi: int, spans: Sequence[_Span]) -> Extraction | None:
    """In text[lo:hi] (whose math spans are `spans`): the last math span group that is not a
    name, else the last number, else the last name."""
    last_name: Extraction | None = None

    def answers_from_end() -> Iterator[Extraction]:
        nonlocal last_name
        for k in range(len(spans) - 1, -1, -1):
            item = _tight(text, spans[k].inner_start, spans[k].inner_end)
            if not item.answer or _BOX_RE.search(item.answer):
                continue  # a box is a marker: one that did not yield an answer is none
            if _is_name(item.answer):
                last_name = last_name or item
                continue
            yield item

    found = _group(text, answers_from_end(), ExtractionMethod.MATH)
    if found is not None:
        return found
    number = _last_number(text, lo, hi, spans)
    if number is not None:
        return number
    return last_name


def _tight(text: str, start: int, end: int) -> Extraction:
    """The non-blank content of text[start:end] as a MATH extraction (`text[start:end] == answer`)."""
    raw = text[start:end]
    lead = len(raw) - len(raw.lstrip())
    answer = raw.strip()
    return Extraction(answer, start + lead, start + lead + len(answer), ExtractionMethod.MATH)


def _last_number(text: str, lo: int, hi: int, spans: Sequence[_Span]) -> Extraction | None:
    """The last number (or plain \\frac{a}{b}) in text[lo:hi] outside the given math spans."""
    starts = [s.start for s in spans]
    best: tuple[int, int] | None = None
    for rx in (_NUMBER_RE, _PLAIN_FRAC_RE):
        for m in rx.finditer(text, lo, hi):
            start, end = m.start(), m.end()
            if rx is _NUMBER_RE:
                end = m.end("pct") if m.group("pct") else m.end("num")
                if _is_variable_after(text, m.end("num")) and not m.group("pct"):
                    continue
            k = bisect.bisect_right(starts, start) - 1
            if k >= 0 and spans[k].start <= start < spans[k].end:
                continue
            if best is None or start >= best[0]:
                best = (start, end)
    if best is None:
        return None
    raw = text[best[0] : best[1]]
    lead = len(raw) - len(raw.lstrip())
    answer = raw.strip()
    return Extraction(answer, best[0] + lead, best[0] + lead + len(answer), ExtractionMethod.NUMBER, plain=True)


def _is_variable_after(text: str, pos: int) -> bool:
    """"3x" is an expression, not the number 3; "10cm" and "5m²" are numbers with units."""
    after = text[pos : pos + 3]
    if not after[:1].isalpha():
        return False
    return not (after[1:2].isalpha() or after[1:2] in ("²", "³"))


def _balanced(text: str) -> bool:
    """Braces balance: an unclosed `{` is a cut-off answer ("\\boxed{5"), not a bare one."""
    depth = 0
    for c in text:
        depth += (c == "{") - (c == "}")
        if depth < 0:
            return False
    return depth == 0


def _ends_sentence(text: str, span: _Span) -> bool:
    """A display formula whose content ends with a period ("$$ ... = 2.$$ Therefore") ends a sentence."""
    if text[span.start] != "\\" and not text.startswith("$$", span.start):
        return False
    return text[span.start : span.inner_end].rstrip().endswith((".", "!", "?"))


def _strip_chat_tokens(text: str) -> str:
    """`text` without the chat-template tokens it ends with ("<|im_start|>user", "<|eot_id|>"),
    right-stripped; linear."""
    end = len(text.rstrip())
    while True:
        m = _CHAT_TOKEN_RE.search(text, max(0, end - _CHAT_TOKEN_MAX), end)
        if m is None:
            return text[:end]
        end = m.start()
        while end > 0 and text[end - 1].isspace():
            end -= 1


def _no_marker(text: str) -> Extraction | None:
    """The answer of a text without markers: a bare answer, else the final sentence's answer."""
    stripped = text.strip()
    if not stripped:
        return None
    spans = math_spans(text)
    lead = len(text) - len(text.lstrip())
    body = stripped.rstrip(".").rstrip()
    if (len(body) <= _MAX_BARE and _ALNUM_RE.search(body) and _is_expression_text(body) and _balanced(body)
            and not _BOX_RE.search(body)):
        if len(spans) == 1 and text[spans[0].start : spans[0].end].strip() == body:
            return _tight(text, spans[0].inner_start, spans[0].inner_end)
        if len(spans) <= 1:
            return Extraction(body, lead, lead + len(body), ExtractionMethod.BARE)
    # a text cut off mid-sentence ("... a cube, so") states no answer; one that ends on a word
    # ("... square units") may only answer in its final sentence
    tail = _strip_chat_tokens(stripped)
    start = len(tail)
    while start > 0 and tail[start - 1] in _ASCII_LETTERS:
        start -= 1
    last_word = tail[start:]
    if not tail or tail[-1] in ",:;=" or (last_word and last_word.lower() in _DANGLING_WORDS):
        return None
    unfinished = tail[-1].isalpha()
    # sentence ends outside math spans, then the sentences from the last one back
    ends: list[int] = []
    k = 0
    for m in _SENTENCE_END_RE.finditer(text):
        while k < len(spans) and spans[k].end <= m.start():
            if _ends_sentence(text, spans[k]):
                ends.append(spans[k].end - 1)
            k += 1
        if k < len(spans) and spans[k].start <= m.start() < spans[k].end:
            continue
        ends.append(m.start())
    for span in spans[k:]:
        if _ends_sentence(text, span):
            ends.append(span.end - 1)
    hi, j, s_hi = len(text), len(ends), len(spans)
    while True:
        lo = ends[j - 1] + 1 if j > 0 else 0
        s_lo = s_hi
        while s_lo > 0 and spans[s_lo - 1].start >= lo:
            s_lo -= 1
        # a question ("What is $6 \\times 7$?") restates the problem; it is never the answer
        question = lo < hi and text[lo:hi].rstrip().endswith("?")
        found = _sentence_answer(text, lo, hi, spans[s_lo:s_hi]) if lo < hi and not question else None
        if found is not None:
            return found
        if j == 0 or (unfinished and text[lo:hi].strip()):
            return None
        j -= 1
        hi, s_hi = lo, s_lo


def extract_answer(text: str, *, choices: bool = False, mode: ExtractionMode = "auto") -> Extraction | None:
    """Return the final answer of `text` (the last one given) with its span, or None if absent.

    Boxed answers (a group of boxes joined by connectors is one answer), <answer> tags, GSM8K
    `####` and "the (final) answer is" phrases compete on position: the one that starts last
    wins, so a later box corrects an earlier one. Bold text near the end is used only when none
    of those exist. With `mode="auto"` a text without markers yields its bare answer or the
    answer of its final sentence (see the module docstring); `mode="strict"` stops at markers.
    With `choices=True` (the reference is a multiple-choice letter) a letter in prose such as
    "the answer is (B)" is also recognised.
    """
    if not isinstance(text, str) or not text:
        return None
    ends = _sentence_ends(text)
    strong, weak = _phrase_candidate(text, ends)
    boxes = _boxes(text)
    box = _group(text, reversed(boxes), ExtractionMethod.BOXED)
    candidates = ([box] if box else []) + _tagged_candidates(text) + ([strong] if strong else [])
    if not any(c.answer.strip() for c in candidates) and weak is not None:
        candidates = [weak]
    best: Extraction | None = None
    for cand in candidates:
        if not cand.answer.strip():
            continue
        # a group competes with the start of its last box; ties favour the box:
        # "Answer: \boxed{5}" has both starting close together
        key = cand.parts[-1][0] if cand.parts else cand.start
        best_key = -1 if best is None else (best.parts[-1][0] if best.parts else best.start)
        if key > best_key or (key == best_key and cand.method is ExtractionMethod.BOXED):
            best = cand
    if best is None:
        best = _bold_candidate(text)
    if best is None and choices:
        best = _choice_fallback(text)
    if best is None and mode == "auto":
        best = _no_marker(text)
    if best is None:
        return None
    first = best.parts[0][0] if best.parts else best.start
    phrase = None  # the answer phrase that states `best`: it must commit to one value
    if best.method is ExtractionMethod.ANSWER_PHRASE:
        phrase = best
    elif (best.method is ExtractionMethod.BOXED and strong is not None
            and strong.start <= first and best.end < strong.end):
        phrase = strong  # "The final answer is $\boxed{3}$ or $4$": the phrase around the box goes on
    if phrase is not None and not choices:
        if _hedged(phrase.answer):
            return None  # "The answer is not $3$", "either 3 or 4": no answer is committed to
        listed = _phrase_list(text, phrase, boxes)
        if listed is not None:
            return listed
    if not choices and best.method in (ExtractionMethod.BOXED, ExtractionMethod.ANSWER_TAG):
        closer = "}" if best.method is ExtractionMethod.BOXED else "</answer>"
        if text[best.end : best.end + len(closer)].lower() == closer and _alternative_follows(
                text, best.end + len(closer)):
            return None  # "\boxed{3} or 4": the sentence offers another value, so none is committed to
    # A phrase answer that contains a box ("The answer is $\boxed{5}$.") yields the box itself.
    if best.method in (ExtractionMethod.ANSWER_PHRASE, ExtractionMethod.ANSWER_TAG, ExtractionMethod.BOLD):
        inner = [b for b in boxes if best.start <= b.start and b.end <= best.end]
        if inner:
            grouped = _group(text, reversed(inner), ExtractionMethod.BOXED)
            if grouped is not None:
                best = grouped
        elif best.method is ExtractionMethod.ANSWER_PHRASE and not choices:
            best = _refine(text, best)
    if best.parts:
        return best
    raw = best.answer
    lead = len(raw) - len(raw.lstrip())
    answer, start = _strip_math_delimiters(raw.strip(), best.start + lead)
    if not answer:
        return None
    return Extraction(answer, start, start + len(answer), best.method, (), best.plain)


def _strip_math_delimiters(text: str, start: int) -> tuple[str, int]:
    """Remove one layer of $...$, $$...$$, \\(...\\), \\[...\\] around an answer; keep offsets."""
    for left, right in (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$")):
        if text.startswith(left) and text.endswith(right) and len(text) >= len(left) + len(right):
            inner = text[len(left) : len(text) - len(right)]
            if right == "$" and "$" in inner.replace("\\$", ""):
                break  # "$28$ and $3$": two spans, not one wrapped answer
            lead = len(inner) - len(inner.lstrip())
            return inner.strip(), start + len(left) + lead
    return text, start


# A reference with this many prose words (or a sentence followed by more text) is a solution,
# not an answer field.
_PROSE_WORDS = 6


def _looks_like_prose(text: str) -> bool:
    """Solution text rather than an answer field: several words, or sentences."""
    outside = _strip_text_commands(text)
    if len(_PROSE_WORD_RE.findall(outside)) >= _PROSE_WORDS:
        return True
    return re.search(r"[.!?]\s+[A-Z]", outside) is not None


def reference_answer(text: str) -> Extraction | None:
    """The answer a reference states, as datasets ship references; None when it states none.

    A marker wins (a box or several joined boxes in a full solution, GSM8K `#### 72` anywhere,
    <answer> tags, "the answer is"); solution prose without a marker gives its final sentence's
    answer; anything else is an answer field (MATH `answer`), taken whole without one layer of
    `$...$`.
    """
    if not isinstance(text, str) or not text.strip():
        return None
    found = extract_answer(text, mode="strict")
    if found is not None:
        return found
    if _looks_like_prose(text):
        return extract_answer(text, mode="auto")
    raw = text.strip()
    lead = len(text) - len(text.lstrip())
    answer, start = _strip_math_delimiters(raw, lead)
    if not answer:
        return None
    return Extraction(answer, start, start + len(answer), ExtractionMethod.BARE)

"""`FormatVerifier`: is the completion `<think>...</think>` followed by a well-formed answer?"""

from __future__ import annotations

import dataclasses
import enum
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .core.batch import BatchRunner, as_verify_result, default_workers
from .core.result import Status, VerifyResult


class FormatIssue(str, enum.Enum):
    """The first format rule a completion breaks."""

    MALFORMED_TAG = "malformed_tag"  # <Think>, </ think>, <think foo> ...
    TEXT_BEFORE_THINK = "text_before_think"
    MISSING_THINK = "missing_think"
    UNCLOSED_THINK = "unclosed_think"
    REPEATED_THINK = "repeated_think"
    EMPTY_THINK = "empty_think"
    MISSING_ANSWER = "missing_answer"
    UNCLOSED_ANSWER = "unclosed_answer"
    REPEATED_ANSWER = "repeated_answer"
    EMPTY_ANSWER = "empty_answer"
    WRONG_ORDER = "wrong_order"  # a close before its open, or an answer tag inside <think>
    TEXT_OUTSIDE_ANSWER = "text_outside_answer"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class FormatSpec:
    """The structure a completion must have.

    think_tag: reasoning block tag; answer_tag: answer block tag, or None for "free text after
    </think>". think_open_in_prompt: the chat template already emitted <think> (Qwen3, R1), so
    the completion must contain only the close tag. require_think: False makes the reasoning
    block optional (still well-formed and first when present).
    """

    think_tag: str = "think"
    answer_tag: str | None = "answer"
    think_open_in_prompt: bool = False
    require_think: bool = True
    allow_empty_think: bool = False
    allow_text_outside_answer: bool = False

    def __post_init__(self) -> None:
        for name in ("think_tag", "answer_tag"):
            tag = getattr(self, name)
            if tag is None and name == "answer_tag":
                continue
            if not isinstance(tag, str) or not re.fullmatch(r"[A-Za-z_][\w\-]*", tag):
                raise ValueError(f"{name} must be a tag name like 'think', got {tag!r}")
        if self.answer_tag == self.think_tag:
            raise ValueError("think_tag and answer_tag must differ")

    def with_overrides(self, overrides: Mapping[str, Any] | None) -> FormatSpec:
        """A copy with the given fields replaced (ValueError on unknown fields)."""
        if not overrides:
            return self
        known = {f.name for f in dataclasses.fields(self)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(
                f"unknown format_spec fields {sorted(unknown)}; known: {sorted(known)}"
            )
        return dataclasses.replace(self, **dict(overrides))


@dataclass
class FormatCheck:
    """Result of checking one completion: the first issue (None if fine) and the parts found."""

    issue: FormatIssue | None
    detail: str = ""
    think: str | None = None
    answer: str | None = None

    @property
    def ok(self) -> bool:
        """True when the completion follows the format."""
        return self.issue is None


@dataclass
class _Tag:
    name: str
    closing: bool
    start: int
    end: int


def _find_tags(text: str, spec: FormatSpec) -> tuple[list[_Tag], str | None]:
    """Exact tags in order, or the first malformed look-alike (<Think>, </ think >, <think x>)."""
    names = [spec.think_tag] + ([spec.answer_tag] if spec.answer_tag else [])
    alternatives = "|".join(re.escape(n) for n in names)
    # `[^<>]*` stops at the next bracket, so each attempt scans at most to the next '<'; the
    # space after '<' is read by one quantifier (`\s*/?\s*` split a run of spaces every way:
    # quadratic, 27 s for '<' and 40,000 spaces): linear
    pattern = re.compile(rf"<\s*(?:(/)\s*)?({alternatives})\b[^<>]*>", re.IGNORECASE)
    tags: list[_Tag] = []
    for m in pattern.finditer(text):
        closing, name = bool(m.group(1)), m.group(2)
        if name not in names or m.group() != f"<{'/' if closing else ''}{name}>":
            return tags, m.group()
        tags.append(_Tag(name, closing, m.start(), m.end()))
    return tags, None


#: Characters that show nothing but are letters or symbols to Unicode: the default-ignorable code
#: points outside the format category (Hangul fillers, the combining grapheme joiner, Khmer
#: inherent vowels, variation selectors) and the braille blank.
_INVISIBLE = frozenset(
    "\u034f\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180f\u2800\u3164\uffa0"
    + "".join(map(chr, range(0xFE00, 0xFE10))) + "".join(map(chr, range(0xE0100, 0xE01F0)))
)
#: White space, control and format characters, and marks with no base to sit on.
_BLANK_CATEGORIES = ("Cc", "Cf", "Mn", "Me")


def _blank(text: str) -> bool:
    """True when `text` shows nothing: white space, control, format and other invisible characters."""
    # "<answer>\u200b</answer>", "<answer>\u3164</answer>" (a Hangul filler) are no content
    return all(c.isspace() or c in _INVISIBLE or unicodedata.category(c) in _BLANK_CATEGORIES for c in text)


def check_format(text: str, spec: FormatSpec = FormatSpec()) -> FormatCheck:
    """Check `text` against `spec`; returns the first broken rule, or the think and answer parts."""
    if not isinstance(text, str):
        return FormatCheck(
            FormatIssue.MISSING_THINK, f"completion is not a string ({type(text).__name__})"
        )
    tags, malformed = _find_tags(text, spec)
    if malformed is not None:
        return FormatCheck(FormatIssue.MALFORMED_TAG, f"malformed tag {malformed[:40]!r}")
    think = [t for t in tags if t.name == spec.think_tag]
    opens = [t for t in think if not t.closing]
    closes = [t for t in think if t.closing]
    expected_opens = 0 if spec.think_open_in_prompt else 1

    think_text: str | None = None
    rest_start = 0
    if not think and not spec.require_think:
        pass  # no reasoning block, allowed
    else:
        if len(opens) > expected_opens:
            prompt_note = " (the prompt already opened it)" if spec.think_open_in_prompt else ""
            return FormatCheck(
                FormatIssue.REPEATED_THINK, f"more than one <{spec.think_tag}>{prompt_note}"
            )
        if len(opens) < expected_opens:
            if closes:
                return FormatCheck(
                    FormatIssue.WRONG_ORDER, f"</{spec.think_tag}> without <{spec.think_tag}>"
                )
            return FormatCheck(FormatIssue.MISSING_THINK, f"no <{spec.think_tag}> block")
        if not closes:
            return FormatCheck(FormatIssue.UNCLOSED_THINK, f"<{spec.think_tag}> is never closed")
        if len(closes) > 1:
            return FormatCheck(FormatIssue.REPEATED_THINK, f"more than one </{spec.think_tag}>")
        close = closes[0]
        body_start = opens[0].end if opens else 0
        if opens:
            if opens[0].start > close.start:
                return FormatCheck(
                    FormatIssue.WRONG_ORDER, f"</{spec.think_tag}> before <{spec.think_tag}>"
                )
            if text[: opens[0].start].strip():
                return FormatCheck(FormatIssue.TEXT_BEFORE_THINK, f"text before <{spec.think_tag}>")
        think_text = text[body_start : close.start]
        if not spec.allow_empty_think and _blank(think_text):
            return FormatCheck(FormatIssue.EMPTY_THINK, f"empty <{spec.think_tag}> block")
        rest_start = close.end
        if any(t.name != spec.think_tag and t.start < close.start for t in tags):
            return FormatCheck(
                FormatIssue.WRONG_ORDER, f"<{spec.answer_tag}> tag inside the reasoning block"
            )

    return _check_answer(text, rest_start, tags, spec, think_text)


def _check_answer(
    text: str, rest_start: int, tags: list[_Tag], spec: FormatSpec, think_text: str | None
) -> FormatCheck:
    rest = text[rest_start:]
    if spec.answer_tag is None:
        if _blank(rest):
            return FormatCheck(FormatIssue.MISSING_ANSWER, "no answer text", think=think_text)
        return FormatCheck(None, think=think_text, answer=rest.strip())
    tag = spec.answer_tag
    answer_tags = [t for t in tags if t.name == tag]
    opens = [t for t in answer_tags if not t.closing]
    closes = [t for t in answer_tags if t.closing]
    if not opens:
        issue = FormatIssue.WRONG_ORDER if closes else FormatIssue.MISSING_ANSWER
        return FormatCheck(issue, f"no <{tag}> block", think=think_text)
    if len(opens) > 1 or len(closes) > 1:
        return FormatCheck(
            FormatIssue.REPEATED_ANSWER, f"more than one <{tag}> block", think=think_text
        )
    if not closes:
        return FormatCheck(
            FormatIssue.UNCLOSED_ANSWER, f"<{tag}> is never closed", think=think_text
        )
    open_tag, close_tag = opens[0], closes[0]
    if close_tag.start < open_tag.start:
        return FormatCheck(FormatIssue.WRONG_ORDER, f"</{tag}> before <{tag}>", think=think_text)
    answer = text[open_tag.end : close_tag.start]
    if _blank(answer):
        return FormatCheck(FormatIssue.EMPTY_ANSWER, f"empty <{tag}> block", think=think_text)
    outside = text[rest_start : open_tag.start] + text[close_tag.end :]
    if outside.strip() and not spec.allow_text_outside_answer:
        return FormatCheck(
            FormatIssue.TEXT_OUTSIDE_ANSWER, f"text outside the <{tag}> block", think=think_text
        )
    return FormatCheck(None, think=think_text, answer=answer.strip())


class FormatVerifier:
    """Reward 1 for a well-formed `<think>...</think>` + answer completion, else FORMAT_ERROR.

    The reference may be None or a dict of FormatSpec fields overriding the configuration
    for that item (JSONL: the "format_spec" field).
    """

    kind = "format"
    #: `verify` is the whole check, pure and in this process: the CLI may run it per line in
    #: its own workers (verifiers/cli/raw_line_workers.py) under `timeout`.
    checks_in_process = True

    def __init__(
        self,
        workers: int | None = None,
        think_tag: str = "think",
        answer_tag: str | None = "answer",
        think_open_in_prompt: bool = False,
        require_think: bool = True,
        allow_empty_think: bool = False,
        allow_text_outside_answer: bool = False,
        timeout: float = 10.0,
    ) -> None:
        self.spec = FormatSpec(
            think_tag=think_tag,
            answer_tag=answer_tag,
            think_open_in_prompt=think_open_in_prompt,
            require_think=require_think,
            allow_empty_think=allow_empty_think,
            allow_text_outside_answer=allow_text_outside_answer,
        )
        self.workers = default_workers() if workers is None else workers
        self.timeout = timeout
        self._runner: BatchRunner | None = BatchRunner(self._verify_item, self.workers, timeout)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_runner"] = None
        return state

    def reference_from_record(self, record: dict[str, Any]) -> Any:
        """The line's "format_spec" overrides, or None; ValueError names a malformed one."""
        spec = record.get("format_spec") or None
        self._spec(spec)
        return spec

    def verify(self, completion: str, reference: Any = None) -> VerifyResult:
        """Check one completion in this process; raises only on a malformed format_spec."""
        spec = self._spec(reference)
        try:
            check = check_format(completion, spec)
        except Exception as err:  # noqa: BLE001 - a bug of ours must not look like a model error
            return VerifyResult(
                0.0, False, Status.INTERNAL_ERROR, f"{type(err).__name__}: {err}"[:300]
            )
        if check.ok:
            return VerifyResult(1.0, True, Status.CORRECT, extracted=check.answer)
        return VerifyResult(
            0.0, False, Status.FORMAT_ERROR, check.detail, extra={"format_issue": check.issue.value}
        )

    def verify_batch(
        self, completions: Sequence[str], references: Sequence[Any] | None = None
    ) -> list[VerifyResult]:
        """Check many completions in worker processes, each under the per-item time limit."""
        if references is None:
            references = [None] * len(completions)
        if len(completions) != len(references):
            raise ValueError(f"{len(completions)} completions but {len(references)} references")
        index_of: dict[FormatSpec, int] = {}  # each distinct spec travels once per chunk
        items, positions = [], []
        out: list[VerifyResult | None] = [None] * len(completions)
        for pos, (completion, reference) in enumerate(zip(completions, references, strict=True)):
            try:
                spec = self._spec(reference)
            except ValueError as err:  # that row's own bad spec, not the batch's
                out[pos] = VerifyResult(0.0, False, Status.BAD_REFERENCE, str(err)[:300])
                continue
            items.append((completion, index_of.setdefault(spec, len(index_of))))
            positions.append(pos)
        if self._runner is None:
            self._runner = BatchRunner(self._verify_item, self.workers, self.timeout)
        results = self._runner.run(items, list(index_of)) if items else []
        for pos, result in zip(positions, results, strict=True):
            out[pos] = as_verify_result(result)
        return [r for r in out if r is not None]

    def close(self) -> None:
        """Stop the batch worker processes."""
        if self._runner is not None:
            self._runner.close()

    def _spec(self, reference: Any) -> FormatSpec:
        if reference is None or isinstance(reference, FormatSpec):
            return reference or self.spec
        if not isinstance(reference, Mapping):
            raise ValueError(
                f"a format reference is None or a dict of FormatSpec fields, got {reference!r:.80}"
            )
        return self.spec.with_overrides(reference)

    def _verify_item(self, completion: str, spec: FormatSpec) -> VerifyResult:
        return self.verify(completion, spec)

"""Split a completion into steps (character spans) and map those spans onto tokens."""

from __future__ import annotations

from collections.abc import Sequence

import regex as regex_engine

#: The default step boundary: a blank line, as in ProcessBench / PRM800K style solutions.
DEFAULT_SEPARATOR = "\n\n"
#: Seconds a step regex may take on one completion. A user's pattern with nested quantifiers
#: is exponential in the model's text under `re` ((\n\s*)+(?=Step \d): 1.9 s on 24 newlines).
REGEX_TIMEOUT_S = 1.0


def split_steps(
    completion: str, separator: str = DEFAULT_SEPARATOR, regex: str | None = None
) -> list[tuple[int, int]]:
    """Return the (start, end) character spans of the non-empty steps of `completion`.

    Steps are the pieces between occurrences of `separator` (or matches of `regex`, which
    wins when given; a zero-width match such as a lookahead cuts without consuming). Each span
    is trimmed of surrounding whitespace; pieces that are blank are dropped, so a completion of
    only whitespace has no steps. A regex runs on the `regex` engine (Python's `re` syntax) for
    at most REGEX_TIMEOUT_S seconds; past that a ValueError says so, for that completion only.
    """
    if regex is not None:
        try:
            pattern = regex_engine.compile(regex)
        except regex_engine.error as err:
            raise ValueError(f"invalid step regex {regex!r}: {err}") from err
        # Zero-width matches are cuts too, e.g. a lookahead (?=Step \d) splits before each step.
        try:
            cuts = [(m.start(), m.end()) for m in pattern.finditer(completion, timeout=REGEX_TIMEOUT_S)]
        except TimeoutError:
            raise ValueError(f"step regex {regex!r} ran past {REGEX_TIMEOUT_S:g} s on this "
                             f"completion ({len(completion)} characters)") from None
    else:
        if not separator:
            raise ValueError("step separator must be a non-empty string (or pass regex=)")
        cuts = []
        pos = completion.find(separator)
        while pos != -1:
            cuts.append((pos, pos + len(separator)))
            pos = completion.find(separator, pos + len(separator))
    spans: list[tuple[int, int]] = []
    start = 0
    for cut_start, cut_end in [*cuts, (len(completion), len(completion))]:
        span = _trim(completion, start, cut_start)
        if span is not None:
            spans.append(span)
        start = cut_end
    return spans


def _trim(text: str, start: int, end: int) -> tuple[int, int] | None:
    # str.strip runs in C with the same whitespace as str.isspace; a Python loop over a
    # megabyte of spaces holds the GIL for a tenth of a second per completion.
    piece = text[start:end]
    body = piece.lstrip()
    if not body:
        return None
    start += len(piece) - len(body)
    return start, start + len(body.rstrip())


def step_texts(completion: str, spans: Sequence[tuple[int, int]]) -> list[str]:
    """Return the text of each span."""
    return [completion[a:b] for a, b in spans]


def token_step_index(
    spans: Sequence[tuple[int, int]],
    offsets: Sequence[tuple[int, int]],
    num_tokens: int,
) -> list[int]:
    """Return the step index of each of `num_tokens` completion tokens.

    `offsets` are the tokenizer's (start, end) character offsets of the completion tokens
    (relative to the completion). Step j owns the characters from its start up to the start
    of step j+1 (the separator after a step belongs to it); characters before the first step
    belong to step 0. A token belongs to the step owning its first character, so a token that
    straddles a boundary goes to the earlier step. Zero-width tokens (EOS, BOS, special
    tokens with offset (0, 0)) and tokens past the end of `offsets` take the step of the token
    before them; indices never decrease along the sequence, so trailing tokens belong to the
    last step. A completion without steps maps every token to step 0, as
    veristep.gating.token_step_from_offsets does (that step is masked, so its tokens get no
    PRM advantage but still count as completion tokens; -1 is left for padding).
    """
    if num_tokens < 0:
        raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
    if num_tokens == 0:
        return []
    import torch
    from veristep.gating import token_step_from_offsets

    # One mapping for the whole project: the gate's tensor version. Zero-width tokens and
    # tokens without an offset get start 0, which its monotone rule sends to the step before.
    token_starts = [a if b > a else 0 for a, b in list(offsets)[:num_tokens]]
    token_starts += [0] * (num_tokens - len(token_starts))
    step_starts = [a for a, _ in spans] or [0]
    token_step = token_step_from_offsets(
        torch.tensor([[token_starts]], dtype=torch.long),
        torch.ones(1, 1, num_tokens, dtype=torch.bool),
        torch.tensor([[step_starts]], dtype=torch.long),
        torch.full((1, 1, len(step_starts)), bool(spans)),
    )
    return token_step[0, 0].tolist()

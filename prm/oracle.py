"""Oracle step labels for the built-in arithmetic task, exact or with seeded label noise.

A step is right iff it is the reference computation's step at the same position: step line k must
claim exactly the reference's k-th operation on the reference's running value (the task's format is
`veristep.common.arith_format`), and the answer line must give the reference answer. So a step that
computes correctly from an earlier wrong value is wrong here (the rule PRM, which checks each claim
locally, calls it right), and so is a locally right step that copied a wrong operand from the
prompt. The noisy oracle flips each label with probability `eps`; the flip of a step is a fixed
function of (seed, prompt, completion, step index), so the same trace always gets the same labels
(a noisy PRM, not a noisy stream).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass

from veristep.common.arith_format import (
    ANSWER_RE,
    STEP_RE,
    apply_op,
    has_overlong_number,
    parse_prompt,
)

from .base import StepScores
from .options import parse_options
from .steps import split_steps, step_texts

# parse_options lived here first; it stays importable from here (its home is .options).
__all__ = ["OracleLabels", "OracleScorer", "oracle_labels", "parse_options"]


@dataclass(frozen=True)
class OracleLabels:
    """One completion's steps with their exact labels and which step is the answer line."""

    spans: list[tuple[int, int]]
    steps: list[str]
    correct: list[bool]
    is_answer: list[bool]

    def first_error(self) -> int | None:
        """Index of the first wrong step (the answer line included), None if every step is right."""
        return next((j for j, ok in enumerate(self.correct) if not ok), None)


def _reference_steps(prompt: str) -> tuple[list[tuple[int, str, int, int]], int]:
    """The reference (a, op, b, result) of each step of a task prompt, and the final answer."""
    try:
        start, chain = parse_prompt(prompt)
    except ValueError:
        raise ValueError(f"the oracle scorer knows only the built-in task's prompts "
                         f"('Compute: ...'), got {prompt[:60]!r}") from None
    steps, value = [], start
    for op, operand in chain:
        result = apply_op(value, op, operand)
        steps.append((value, op, operand, result))
        value = result
    return steps, value


def oracle_labels(prompt: str, completion: str, separator: str = "\n", regex: str | None = None) -> OracleLabels:
    """Split `completion` like a PRM would and label each step against the reference solution."""
    reference, answer = _reference_steps(prompt)
    spans = split_steps(completion, separator, regex)
    texts = step_texts(completion, spans)
    correct, is_answer = [], []
    for k, text in enumerate(texts):
        line = text.strip()
        final = ANSWER_RE.match(line)
        is_answer.append(final is not None)
        if has_overlong_number(line):
            correct.append(False)
        elif final:
            correct.append(int(final[1]) == answer)
        else:
            step = STEP_RE.match(line)
            correct.append(bool(step) and k < len(reference) and (
                int(step[2]), step[3], int(step[4]), int(step[5])) == reference[k])
    return OracleLabels(spans, texts, correct, is_answer)


def _flip(seed: int, prompt: str, completion: str, index: int, eps: float) -> bool:
    """Whether the label of step `index` is flipped: a stable hash, uniform in [0, 1), below eps."""
    digest = hashlib.sha256(f"veristep-oracle:{seed}:{index}:{prompt}\x00{completion}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < eps


class OracleScorer:
    """Score each step 1 if it is the reference solution's step, else 0; `eps` flips labels."""

    kind = "oracle"

    def __init__(self, eps: float = 0.0, seed: int = 0, separator: str = "\n", regex: str | None = None) -> None:
        if not 0.0 <= eps <= 1.0:
            raise ValueError(f"oracle eps must be in [0, 1], got {eps}")
        if regex is None and not separator:
            raise ValueError("separator must be a non-empty string (or pass regex=)")
        self.eps = float(eps)
        self.seed = int(seed)
        self.separator = separator
        self.regex = regex

    def labels(self, prompt: str, completion: str) -> OracleLabels:
        """The exact labels (no noise) of one completion's steps."""
        return oracle_labels(prompt, completion, self.separator, self.regex)

    def score(self, prompt: str, completion: str) -> StepScores:
        """Split `completion` into steps; score each 1.0 / 0.0 (flipped with probability eps)."""
        t0 = time.perf_counter()
        lab = self.labels(prompt, completion)
        scores = [float(ok != (self.eps > 0 and _flip(self.seed, prompt, completion, j, self.eps)))
                  for j, ok in enumerate(lab.correct)]
        return StepScores(lab.steps, lab.spans, scores, {"score_s": time.perf_counter() - t0})

    def score_batch(self, prompts: Sequence[str], completions: Sequence[str]) -> list[StepScores]:
        """Score many completions (a loop: the oracle has no batching gain)."""
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
        return [self.score(p, c) for p, c in zip(prompts, completions, strict=True)]

"""Step scores: the data that flows from a process reward model to the gate."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass
class StepScores:
    """One completion split into steps, each with a character span and a score in [0, 1]."""

    steps: list[str]
    spans: list[tuple[int, int]]
    scores: list[float]
    timings: dict[str, float] = field(default_factory=dict)
    # Steps a model scorer could not read because the trace exceeded its context window; they
    # carry the scorer's neutral score.
    truncated_steps: int = 0

    def __post_init__(self) -> None:
        if not (len(self.steps) == len(self.spans) == len(self.scores)):
            raise ValueError(
                f"steps, spans and scores must have equal length, got "
                f"{len(self.steps)}, {len(self.spans)}, {len(self.scores)}"
            )


@runtime_checkable
class StepScorer(Protocol):
    """A process reward model: scores each step of a completion."""

    def score(self, prompt: str, completion: str) -> StepScores:
        """Split `completion` into steps and score each one."""
        ...

    def score_batch(self, prompts: Sequence[str], completions: Sequence[str]) -> list[StepScores]:
        """Score many completions, equal to calling `score` one by one."""
        ...

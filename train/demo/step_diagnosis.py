"""Where and how a completion of the built-in task leaves the reference path (pure functions).

Used by the step-credit condition's feasibility gate and by the experiment's mechanism endpoint
(docs/experiment.md): per-step accuracy conditional on being on track, what kind of mistake a
first error is, and the character at which it happens (to ask the model how likely the right
one was).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .task import ANSWER_PREFIX, STEP_SEPARATOR, _solution_lines, parse_prompt

#: Kinds of first error: a wrong result of a right operation, a mis-read operand or operator, a
#: line that is not a step, a right chain with a wrong answer line, or a chain stopped early.
ERROR_KINDS = ("result", "operand", "format", "answer", "stopped")


@dataclass(frozen=True)
class TraceDiagnosis:
    """One completion against the reference solution of its prompt."""

    #: per reference step: True if the completion's line k is the reference line, up to the first error
    on_track: list[bool]
    #: index of the first step line that is not the reference one (None: every step line right)
    first_error: int | None
    #: what the first error is (one of ERROR_KINDS), None when the completion is right
    kind: str | None
    #: character offset in the completion where it first departs from the reference solution
    #: (None when it never does), and the reference character expected there
    char_index: int | None
    expected_char: str | None
    correct: bool


def reference_solution(prompt: str) -> tuple[list[str], str]:
    """The reference step lines of a task prompt and its answer line."""
    lines, value = _solution_lines(*parse_prompt(prompt))
    return lines, f"{ANSWER_PREFIX}{value}"


def _kind(line: str, reference: str) -> str:
    """Classify a wrong step line against the reference line of the same step."""
    head_ref = reference.rpartition("=")[0]
    head, sep, _ = line.rpartition("=")
    if not sep or not line.startswith(reference.split(":", 1)[0] + ":"):
        return "format"
    return "result" if head == head_ref else "operand"


def diagnose(prompt: str, completion: str) -> TraceDiagnosis:
    """Compare `completion` line by line with the reference solution of `prompt` (linear time)."""
    steps, answer = reference_solution(prompt)
    reference = STEP_SEPARATOR.join([*steps, answer])
    lines = completion.split(STEP_SEPARATOR)
    on_track: list[bool] = []
    first_error, kind = None, None
    for k, ref_line in enumerate(steps):
        line = lines[k].strip() if k < len(lines) else None
        if line == ref_line:
            on_track.append(True)
            continue
        on_track.append(False)
        first_error = k
        if line is None or line.startswith(ANSWER_PREFIX.strip()):
            kind = "stopped"
        else:
            kind = _kind(line, ref_line)
        break
    answer_line = lines[len(steps)].strip() if len(lines) > len(steps) else None
    correct = first_error is None and answer_line == answer
    if first_error is None and not correct:
        kind = "answer"
    char_index = next((i for i, (a, b) in enumerate(zip(completion, reference, strict=False)) if a != b), None)
    if char_index is None and not correct and len(completion) < len(reference):
        char_index = len(completion)
    expected = reference[char_index] if char_index is not None and char_index < len(reference) else None
    return TraceDiagnosis(on_track, first_error, kind, char_index, expected, correct)


def conditional_step_accuracy(diagnoses: Sequence[TraceDiagnosis], n_steps: int) -> list[float | None]:
    """Per step position k: the share of completions on track through step k-1 that get step k right."""
    out: list[float | None] = []
    for k in range(n_steps):
        reached = [d for d in diagnoses if len(d.on_track) > k and all(d.on_track[:k])]
        out.append(sum(d.on_track[k] for d in reached) / len(reached) if reached else None)
    return out


def summarise_traces(diagnoses: Sequence[TraceDiagnosis], group_size: int, n_steps: int) -> dict[str, Any]:
    """Pass@1, the share of all-wrong groups, conditional step accuracy and the first-error kinds."""
    if not diagnoses or len(diagnoses) % group_size:
        raise ValueError(f"need a positive multiple of group_size={group_size} traces, got {len(diagnoses)}")
    groups = [diagnoses[i:i + group_size] for i in range(0, len(diagnoses), group_size)]
    acc = conditional_step_accuracy(diagnoses, n_steps)
    kinds = Counter(d.kind for d in diagnoses if d.kind is not None)
    n_err = sum(kinds.values())
    known = [a for a in acc if a is not None]
    return {
        "completions": len(diagnoses),
        "prompts": len(groups),
        "pass@1": sum(d.correct for d in diagnoses) / len(diagnoses),
        "all_wrong_groups": sum(not any(d.correct for d in g) for g in groups) / len(groups),
        "all_correct_groups": sum(all(d.correct for d in g) for g in groups) / len(groups),
        "step_accuracy_by_position": acc,
        "step_accuracy_mean": statistics.fmean(known) if known else None,
        "step_accuracy_spread": (max(known) - min(known)) if known else None,
        "first_error_kinds": {k: kinds.get(k, 0) / n_err if n_err else 0.0 for k in ERROR_KINDS},
        "first_error_position": dict(sorted(Counter(d.first_error for d in diagnoses
                                                    if d.first_error is not None).items())),
    }

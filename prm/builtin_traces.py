"""Held-out traces of the built-in arithmetic task with exact step labels, for calibration.

A policy samples completions of "rl"-part prompts (never taught to the warm start); each step is
labelled against the reference solution (`veristep.prm.oracle.oracle_labels`: step k must be the
reference's k-th computation, the answer line the reference answer), in ProcessBench's
convention: steps before the first wrong one are right (1), the first wrong one is wrong (0),
later ones are unlabelled (None). `check_completion`'s local verdicts (is each claim `a op b = c`
arithmetically true) are kept beside them as `local_step_labels`: they differ where a step
computes correctly from an earlier wrong value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .mc_labels import Policy, sample_traces


def exact_record(prompt: str, completion: str, answer: str, trace_id: str) -> dict[str, Any]:
    """One labelled trace as a `veristep prm calibrate` JSONL record (steps, step_labels, label)."""
    from veristep.common.arith_format import STEP_SEPARATOR, check_completion

    from .oracle import oracle_labels

    lab = oracle_labels(prompt, completion, separator=STEP_SEPARATOR)
    first = lab.first_error()
    check = check_completion(completion, answer)
    local = iter(check.steps_correct)
    return {
        "id": trace_id, "prompt": prompt, "completion": completion, "answer": answer,
        "steps": lab.steps,
        "step_labels": [1 if first is None or k < first else 0 if k == first else None
                        for k in range(len(lab.steps))],
        "label": -1 if first is None else first,
        "correct": bool(check.correct),
        # the answer line has no claim of its own: its local verdict is the outcome
        "local_step_labels": [int(check.correct) if ans else int(next(local, False))
                              for ans in lab.is_answer],
    }


def sample_exact_traces(policy: Policy, problems: Sequence[dict[str, Any]], samples: int,
                        seed: int = 0) -> list[dict[str, Any]]:
    """Sample `samples` completions per problem and label each step exactly; empty ones are dropped."""
    out = []
    for n, (problem, completion) in enumerate(sample_traces(policy, problems, samples, seed)):
        record = exact_record(problem["prompt"], completion, str(problem["answer"]), f"arith-{seed}-{n}")
        if record["steps"]:
            out.append(record)
    return out

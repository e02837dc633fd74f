"""Step labels from Monte-Carlo continuations (Math-Shepherd): the data `veristep prm train` learns.

A policy samples completions of each problem through a rollout engine; each step prefix but
the last is continued k times (`veristep.prm.mc_values.MCStepScorer`, the same code as the
trainer's `mc:k=K` scorer) and the continuations are judged by the outcome verifiers. The
engine and verifiers come with the `Policy` (the commands load one with the trainer's engine:
`veristep.train.mc_values.load_policy`); this module imports nothing of the trainer.
A step's soft label is the share of its continuations that reach the right answer; its hard
label is 1 when any of them does (Math-Shepherd's "hard estimation"). The last step's label is
the completion's own outcome. Every continuation is counted, per trace, so the label budget can
be charged to whatever uses the PRM trained on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .steps import split_steps, step_texts

#: Keys of one labelled trace (one JSONL line of `veristep prm label`).
LABEL_KEYS = ("prompt", "completion", "answer", "steps", "step_spans", "soft_labels",
              "hard_labels", "correct", "mc_rollouts")


@dataclass
class LabelBudget:
    """What labelling cost: sampled traces, continuations, generated tokens, seconds."""

    traces: int = 0
    continuations: int = 0
    continuation_tokens: int = 0
    trace_tokens: int = 0
    seconds: float = 0.0
    k: int = 0

    @property
    def rollouts(self) -> int:
        """Every sequence the policy generated: the traces plus their continuations."""
        return self.traces + self.continuations

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready record, with the total rollouts."""
        return {"k": self.k, "traces": self.traces, "continuations": self.continuations,
                "rollouts": self.rollouts, "trace_tokens": self.trace_tokens,
                "continuation_tokens": self.continuation_tokens, "seconds": round(self.seconds, 3)}


@dataclass
class Policy:
    """A causal LM behind a rollout engine, with the rewarder (outcome verifiers) that judges it.

    `engine.generate(input_ids, k, seeds)` samples k completions per input; `rewarder` has
    `score(texts, references)`, `references(records)` and `close()` (the trainer's
    `OutcomeRewarder`).
    """

    path: str
    model: Any
    tokenizer: Any
    engine: Any
    rewarder: Any
    device: str
    max_new_tokens: int
    extras: dict[str, Any] = field(default_factory=dict)

    def prompt_ids(self, prompts: Sequence[str]) -> list[list[int]]:
        """Model-input token ids of each prompt, tokenised as the trainer does (specials added)."""
        enc = self.tokenizer(list(prompts), add_special_tokens=True)["input_ids"]
        return [list(ids) or [self.tokenizer.eos_token_id] for ids in enc]

    def close(self) -> None:
        """Stop the verifiers' worker processes."""
        self.rewarder.close()


def sample_traces(policy: Policy, problems: Sequence[dict[str, Any]], samples: int,
                  seed: int = 0) -> list[tuple[dict[str, Any], str]]:
    """`samples` completions of each problem (keys prompt, answer), as (problem, completion) pairs."""
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    if not problems:
        return []
    ids = policy.prompt_ids([p["prompt"] for p in problems])
    seeds = [seed * 1_000_003 + i for i in range(len(problems))]
    ro = policy.engine.generate(ids, samples, seeds)
    return [(problems[i // samples], ro.texts[i]) for i in range(len(ro))]


def mc_label(policy: Policy, pairs: Sequence[tuple[dict[str, Any], str]], k: int,
             separator: str = "\n", seed: int = 0, chunk: int = 16,
             on_chunk: Callable[[int], None] | None = None) -> tuple[list[dict[str, Any]], LabelBudget]:
    """Label every step of every (problem, completion) by k continuations; rows and their cost."""
    from .mc_values import MCStepScorer

    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    t0 = time.perf_counter()
    problems = {p["prompt"]: p for p, _ in pairs}
    prompts = list(problems)
    refs = policy.rewarder.references([problems[p] for p in prompts])
    ids = policy.prompt_ids(prompts)
    contexts = {p: (i, r) for p, i, r in zip(prompts, ids, refs, strict=True)}
    scorer = MCStepScorer(k, policy.engine, policy.tokenizer, policy.rewarder, contexts,
                          separator=separator, seed=seed)
    budget = LabelBudget(traces=len(pairs), k=k)
    rows: list[dict[str, Any]] = []
    for start in range(0, len(pairs), chunk):
        part = pairs[start:start + chunk]
        before = scorer.rollouts
        results = scorer.score_batch([p["prompt"] for p, _ in part], [c for _, c in part])
        shares = _continuations_per_row(part, separator, k)
        if sum(shares) != scorer.rollouts - before:  # the scorer's dedup rule changed: say so
            raise RuntimeError(f"label budget: counted {sum(shares)} continuations, the scorer "
                               f"sampled {scorer.rollouts - before}")
        outcomes = policy.rewarder.score([c for _, c in part],
                                         [contexts[p["prompt"]][1] for p, _ in part]).rewards.tolist()
        for (problem, completion), res, n_cont, outcome in zip(part, results, shares, outcomes, strict=True):
            rows.append({
                "prompt": problem["prompt"], "completion": completion, "answer": str(problem["answer"]),
                "steps": res.steps, "step_spans": [list(s) for s in res.spans],
                "soft_labels": [round(float(v), 6) for v in res.scores],
                "hard_labels": [int(v > 0) for v in res.scores],
                "correct": bool(outcome >= 1.0), "mc_rollouts": n_cont, "k": k,
            })
        if on_chunk is not None:
            on_chunk(len(part))
    budget.continuations = scorer.rollouts
    budget.continuation_tokens = scorer.completion_tokens
    budget.trace_tokens = sum(len(policy.tokenizer(c, add_special_tokens=False)["input_ids"]) for _, c in pairs)
    budget.seconds = time.perf_counter() - t0
    return rows, budget


def _continuations_per_row(part: Sequence[tuple[dict[str, Any], str]], separator: str, k: int) -> list[int]:
    """Continuations charged to each row: k per step prefix it is the first in its chunk to need."""
    seen: set[tuple[str, str]] = set()
    out = []
    for problem, completion in part:
        spans = split_steps(completion, separator)
        n = 0
        for _, end in spans[:-1]:
            key = (problem["prompt"], completion[:end] + separator)
            if key not in seen:
                seen.add(key)
                n += k
        out.append(n)
    return out


@dataclass
class LabelledExample:
    """One training trace for the PRM: prompt, its steps and one target in [0, 1] per step."""

    prompt: str
    steps: list[str]
    targets: list[float]
    rollouts: int = 0


def parse_label_row(data: dict[str, Any], label_key: str, separator: str) -> LabelledExample:
    """One JSONL row as a training example; ValueError (one line) says what is wrong with it."""
    prompt = data.get("prompt")
    if not isinstance(prompt, str):
        raise ValueError("missing key 'prompt'" if prompt is None else "'prompt' must be a string")
    if isinstance(data.get("steps"), list):
        steps = data["steps"]
        if not all(isinstance(s, str) and s.strip() for s in steps):
            raise ValueError("'steps' must be a list of non-empty strings")
    elif isinstance(data.get("completion"), str):
        spans = split_steps(data["completion"], separator)
        steps = step_texts(data["completion"], spans)
    else:
        raise ValueError("needs 'steps' (list) or 'completion' (text)")
    if not steps:
        raise ValueError("the completion has no steps (check --separator)")
    labels = data.get(label_key)
    if labels is None:
        raise ValueError(f"missing key {label_key!r}")
    if (not isinstance(labels, list) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 1.0 for v in labels)):
        raise ValueError(f"{label_key!r} must be a list of numbers in [0, 1]")
    if len(labels) != len(steps):
        raise ValueError(f"{len(labels)} labels for {len(steps)} steps (check --separator)")
    rollouts = data.get("mc_rollouts", 0)
    return LabelledExample(prompt, [str(s) for s in steps], [float(v) for v in labels],
                           int(rollouts) + 1 if isinstance(rollouts, int) else 0)


def iter_label_file(path: str, label_key: str, separator: str,
                    on_error: Callable[[str, int, str], None]) -> Iterator[LabelledExample]:
    """The usable examples of a labels JSONL; each bad line goes to `on_error(path, line, why)`."""
    from veristep.common.jsonl_io import iter_jsonl

    for record in iter_jsonl(path):
        if record.error is not None:
            on_error(path, record.line_no, record.error)
            continue
        try:
            yield parse_label_row(record.data, label_key, separator)
        except ValueError as err:
            on_error(path, record.line_no, str(err))


class PolicyMCScorer:
    """The `mc:k=K` step scorer outside the trainer: values of a loaded policy, counted in rollouts.

    Steps are re-joined with `separator` before they are continued, so traces stored with other
    whitespace between steps (calibration data joins them with a blank line) are continued as
    the policy writes them. `answers` maps each prompt to its reference answer.
    """

    kind = "mc"

    def __init__(self, policy: Policy, k: int, answers: dict[str, str], separator: str = "\n",
                 seed: int = 0) -> None:
        from .mc_values import MCStepScorer

        prompts = list(answers)
        refs = policy.rewarder.references([{"answer": answers[p]} for p in prompts])
        contexts = dict(zip(prompts, zip(policy.prompt_ids(prompts), refs, strict=True), strict=True))
        self.separator = separator
        self.inner = MCStepScorer(k, policy.engine, policy.tokenizer, policy.rewarder, contexts,
                                  separator=separator, seed=seed)

    @property
    def rollouts(self) -> int:
        """Continuations sampled so far."""
        return self.inner.rollouts

    def score(self, prompt: str, completion: str) -> Any:
        """Step values of one completion."""
        return self.score_batch([prompt], [completion])[0]

    def score_batch(self, prompts: Sequence[str], completions: Sequence[str]) -> list[Any]:
        """Step values; spans refer to the completions as given."""
        from .base import StepScores

        spans = [split_steps(c, self.separator) for c in completions]
        canon = [self.separator.join(step_texts(c, s)) for c, s in zip(completions, spans, strict=True)]
        inner = self.inner.score_batch(prompts, canon)
        return [StepScores(step_texts(c, s), s, r.scores, r.timings)
                for c, s, r in zip(completions, spans, inner, strict=True)]

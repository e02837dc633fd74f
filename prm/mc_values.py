"""Monte-Carlo step values: the step scorer `mc:k=K`, no trained PRM needed.

For each step of a completion, the prefix that ends with that step is continued k times by a
policy's rollout engine; each continuation is judged by the outcome verifier(s), and the step's
value is the mean reward, mapped to [0, 1] by the reward range (Math-Shepherd's soft label,
VinePPO's value estimate). The last step's value is the completion's own reward (nothing is left
to sample). All prefixes of a batch go to the engine in one call, each distinct (problem, prefix)
once.
The scorer owns no model: it is given an engine (`generate(input_ids, k, seeds)` returning texts,
`num_tokens()` and a length, as the trainer's rollout engines do) and a rewarder
(`score(texts, references).rewards`, as the trainer's `OutcomeRewarder` does). The trainer wires
in its own (`veristep.train.mc_values`), as do the PRM commands that label traces.
The extra rollouts are counted (`rollouts`), so the trainer can log them and charge them to the
run's budget.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from .base import StepScores
from .options import parse_options, spec_kind
from .steps import split_steps, step_texts

#: Default continuations per step prefix.
DEFAULT_K = 4


def parse_mc_spec(spec: str) -> dict[str, int]:
    """`mc`, `mc:k=4`, `mc:k=8,seed=1` -> {"k": ..., "seed": ...}; anything else raises ValueError."""
    kind, _, tail = spec.partition(":")
    if kind.strip().lower() != "mc":
        raise ValueError(f"not a Monte-Carlo scorer spec: {spec!r}")
    opts = {"k": DEFAULT_K, "seed": 0, **parse_options(tail, {"k": int, "seed": int})}
    if opts["k"] < 1:
        raise ValueError(f"{spec!r}: k must be >= 1")
    return opts


def is_mc_spec(spec: str | None) -> bool:
    """Whether a `prm` spec names the Monte-Carlo scorer."""
    return spec_kind(spec) == "mc"


class MCStepScorer:
    """Step values from k policy continuations per step prefix, judged by the outcome verifiers.

    `engine` is a rollout engine (the trainer's samples from the current weights); `rewarder`
    judges texts against references (the trainer's `OutcomeRewarder`); `contexts` maps each
    problem text (what the trainer passes as the prompt) to its model-input token ids and its
    references. `low` / `high` are the wrong and right reward levels.
    """

    kind = "mc"

    def __init__(self, k: int, engine: Any, tokenizer: Any, rewarder: Any,
                 contexts: dict[str, tuple[list[int], list[Any]]], separator: str = "\n",
                 regex: str | None = None, low: float = 0.0, high: float = 1.0, seed: int = 0) -> None:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if not high > low:
            raise ValueError(f"need high > low, got {low}, {high}")
        self.k, self.engine, self.tokenizer, self.rewarder = k, engine, tokenizer, rewarder
        self.contexts, self.separator, self.regex = contexts, separator, regex
        self.low, self.high, self.seed = float(low), float(high), int(seed)
        self.rollouts = 0  # continuations sampled so far (the trainer reads the difference)
        self.completion_tokens = 0
        self._calls = 0

    def _value(self, rewards: Sequence[float]) -> float:
        """Mean reward mapped to [0, 1]."""
        mean = sum(rewards) / len(rewards)
        return min(1.0, max(0.0, (mean - self.low) / (self.high - self.low)))

    def score(self, prompt: str, completion: str) -> StepScores:
        """Values of one completion's steps (see `score_batch`)."""
        return self.score_batch([prompt], [completion])[0]

    def score_batch(self, prompts: Sequence[str], completions: Sequence[str]) -> list[StepScores]:
        """Split each completion into steps and estimate each step's value by k continuations."""
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
        t0 = time.perf_counter()
        self._calls += 1
        missing = [p for p in prompts if p not in self.contexts]
        if missing:
            raise ValueError(f"mc scorer: no model input for problem {missing[0][:60]!r}")
        splits = [split_steps(c, self.separator, self.regex) for c in completions]
        # One engine call for every distinct (problem, step prefix) but a completion's last step:
        # sampled completions of one prompt often share their first steps, and a shared prefix
        # has one value, so it is continued once.
        jobs: dict[tuple[str, str], int] = {}
        where: dict[tuple[int, int], int] = {}
        for row, (completion, spans) in enumerate(zip(completions, splits, strict=True)):
            for j, (_, end) in enumerate(spans[:-1]):
                where[(row, j)] = jobs.setdefault((prompts[row], completion[:end] + self.separator), len(jobs))
        keys = list(jobs)
        prefix_ids = self.tokenizer([p for _, p in keys], add_special_tokens=False)["input_ids"] if keys else []
        inputs = [list(self.contexts[prompt][0]) + list(ids) for (prompt, _), ids in zip(keys, prefix_ids, strict=True)]
        seeds = [(self.seed * 1_000_003 + self._calls * 10_007 + i * 7_919) % (2**31 - 1) for i in range(len(keys))]
        values: dict[tuple[int, int], float] = {}
        if keys:
            ro = self.engine.generate(inputs, self.k, seeds)
            self.rollouts += len(ro)
            self.completion_tokens += ro.num_tokens()
            texts = [keys[i // self.k][1] + ro.texts[i] for i in range(len(ro))]
            refs = [self.contexts[keys[i // self.k][0]][1] for i in range(len(ro))]
            rewards = self.rewarder.score(texts, refs).rewards.tolist()
            job_values = [self._value(rewards[n * self.k:(n + 1) * self.k]) for n in range(len(keys))]
            values = {key: job_values[n] for key, n in where.items()}
        # The last step's value is the completion's own outcome.
        last = [(row, len(spans) - 1) for row, spans in enumerate(splits) if spans]
        if last:
            own = self.rewarder.score([completions[r] for r, _ in last],
                                      [self.contexts[prompts[r]][1] for r, _ in last]).rewards.tolist()
            values.update({key: self._value([v]) for key, v in zip(last, own, strict=True)})
        seconds = time.perf_counter() - t0
        return [StepScores(step_texts(c, spans), spans, [values[(row, j)] for j in range(len(spans))],
                           {"score_s": seconds / max(1, len(completions))})
                for row, (c, spans) in enumerate(zip(completions, splits, strict=True))]

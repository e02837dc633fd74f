"""Rewards for a rollout batch: verifiers -> outcome rewards; PRM -> step tensors on chosen groups.

The PRM is the expensive part, so `prm_step_tensors` scores only the groups it is given (the
ones the gate sends) and leaves every other row empty (mask False, token step -1).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from veristep.verifiers.core.registry import get_verifier

from .rollout import group_rows


@dataclass
class OutcomeRewards:
    """Outcome rewards of B completions."""

    rewards: torch.Tensor  # [B] float, weighted sum over verifiers
    correct: torch.Tensor  # [B] bool, every verifier judged it correct
    judged: torch.Tensor  # [B] bool, every verifier reached a verdict (`VerifyResult.judged`)
    statuses: list[str]  # the first verifier's status per completion
    seconds: float = 0.0

    def extend(self, other: OutcomeRewards) -> OutcomeRewards:
        """Both batches, this one first (dynamic sampling adds rounds)."""
        return OutcomeRewards(torch.cat([self.rewards, other.rewards]), torch.cat([self.correct, other.correct]),
                              torch.cat([self.judged, other.judged]), self.statuses + other.statuses,
                              self.seconds + other.seconds)

    def select(self, rows: list[int]) -> OutcomeRewards:
        """The completions `rows`, in that order."""
        ix = torch.tensor(rows, dtype=torch.long)
        return OutcomeRewards(self.rewards[ix], self.correct[ix], self.judged[ix],
                              [self.statuses[r] for r in rows], self.seconds)


class OutcomeRewarder:
    """One or more verifiers combined with weights into one outcome reward per completion."""

    def __init__(self, kinds: Sequence[str], weights: Sequence[float], workers: int | None = None) -> None:
        if len(kinds) != len(weights):
            raise ValueError("verifier_weights: give one weight per verifier")
        cfg = {} if workers is None else {"workers": workers}
        self.kinds = list(kinds)
        self.weights = [float(w) for w in weights]
        self.verifiers = [_build_verifier(k, cfg) for k in self.kinds]

    def references(self, records: Sequence[dict[str, Any]]) -> list[list[Any]]:
        """Per record, one reference per verifier; ValueError names the missing field."""
        refs = []
        for i, record in enumerate(records):
            row = []
            for kind, verifier in zip(self.kinds, self.verifiers, strict=False):
                try:
                    row.append(verifier.reference_from_record(record))
                except KeyError as err:
                    raise ValueError(f"answer_field: record {i} has no reference for verifier "
                                     f"{kind!r} (missing {err}); it has {sorted(record)}") from None
            refs.append(row)
        return refs

    def close(self) -> None:
        """Stop the verifiers' worker processes (a later `score` starts new ones)."""
        for verifier in self.verifiers:
            close = getattr(verifier, "close", None)
            if callable(close):
                close()

    def __enter__(self) -> OutcomeRewarder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def score(self, completions: Sequence[str], references: Sequence[list[Any]]) -> OutcomeRewards:
        """Rewards of `completions`; `references[b]` holds one reference per verifier."""
        t0 = time.perf_counter()
        total = torch.zeros(len(completions), dtype=torch.float32)
        correct = torch.ones(len(completions), dtype=torch.bool)
        judged = torch.ones(len(completions), dtype=torch.bool)
        statuses: list[str] = []
        for k, (verifier, weight) in enumerate(zip(self.verifiers, self.weights, strict=False)):
            results = verifier.verify_batch(list(completions), [r[k] for r in references])
            total += weight * torch.tensor([float(r.reward) for r in results], dtype=torch.float32)
            correct &= torch.tensor([bool(r.correct) for r in results], dtype=torch.bool)
            # A verifier class of the user's may predate `judged`: a result without it is a verdict.
            judged &= torch.tensor([getattr(r, "judged", True) is not False for r in results], dtype=torch.bool)
            if k == 0:
                statuses = [str(getattr(r.status, "value", r.status)) for r in results]
        return OutcomeRewards(total, correct, judged, statuses, time.perf_counter() - t0)


def _build_verifier(kind: str, cfg: dict[str, Any]) -> Any:
    """A registered kind (`math`), or a user class as `package.module:Class` / `path/file.py:Class`."""
    if ":" not in kind:
        return get_verifier(kind, **cfg)
    target, _, class_name = kind.rpartition(":")
    if target.endswith(".py"):
        import importlib.util

        spec = importlib.util.spec_from_file_location(f"_veristep_user_verifier_{abs(hash(target))}", target)
        if spec is None or spec.loader is None:
            raise ValueError(f"verifier={kind!r}: cannot load {target}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    try:
        cls = getattr(module, class_name)
    except AttributeError:
        raise ValueError(f"verifier={kind!r}: {target} has no class {class_name}") from None
    return cls(**cfg)


#: The score a step gets when the PRM returns a non-finite one (unless the scorer names its own
#: `neutral`): halfway between wrong (0) and right (1).
NEUTRAL_SCORE = 0.5


@dataclass
class StepTensors:
    """PRM output as padded tensors over a `[N, G]` batch; rows not scored are empty."""

    step_scores: torch.Tensor  # [N, G, S] float
    step_mask: torch.Tensor  # [N, G, S] bool
    token_step: torch.Tensor  # [N, G, T] long, step index of each completion token, -1 = none
    scored_groups: list[int] = field(default_factory=list)
    seconds: float = 0.0
    nan_steps: int = 0  # steps whose score was not finite and got the neutral score instead
    #: the scorer's "cannot tell" score (the rule PRM's 0.5), no evidence for the min/prefix credit
    neutral: float | None = None

    def select(self, group: int, cols: torch.Tensor) -> StepTensors:
        """The completions `cols` of one group, as a batch of one group."""
        return StepTensors(self.step_scores[group, cols][None], self.step_mask[group, cols][None],
                           self.token_step[group, cols][None], [0] if group in self.scored_groups else [],
                           neutral=self.neutral)

    def steps_per_response(self) -> float:
        """Mean number of steps of the scored responses (0 if none)."""
        if not self.scored_groups:
            return 0.0
        counts = self.step_mask[self.scored_groups].sum(-1).float()
        return float(counts.mean())


def token_char_offsets(tokenizer: Any, ids: Sequence[int], context: int = 4) -> list[tuple[int, int]]:
    """Character span of each token in `decode(ids, skip_special_tokens=True)`, in linear time.

    Token k's end is the length of the decoded prefix `ids[:k + 1]` (never less than the end
    before it; an incomplete UTF-8 sequence can shorten a prefix's text). Decoding every prefix
    costs O(L^2); instead the length a token adds is read off a window of the `context`
    non-special tokens before it: decode(window + token) minus decode(window). Byte-level BPE
    resynchronises within one character and SentencePiece's leading-space rule only touches a
    window's first token, so the window gives the same lengths as the whole prefix (tested
    against the prefix definition on BPE, Unigram and character tokenizers). All windows are
    decoded in one batched call.
    """
    ids = [int(t) for t in ids]
    if not ids:
        return []
    special = set(getattr(tokenizer, "all_special_ids", None) or ())
    windows: list[list[int]] = []
    recent: list[int] = []  # positions of the last `context` non-special tokens before k
    for k, tok in enumerate(ids):
        start = recent[0] if len(recent) == context else 0
        windows += [ids[start:k], ids[start:k + 1]]
        if tok not in special:
            recent.append(k)
            if len(recent) > context:
                recent.pop(0)
    texts = tokenizer.batch_decode(windows, skip_special_tokens=True)
    offsets, prev, length = [], 0, 0
    for k in range(len(ids)):
        length += len(texts[2 * k + 1]) - len(texts[2 * k])
        end = max(prev, length)
        offsets.append((prev, end))
        prev = end
    return offsets


def prm_step_tensors(scorer: Any, tokenizer: Any, problem_texts: Sequence[str],
                     completion_ids: Sequence[Sequence[int]], completion_texts: Sequence[str],
                     group_size: int, width: int, groups: Sequence[int]) -> StepTensors:
    """Score the completions of `groups` with the PRM and map its steps onto tokens.

    Rows outside `groups` are never scored: their steps are masked and their tokens point at
    step 0, which the gate replaces with the outcome advantage.
    """
    from veristep.gating import token_step_from_offsets

    t0 = time.perf_counter()
    n = len(problem_texts)
    rows = group_rows(groups, group_size)
    prompts = [problem_texts[r // group_size] for r in rows]
    scored = scorer.score_batch(prompts, [completion_texts[r] for r in rows]) if rows else []
    s_max = max([len(s.scores) for s in scored] + [1])
    step_scores = torch.zeros(n, group_size, s_max)
    step_mask = torch.zeros(n, group_size, s_max, dtype=torch.bool)
    step_starts = torch.zeros(n, group_size, s_max)
    token_starts = torch.zeros(n, group_size, width)
    token_mask = torch.zeros(n, group_size, width, dtype=torch.bool)
    for row, ids in enumerate(completion_ids):
        token_mask[row // group_size, row % group_size, : len(ids)] = True
    for row, result in zip(rows, scored, strict=True):
        g, j = divmod(row, group_size)
        k = len(result.scores)
        if not k:
            continue
        step_scores[g, j, :k] = torch.tensor([float(x) for x in result.scores])
        step_mask[g, j, :k] = True
        step_starts[g, j, :k] = torch.tensor([float(a) for a, _ in result.spans])
        offsets = token_char_offsets(tokenizer, completion_ids[row])
        if offsets:
            token_starts[g, j, : len(offsets)] = torch.tensor([float(a) for a, _ in offsets])
    # A NaN from a model PRM would poison the whole group's statistics, and masking the step
    # would leave a hole in the step sequence: the step stays, with the neutral score.
    bad = ~torch.isfinite(step_scores) & step_mask
    nan_steps = int(bad.sum())
    if nan_steps:
        step_scores[bad] = float(getattr(scorer, "neutral", NEUTRAL_SCORE))
    token_step = token_step_from_offsets(token_starts, token_mask, step_starts, step_mask)
    return StepTensors(step_scores, step_mask, token_step, list(groups), time.perf_counter() - t0,
                       nan_steps, getattr(scorer, "neutral", None))


def gated_step_scores(cfg: Any, scorer: Any | None, tokenizer: Any, problem_texts: Sequence[str], ro: Any,
                      width: int, groups: Sequence[int], step: int) -> tuple[StepTensors | None, int, int]:
    """The PRM's step tensors of the gated `groups` (None without a scorer), and the rollouts and
    completion tokens a Monte-Carlo scorer sampled for them (0 for any other scorer).

    Under `--placebo steps` the scores are permuted within each gated group (seeded by `step`).
    """
    if scorer is None:
        return None, 0, 0
    from .placebo import permute_step_scores, placebo_generator

    before = (getattr(scorer, "rollouts", 0), getattr(scorer, "completion_tokens", 0))
    steps = prm_step_tensors(scorer, tokenizer, problem_texts, ro.completion_ids, ro.texts, cfg.group_size,
                             width, groups)
    if cfg.placebo == "steps":  # control: the same step scores, on random steps
        steps.step_scores = permute_step_scores(steps.step_scores, steps.step_mask, list(groups),
                                                placebo_generator(cfg.seed, step))
    return (steps, getattr(scorer, "rollouts", 0) - before[0],
            getattr(scorer, "completion_tokens", 0) - before[1])

"""Placebo controls: keep the gradient mass of a signal, remove its information.

`--placebo rewards` permutes the outcome rewards within each group: every group keeps its
rewards (so its mean, spread, collapse and gate decision, hence the size of its advantages), but
which completion earned which reward is random. `--placebo steps` permutes the step scores
within each gated group over its valid (completion, step) positions: the group keeps its
multiset of scores, but no score belongs to the step it judged. A method that still gains under
its placebo gains from something other than the signal (the update's size, its noise, the length
bias of the loss).
"""

from __future__ import annotations

import torch

PLACEBOS = ("", "rewards", "steps")


def placebo_generator(seed: int, step: int) -> torch.Generator:
    """The placebo's own random stream for one step (the rollouts' noise is left untouched)."""
    return torch.Generator().manual_seed(seed * 1_000_003 + step * 7_919 + 17)


def shuffle_within_groups(values: torch.Tensor, generator: torch.Generator,
                          valid: torch.Tensor | None = None) -> torch.Tensor:
    """`values` [N, G] with each row's valid entries permuted among its valid positions.

    Invalid entries (e.g. unjudged completions) stay where they are, so a placebo never turns
    an unjudged completion's placeholder reward into a judged one's.
    """
    out = values.clone()
    for g in range(values.shape[0]):
        cols = torch.arange(values.shape[1]) if valid is None else torch.nonzero(valid[g]).flatten()
        if len(cols) > 1:
            out[g, cols] = values[g, cols[torch.randperm(len(cols), generator=generator)]]
    return out


def permute_step_scores(step_scores: torch.Tensor, step_mask: torch.Tensor, groups: list[int],
                        generator: torch.Generator) -> torch.Tensor:
    """`step_scores` [N, G, S] with each listed group's valid scores permuted over its valid steps."""
    out = step_scores.clone()
    for g in groups:
        where = step_mask[g]
        scores = step_scores[g][where]
        if scores.numel() > 1:
            out[g][where] = scores[torch.randperm(scores.numel(), generator=generator)]
    return out

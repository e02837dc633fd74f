"""Credit diagnostic: which step of a wrong response the advantages blame, given true step labels.

Where an oracle labels every step (the built-in task), this measures what a credit form does
with the tokens of a gated group: does the first wrong step get a negative advantage, and what
do on-track steps, steps after the error and the answer line get. Pure tensor function.
"""

from __future__ import annotations

import torch

from .checks import as_bool, check_prefix, check_shape, check_token_step

#: Step kinds, in the order of `step_kinds`' codes 0..3 (-1: not counted).
STEP_KINDS = ("on_track", "first_error", "after_error", "answer")


def step_kinds(correct: torch.Tensor, is_answer: torch.Tensor, step_mask: torch.Tensor) -> torch.Tensor:
    """Kind code of each step [N, G, S]: 0 on track, 1 first error, 2 after the error, 3 answer line.

    The first error is the first valid step labelled wrong, the answer line included (a miscopied
    answer after right steps is the first error); other answer lines are kind 3; valid steps
    before the first error are on track, after it after the error. Masked steps get -1.
    """
    ok, ans, mask = (as_bool(t, n) for t, n in ((correct, "correct"), (is_answer, "is_answer"),
                                                  (step_mask, "step_mask")))
    S = mask.shape[-1]
    idx = torch.arange(S, device=mask.device).expand(mask.shape)
    wrong = mask & ~ok
    first = torch.where(wrong, idx, S).amin(-1, keepdim=True) if S else idx[..., :1]
    kinds = torch.where(idx < first, 0, 2)
    kinds = torch.where(ans, 3, kinds)
    kinds = torch.where(idx == first, 1, kinds)
    return torch.where(mask, kinds, -1)


def credit_diagnostics(
    advantages: torch.Tensor,
    token_step: torch.Tensor,
    correct: torch.Tensor,
    is_answer: torch.Tensor,
    step_mask: torch.Tensor,
    rows: torch.Tensor,
) -> dict[str, float | None]:
    """Mean advantage per step kind and the share of responses whose first error is blamed.

    advantages [N, G, T] (the token advantages the loss will use); token_step [N, G, T] (the
    labelled steps' token map, -1 padding); correct / is_answer / step_mask [N, G, S] (oracle
    labels); rows bool [N, G], the responses to measure (e.g. those of gated groups). A step's
    advantage is the mean over its tokens; steps without tokens are skipped. Returns
    `gate/first_error_blamed` (share of measured responses with a first error whose first error
    gets a negative advantage), `gate/first_error_responses` (their count) and
    `credit/adv_<kind>` for each of STEP_KINDS (mean over measured steps of that kind); None where
    nothing was measured.
    """
    check_shape("advantages", advantages, "N, G, T")
    check_shape("step_mask", step_mask, "N, G, S")
    if token_step.shape != advantages.shape:
        raise ValueError(f"token_step shape {tuple(token_step.shape)} != advantages {tuple(advantages.shape)}")
    for name, t in (("correct", correct), ("is_answer", is_answer)):
        if t.shape != step_mask.shape:
            raise ValueError(f"{name} shape {tuple(t.shape)} != step_mask {tuple(step_mask.shape)}")
    check_prefix("step_mask", step_mask, "advantages", advantages, 2)
    check_token_step(token_step, step_mask.shape[-1])
    rows = as_bool(rows, "rows")
    if rows.shape != advantages.shape[:2]:
        raise ValueError(f"rows shape {tuple(rows.shape)} != {tuple(advantages.shape[:2])}")
    S = step_mask.shape[-1]
    kinds = step_kinds(correct, is_answer, step_mask)
    onehot = (token_step.unsqueeze(-1) == torch.arange(S, device=token_step.device)).to(torch.float64)
    tokens = onehot.sum(-2)  # [N, G, S]
    step_adv = torch.einsum("ngt,ngts->ngs", advantages.to(torch.float64), onehot) / tokens.clamp(min=1)
    counted = (tokens > 0) & rows.unsqueeze(-1) & (kinds >= 0)
    out: dict[str, float | None] = {}
    for code, name in enumerate(STEP_KINDS):
        sel = counted & (kinds == code)
        n = int(sel.sum())
        out[f"credit/adv_{name}"] = float(step_adv[sel].mean()) if n else None
    first = counted & (kinds == 1)
    n_first = int(first.sum())  # at most one first error per response
    out["gate/first_error_responses"] = n_first
    out["gate/first_error_blamed"] = float((step_adv[first] < 0).double().mean()) if n_first else None
    return out

"""Maps between per-response, per-step and per-token tensors (padding is always masked)."""

from __future__ import annotations

import torch

from .checks import as_bool, check_prefix, check_shape, check_token_step


def broadcast_to_tokens(advantages: torch.Tensor, token_mask: torch.Tensor) -> torch.Tensor:
    """Spread per-response advantages [N, G] over completion tokens: [N, G, T], 0 on padding."""
    check_shape("advantages", advantages, "N, G")
    check_shape("token_mask", token_mask, "N, G, T")
    check_prefix("token_mask", token_mask, "advantages", advantages, 2)
    mask = as_bool(token_mask, "token_mask")
    zero = torch.zeros((), dtype=advantages.dtype, device=advantages.device)
    return torch.where(mask, advantages.unsqueeze(-1), zero)


def steps_to_tokens(step_values: torch.Tensor, token_step: torch.Tensor) -> torch.Tensor:
    """Give every token the value of its step: [N, G, S] x token_step [N, G, T] -> [N, G, T].

    token_step holds the step index of each completion token and -1 for padding; padding
    gets 0.
    """
    check_shape("step_values", step_values, "N, G, S")
    check_shape("token_step", token_step, "N, G, T")
    check_prefix("token_step", token_step, "step_values", step_values, 2)
    check_token_step(token_step, step_values.shape[-1])
    return gather_steps(step_values, token_step)


def gather_steps(step_values: torch.Tensor, token_step: torch.Tensor) -> torch.Tensor:
    """steps_to_tokens on checked inputs: one gather, 0 for padding (-1) and when S = 0."""
    # A leading zero column turns padding (-1) into index 0: one gather, no masking pass.
    # With no steps at all (S = 0) index 0 is still legal (see check_token_step); a trailing
    # zero column gives it a value.
    n_zero_tail = 1 if step_values.shape[-1] == 0 else 0
    zero = step_values.new_zeros(step_values.shape[:2] + (1,))
    table = torch.cat([zero, step_values] + [zero] * n_zero_tail, dim=-1)
    return torch.gather(table, -1, token_step.long() + 1)


def token_step_from_offsets(
    token_starts: torch.Tensor,
    token_mask: torch.Tensor,
    step_starts: torch.Tensor,
    step_mask: torch.Tensor,
) -> torch.Tensor:
    """Assign each completion token to a step by character offsets: -> token_step [N, G, T].

    token_starts [N, G, T]: first character of each token (from a tokenizer's offset map);
    step_starts [N, G, S]: first character of each step, increasing over the valid steps.
    The spec's conventions: a token belongs to the step in which it starts, so a token that
    straddles a boundary goes to the earlier step; text between steps and after the last
    step (separators, EOS) goes to the preceding / last step; text before the first step goes
    to the first. Step indices never decrease along a response, so a zero-width token such as
    EOS (offset (0, 0)) belongs to the step of the token before it. A response with no valid step maps its tokens to step 0 (which is masked,
    so they get advantage 0 but still count as completion tokens). Padding tokens get -1.
    """
    check_shape("token_starts", token_starts, "N, G, T")
    check_shape("step_starts", step_starts, "N, G, S")
    for name, t, ref_name, ref in (
        ("token_mask", token_mask, "token_starts", token_starts),
        ("step_mask", step_mask, "step_starts", step_starts),
    ):
        if t.shape != ref.shape:
            raise ValueError(f"{name} shape {tuple(t.shape)} != {ref_name} {tuple(ref.shape)}")
    check_prefix("step_starts", step_starts, "token_starts", token_starts, 2)
    tmask, smask = as_bool(token_mask, "token_mask"), as_bool(step_mask, "step_mask")
    starts = step_starts.to(torch.float64)
    # Masked steps sort to the end so searchsorted only ever lands among the valid ones.
    starts = torch.where(smask, starts, torch.inf)
    sorted_ok = starts[..., 1:] >= starts[..., :-1]
    if not bool(sorted_ok.all()):
        raise ValueError(
            "step_starts must increase over the valid steps of each response, and masked steps "
            "must come after the valid ones"
        )
    n_valid = smask.sum(-1, keepdim=True)
    idx = torch.searchsorted(
        starts.contiguous(), token_starts.to(torch.float64).contiguous(), right=True
    )
    idx = (idx - 1).clamp(min=0)
    idx = torch.minimum(idx, (n_valid - 1).clamp(min=0))
    # Tokens come in text order, so a token never belongs to an earlier step than the one
    # before it: a zero-width token (EOS, offset (0, 0)) takes its predecessor's step.
    idx = torch.where(tmask, idx, torch.zeros_like(idx)).cummax(dim=-1).values
    return torch.where(tmask, idx, torch.full_like(idx, -1))

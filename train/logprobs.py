"""Padded training tensors for a rollout batch, and per-token log-probs of its completions.

Layout of one row: `[pad ... prompt | completion ... pad]`, prompts left-padded to the longest
prompt, completions right-padded to the longest completion, so the completion of every row starts
at the same column and the logits of the last T+1 positions are all the loss needs.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch


@dataclass
class PolicyBatch:
    """Padded tensors of B = N*G sequences; T = longest completion."""

    input_ids: torch.Tensor  # [B, P + T]
    attention_mask: torch.Tensor  # [B, P + T]
    position_ids: torch.Tensor  # [B, P + T]
    completion_ids: torch.Tensor  # [B, T]
    completion_mask: torch.Tensor  # [B, T] float, 1 on real completion tokens

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def rows(self, index: torch.Tensor | slice) -> PolicyBatch:
        """A sub-batch of rows (the completion width stays the same)."""
        return PolicyBatch(self.input_ids[index], self.attention_mask[index], self.position_ids[index],
                           self.completion_ids[index], self.completion_mask[index])


def collate(prompt_ids: list[list[int]], completion_ids: list[list[int]], pad_id: int,
            device: torch.device | str = "cpu") -> PolicyBatch:
    """Pad prompts on the left and completions on the right into one PolicyBatch."""
    p_width = max(len(p) for p in prompt_ids)
    t_width = max(1, max(len(c) for c in completion_ids))
    b = len(prompt_ids)
    input_ids = torch.full((b, p_width + t_width), pad_id, dtype=torch.long)
    attention = torch.zeros((b, p_width + t_width), dtype=torch.long)
    comp = torch.full((b, t_width), pad_id, dtype=torch.long)
    comp_mask = torch.zeros((b, t_width), dtype=torch.float32)
    for i, (p, c) in enumerate(zip(prompt_ids, completion_ids, strict=False)):
        input_ids[i, p_width - len(p) : p_width] = torch.tensor(p, dtype=torch.long)
        attention[i, p_width - len(p) : p_width] = 1
        if c:
            input_ids[i, p_width : p_width + len(c)] = torch.tensor(c, dtype=torch.long)
            attention[i, p_width : p_width + len(c)] = 1
            comp[i, : len(c)] = torch.tensor(c, dtype=torch.long)
            comp_mask[i, : len(c)] = 1.0
    # Positions count real tokens only, exactly as `generate` does with left padding.
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
    return PolicyBatch(input_ids.to(device), attention.to(device), position_ids.to(device),
                       comp.to(device), comp_mask.to(device))


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """The compute dtype a config names ("auto": bf16 on GPU, fp32 on CPU)."""
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, name)


def autocast(dtype: torch.dtype, device: torch.device) -> contextlib.AbstractContextManager:
    """Run forward passes in `dtype` while the parameters stay float32 (mixed precision).

    The trainer keeps float32 master weights: in bf16 an AdamW update of 3e-5 is below the
    spacing of most weights and is rounded away (measured: 84 % of the tiny model's weights did
    not move in 10 steps), so the optimizer must step on float32 copies.
    """
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def completion_logits(model: torch.nn.Module, batch: PolicyBatch,
                      dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Logits `[B, T, V]` that predict each completion token (forward in the compute `dtype`)."""
    t = batch.completion_ids.shape[1]
    with autocast(dtype, batch.input_ids.device):
        out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                    position_ids=batch.position_ids, logits_to_keep=t + 1, use_cache=False)
    return out.logits[:, :-1, :]


def logprobs_from_logits(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0,
                         with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs `[B, T]` of `tokens` under softmax(logits / temperature), and optional entropy."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    log_z = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - log_z
    entropy = None
    if with_entropy:
        with torch.no_grad():  # logged only; keeping its graph would double the logits memory
            probs = torch.softmax(logits, dim=-1)
            entropy = log_z - (probs * logits).sum(-1)
    return logp, entropy


def token_logprobs(model: torch.nn.Module, batch: PolicyBatch, temperature: float = 1.0,
                   micro_batch_size: int = 0, with_entropy: bool = False,
                   dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs `[B, T]` of the completions (and entropy), in micro-batches."""
    size = micro_batch_size or len(batch)
    lps, ents = [], []
    for start in range(0, len(batch), size):
        sub = batch.rows(slice(start, start + size))
        lp, ent = logprobs_from_logits(completion_logits(model, sub, dtype), sub.completion_ids,
                                       temperature, with_entropy)
        lps.append(lp * sub.completion_mask)
        if ent is not None:
            ents.append(ent)
    return torch.cat(lps), (torch.cat(ents) if with_entropy else None)

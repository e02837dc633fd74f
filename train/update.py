"""The policy update of one rollout batch: pi_old / pi_ref log-probs, then PPO epochs x
mini-batches of the clipped loss, each mini-batch's gradient accumulated over micro-batches."""

from __future__ import annotations

import math
from typing import Any

import torch

from .config import LossSettings
from .distributed import DistInfo, all_reduce, grad_sync, mini_batch_rows, unwrap
from .logprobs import (
    PolicyBatch,
    collate,
    completion_logits,
    logprobs_from_logits,
    resolve_dtype,
    token_logprobs,
)
from .loss import aggregation_weights, clipped_policy_loss
from .rollout import Rollouts, iter_chunks


def policy_inputs(cfg: Any, ro: Rollouts, judged: torch.Tensor, pad_id: int, device: torch.device
                  ) -> tuple[PolicyBatch, torch.Tensor, torch.Tensor]:
    """The padded batch of the step's rows, its token mask `[n, G, T]` and `keep` `[n, G]`.

    `keep` marks the completions the loss learns from: judged ones, and with `mask_truncated`
    only those that ended; the others are masked out of the batch (and of the loss's
    denominators), while the returned token mask still covers them for the advantages.
    """
    n, G = judged.shape
    batch = collate(ro.prompt_ids, ro.completion_ids, pad_id, device)
    T = batch.completion_ids.shape[1]
    token_mask = batch.completion_mask.view(n, G, T).cpu().clone()  # own copy: masked below
    keep = judged.clone()
    if cfg.mask_truncated:  # a completion cut at the length limit teaches nothing reliable
        keep &= ~torch.tensor(ro.truncated, dtype=torch.bool).view(n, G)
    batch.completion_mask[(~keep).flatten().to(device)] = 0.0
    return batch, token_mask, keep


def optimise_policy(cfg: Any, model: torch.nn.Module, ref_model: torch.nn.Module | None,
                    optimizer: torch.optim.Optimizer, batch: PolicyBatch, ro: Rollouts,
                    adv: torch.Tensor, group_of_row: torch.Tensor, winners: torch.Tensor,
                    loss: LossSettings, info: DistInfo) -> dict[str, float]:
    """PPO epochs x mini-batches of the clipped loss on one rollout batch; returns metrics.

    `adv` `[B, T]` token advantages; `group_of_row` `[B]` global group index of each row (the
    mini-batch key); `winners` `[N]` groups with a positive advantage (the divisor of
    loss_agg=winner-constant); `loss` the resolved objective (`Config.loss_settings()`).
    """
    G = cfg.group_size
    policy = unwrap(model)
    dtype = resolve_dtype(cfg.dtype, batch.input_ids.device)
    # pi_old is the policy that sampled the batch. With a single update per batch it equals
    # pi_theta at the first forward, whose detached log-probs serve (saves one forward pass).
    single_update = cfg.ppo_epochs * cfg.mini_batches == 1
    old_logp = None
    if not single_update or cfg.old_logprobs == "engine":
        if cfg.old_logprobs == "engine":
            old_logp = _engine_logprobs(ro, batch)
        else:
            with torch.no_grad():
                old_logp, _ = token_logprobs(policy, batch, cfg.temperature, cfg.micro_batch_size, dtype=dtype)
    ref_logp = None
    if ref_model is not None:
        with torch.no_grad():
            ref_logp, _ = token_logprobs(ref_model, batch, cfg.temperature, cfg.micro_batch_size, dtype=dtype)

    sums = {"policy": 0.0, "kl": 0.0, "low": 0.0, "high": 0.0, "tokens": 0.0, "ent": 0.0,
            "ent_tokens": 0.0, "mismatch": 0.0, "mismatch_tokens": 0.0, "grad_norm": 0.0, "ratio_dev": 0.0}
    updates = skipped = 0
    for epoch in range(cfg.ppo_epochs):
        for mb in range(cfg.mini_batches):
            # Mini-batches are sets of global group indices, so a rank's share of mini-batch k
            # is exactly its part of the single-process mini-batch k.
            rows = mini_batch_rows(group_of_row, cfg.mini_batches, mb)
            sub_mask = batch.completion_mask[rows]
            if loss.agg == "winner-constant":  # divisor: G x constant per group with a winner
                n_seqs = float(winners[torch.unique(rows // G)].float().sum() * G)
            else:
                n_seqs = float(len(rows))
            total_tokens = float(all_reduce(sub_mask.sum().cpu(), info))
            total_seqs = float(all_reduce(n_seqs, info))
            # DDP/FSDP average gradients over ranks; scaling by the world size makes that a sum,
            # and the global denominators above turn it into the single-process mean.
            weights = torch.zeros_like(batch.completion_mask)
            weights[rows] = aggregation_weights(sub_mask, loss.agg, total_tokens, total_seqs,
                                                loss.constant) * info.world_size
            chunks = list(iter_chunks(rows.tolist(), cfg.micro_batch_size))
            loss_sum = 0.0
            for c, chunk in enumerate(chunks):
                ix = torch.tensor(chunk)
                sub = batch.rows(ix)
                with grad_sync(model, enabled=c == len(chunks) - 1):
                    logits = completion_logits(model, sub, dtype)
                    logp, ent = logprobs_from_logits(logits, sub.completion_ids, cfg.temperature,
                                                     with_entropy=epoch == 0)
                    old = old_logp[ix] if old_logp is not None else logp.detach()
                    terms = clipped_policy_loss(logp, old, adv[ix], sub.completion_mask, weights[ix],
                                                loss.eps_low, loss.eps_high,
                                                ref_logp[ix] if ref_logp is not None else None, cfg.kl_coef)
                    terms.loss.backward()
                loss_sum += float(terms.loss.detach())
                sums["policy"] += terms.policy / info.world_size
                sums["kl"] += terms.kl / info.world_size
                sums["low"] += terms.clipped_low
                sums["high"] += terms.clipped_high
                sums["tokens"] += terms.tokens
                sums["ratio_dev"] += terms.ratio_dev
                if ent is not None:
                    sums["ent"] += float((ent * sub.completion_mask).sum())
                    sums["ent_tokens"] += float(sub.completion_mask.sum())
                if epoch == 0 and mb == 0 and ro.engine_logprobs is not None:
                    d, k = _mismatch(ro, ix, logp.detach(), sub.completion_mask)
                    sums["mismatch"] += d
                    sums["mismatch_tokens"] += k
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm or float("inf"))
            if hasattr(grad_norm, "full_tensor"):
                grad_norm = grad_norm.full_tensor()
            grad_norm = float(grad_norm)
            loss_ok = math.isfinite(float(all_reduce(loss_sum, info)))
            if loss_ok and math.isfinite(grad_norm):
                optimizer.step()
                updates += 1
                sums["grad_norm"] += grad_norm
            else:
                skipped += 1  # a non-finite loss or gradient would corrupt the weights: skip it
            optimizer.zero_grad(set_to_none=True)
    n_upd = cfg.ppo_epochs * cfg.mini_batches
    tok = float(all_reduce(sums["tokens"], info))
    ent_tok = float(all_reduce(sums["ent_tokens"], info))
    out = {
        "loss/policy": float(all_reduce(sums["policy"], info)) / n_upd,
        "loss/kl": float(all_reduce(sums["kl"], info)) / n_upd if ref_model is not None else 0.0,
        "loss/clip_frac_low": float(all_reduce(sums["low"], info)) / max(tok, 1.0),
        "loss/clip_frac_high": float(all_reduce(sums["high"], info)) / max(tok, 1.0),
        "policy/entropy": float(all_reduce(sums["ent"], info)) / max(ent_tok, 1.0),
        "loss/ratio_dev": float(all_reduce(sums["ratio_dev"], info)) / max(tok, 1.0),
        "train/grad_norm": sums["grad_norm"] / max(updates, 1),
        "train/updates": updates,
        "train/skipped_updates": skipped,
    }
    if ro.engine_logprobs is not None:
        k = float(all_reduce(sums["mismatch_tokens"], info))
        out["rollout/logprob_mismatch"] = float(all_reduce(sums["mismatch"], info)) / max(k, 1.0)
    return out


def _engine_logprobs(ro: Rollouts, batch: PolicyBatch) -> torch.Tensor:
    """The rollout engine's log-probs as a `[B, T]` tensor aligned with the batch."""
    out = torch.zeros_like(batch.completion_mask)
    for i, lps in enumerate(ro.engine_logprobs):
        if lps:
            out[i, : len(lps)] = torch.tensor(lps, dtype=out.dtype)
    return torch.nan_to_num(out, nan=0.0) * batch.completion_mask


def _mismatch(ro: Rollouts, ix: torch.Tensor, logp: torch.Tensor, mask: torch.Tensor) -> tuple[float, float]:
    """Sum of |engine - trainer| log-prob over the tokens of rows `ix`, and the token count."""
    total, count = 0.0, 0.0
    for k, i in enumerate(ix.tolist()):
        lps = ro.engine_logprobs[i]
        n = min(len(lps), int(mask[k].sum()))
        if n:
            eng = torch.tensor(lps[:n], dtype=logp.dtype, device=logp.device)
            ok = torch.isfinite(eng)
            total += float((eng[ok] - logp[k, :n][ok]).abs().sum())
            count += float(ok.sum())
    return total, count


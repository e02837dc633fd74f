"""GRPO with VeriGate advantage gating, as one readable loop.

    rollout -> rewards -> gate -> PRM on gated groups only -> advantages -> loss -> step -> log

With no arguments it trains a tiny warm-started model on the built-in step-wise arithmetic task
on CPU in a few minutes and prints a summary. On a GPU, point it at your model and data:

    python train/gated_grpo.py --model Qwen/Qwen2.5-1.5B-Instruct --dataset my_math.jsonl \
        --chat-template --rollout vllm --output-dir runs/my_run

Every flag is a field of `veristep.train.config.Config` (`--help` lists them); `--config x.yaml`
loads a YAML file of the same fields. Several GPUs: `torchrun --nproc-per-node 8 train/gated_grpo.py ...`.
This file is also run as a script, so it imports with absolute names only.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as `python train/gated_grpo.py`, Python puts train/ first on sys.path, where config.py,
# data.py, loss.py ... would shadow any top-level module of the same name. Take it off.
if __name__ == "__main__" and sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)

import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from veristep.train.advantages import (  # noqa: E402
    compute_advantages,
    oracle_credit_metrics,
    prm_groups,
    winner_groups,
)
from veristep.train.checkpoint import (  # noqa: E402
    StopFlag,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from veristep.train.config import (  # noqa: E402
    PRM_METHODS,
    Config,
    ConfigError,
    LossSettings,
    parse_args,
)
from veristep.train.data import PromptSampler, check_data_files, load_train_and_eval  # noqa: E402
from veristep.train.distributed import (  # noqa: E402
    DistInfo,
    all_reduce,
    check_mini_batches,
    gather_rows,
    grad_sync,
    mini_batch_rows,
    setup,
    shard,
    teardown,
    unwrap,
    wrap_model,
)
from veristep.train.evaluate import EvalResult, compare, evaluate  # noqa: E402
from veristep.train.logprobs import (  # noqa: E402
    PolicyBatch,
    collate,
    completion_logits,
    logprobs_from_logits,
    resolve_dtype,
    token_logprobs,
)
from veristep.train.loss import aggregation_weights, clipped_policy_loss  # noqa: E402
from veristep.train.placebo import (  # noqa: E402
    permute_step_scores,
    placebo_generator,
    shuffle_within_groups,
)
from veristep.train.rewards import OutcomeRewarder, prm_step_tensors  # noqa: E402
from veristep.train.rollout import Rollouts, build_engine, iter_chunks  # noqa: E402
from veristep.train.tracking import STEP_METRICS, MetricsLogger  # noqa: E402

from veristep import gating  # noqa: E402


def train(cfg: Config) -> dict[str, Any]:
    """Run a whole training job; return the final summary (also written to summary.json)."""
    cfg.validate()
    _quiet_libraries()
    info = setup(cfg.device)
    if cfg.prompts_per_step % info.world_size:
        raise ConfigError(f"prompts_per_step={cfg.prompts_per_step}: must divide by the number of "
                          f"processes ({info.world_size})")
    try:
        check_mini_batches(cfg.prompts_per_step // info.world_size, cfg.mini_batches, info.world_size)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    _seed_everything(cfg.seed * 1000 + info.rank)
    out = Path(cfg.output_dir)
    t_start = time.perf_counter()
    G, device = cfg.group_size, info.device

    # ---- models: the policy pi_theta (also the rollout weights) and, only if KL is on, pi_ref
    check_data_files(cfg.dataset, cfg.eval_dataset)  # before a warm start takes minutes to build
    model_path = _resolve_model(cfg, info)
    tokenizer = _load_tokenizer(cfg.tokenizer or model_path)
    dtype = resolve_dtype(cfg.dtype, device)  # forward passes; the policy's weights stay float32
    policy = _load_model(model_path, torch.float32, device)
    if cfg.gradient_checkpointing:
        policy.gradient_checkpointing_enable()
    ref_model = None
    if cfg.kl_coef > 0:
        ref_model = _load_model(cfg.ref_model or model_path, dtype, device).eval().requires_grad_(False)
    model = wrap_model(policy, info, cfg.fsdp)
    optimizer = _make_optimizer(cfg, model)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _lr_lambda(cfg))

    # ---- data, verifiers, PRM, prompt difficulty tracker, rollout engine
    train_set, eval_set = load_train_and_eval(cfg, tokenizer)
    rewarder = OutcomeRewarder(cfg.verifier_kinds(), cfg.verifier_weight_list(), cfg.verifier_workers)
    train_refs = rewarder.references([p.record for p in train_set])
    eval_refs = rewarder.references([p.record for p in eval_set])
    train_ids = _tokenize_prompts([p.model_input for p in train_set], tokenizer, cfg)
    eval_ids = _tokenize_prompts([p.model_input for p in eval_set], tokenizer, cfg)
    separator = cfg.prm_separator
    if separator is None and cfg.dataset.startswith("builtin:arith"):
        from veristep.train.demo.task import STEP_SEPARATOR as separator
    options = {"separator": separator} if separator else {}
    sampler = PromptSampler(len(train_set), cfg.seed)
    difficulty = gating.DifficultyTracker(alpha=cfg.difficulty_ema)
    engine = build_engine(cfg, unwrap(model), tokenizer, model_path, device, info.enabled)
    scorer = None
    if cfg.advantage in PRM_METHODS:
        scorer = _build_scorer(cfg, engine, tokenizer, rewarder, train_set, train_ids, train_refs, options,
                               device, info)
    # The credit diagnostic: exact step labels where the task has a reference solution.
    oracle = None
    if cfg.dataset.startswith("builtin:arith"):
        from veristep.prm.oracle import OracleScorer

        oracle = OracleScorer(**options)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    loss = cfg.loss_settings()

    # ---- resume
    start_step, run_state = 0, {}
    ckpt = latest_checkpoint(out) if cfg.resume else None
    if ckpt is not None:
        run_state = load_checkpoint(ckpt, model, optimizer, scheduler, info, cfg.fsdp)
        start_step = int(run_state["step"])
        sampler.load_state_dict(run_state["sampler"])
        difficulty.load_state_dict(_difficulty_state(run_state, ckpt))
        engine.update_weights(model)
    log = MetricsLogger(out, enabled=info.is_main, tensorboard=cfg.tensorboard, progress=cfg.progress,
                        total_steps=cfg.steps, start_step=start_step, log_every=cfg.log_every)
    if info.is_main:
        _write_config(cfg, out)
        log.console(f"veristep train: advantage {cfg.advantage} | loss {loss.describe()} | "
                    f"model {model_path} | {len(train_set)} prompts, "
                    f"{len(eval_set)} held out | G={G} x {cfg.prompts_per_step} prompts/step | "
                    f"{cfg.steps} steps on {device} x{info.world_size}"
                    + (f" | resumed at step {start_step} from {ckpt}" if ckpt else ""))
    eval_samples = cfg.eval_samples or G

    def run_eval() -> EvalResult | None:
        return evaluate(engine, eval_ids, eval_refs, rewarder, eval_samples, cfg.seed, info, cfg.eval_greedy)

    eval_before = _eval_state(run_state.get("eval_before"))
    if eval_before is None and eval_ids:
        eval_before = run_eval()
        if info.is_main:
            log.console(f"eval before training ({eval_before.seconds:.0f} s): "
                        + _eval_line(eval_before.metrics(G)))
    totals = {"rollouts": 0, "completion_tokens": 0, "prm_completions": 0, "skipped_updates": 0,
              "mc_rollouts": 0, **run_state.get("totals", {})}
    last_eval = _eval_state(run_state.get("last_eval")) or eval_before
    last_eval_step = run_state.get("last_eval_step", 0)
    step, stopped = start_step, None

    with StopFlag() as stop:
        for step in range(start_step + 1, cfg.steps + 1):
            t_step = time.perf_counter()
            m: dict[str, Any] = {k: None for k in STEP_METRICS}

            # 1. rollout: G completions for this rank's slice of the step's prompts
            engine.wake_up()
            idx = sampler.next_indices(cfg.prompts_per_step)
            local_idx = shard(idx, info)
            ro = engine.generate([train_ids[i] for i in local_idx], G, _seeds(cfg, step, 0, idx, info))
            t_rollout = ro.timings["rollout_s"]
            sampled, sampled_tokens = len(ro), ro.num_tokens()  # compute spent, kept or not

            # 2. outcome rewards from the verifiers
            scored = rewarder.score(ro.texts, [train_refs[i] for i in local_idx for _ in range(G)])

            # 2b. DAPO dynamic sampling: more rounds until enough groups carry signal
            if cfg.advantage == "dapo":
                ro, scored, local_idx, ds = _dynamic_sampling(
                    cfg, engine, rewarder, sampler, train_ids, train_refs, ro, scored, local_idx, step, info)
                t_rollout += ds.pop("rollout_s")
                sampled, sampled_tokens = ds.pop("sampled"), ds.pop("sampled_tokens")
                m.update(ds)
            rewards, correct, t_reward = scored.rewards, scored.correct, scored.seconds
            n = len(local_idx)
            # An unjudged completion (checker time-out, sandbox error, bad reference) has no
            # reward: it is left out of the gate, the advantages and the loss, and counted.
            judged = scored.judged.view(n, G)
            outcome = rewards.view(n, G)
            if cfg.overlong_cache_len:
                lengths = torch.tensor([len(c) for c in ro.completion_ids], dtype=torch.float32)
                rewards = rewards + gating.overlong_penalty(lengths, cfg.max_completion_len,
                                                            cfg.overlong_cache_len)
            rewards = rewards.view(n, G)
            correct = correct.view(n, G)
            if cfg.placebo == "rewards":  # control: the same rewards, on random completions
                rewards = shuffle_within_groups(rewards, placebo_generator(cfg.seed, step), judged)

            # 3. gate: which groups collapsed, and which of them the PRM must score
            groups = prm_groups(cfg, rewards, judged)
            batch = collate(ro.prompt_ids, ro.completion_ids, pad_id, device)
            T = batch.completion_ids.shape[1]
            token_mask = batch.completion_mask.view(n, G, T).cpu().clone()  # own copy: masked below
            keep = judged.clone()
            if cfg.mask_truncated:  # a completion cut at the length limit teaches nothing reliable
                keep &= ~torch.tensor(ro.truncated, dtype=torch.bool).view(n, G)
            batch.completion_mask[(~keep).flatten().to(device)] = 0.0  # out of the loss's denominators too

            # 4. PRM on the gated groups only
            steps_t = None
            mc_before = (getattr(scorer, "rollouts", 0), getattr(scorer, "completion_tokens", 0))
            if scorer is not None:
                steps_t = prm_step_tensors(scorer, tokenizer, [train_set[i].text for i in local_idx],
                                           ro.completion_ids, ro.texts, G, T, groups)
                if cfg.placebo == "steps":  # control: the same step scores, on random steps
                    steps_t.step_scores = permute_step_scores(steps_t.step_scores, steps_t.step_mask, groups,
                                                              placebo_generator(cfg.seed, step))
            # Monte-Carlo step values sample continuations: rollouts the run's budget pays for.
            mc_rollouts = getattr(scorer, "rollouts", 0) - mc_before[0]
            sampled += mc_rollouts
            sampled_tokens += getattr(scorer, "completion_tokens", 0) - mc_before[1]

            # 5. advantages [N, G, T]
            adv, adv_metrics = compute_advantages(cfg, rewards, token_mask, steps_t, keep, judged)
            m.update(adv_metrics)
            if oracle is not None:
                m.update(oracle_credit_metrics(cfg, oracle, tokenizer, [train_set[i].text for i in local_idx],
                                               ro.completion_ids, ro.texts, rewards, adv))

            # 6-7. pi_old / pi_ref log-probs, then the clipped loss over PPO epochs x mini-batches
            t0 = time.perf_counter()
            adv_rows = adv.view(n * G, T).to(device)
            group_of_row = torch.tensor([_global_group(info, cfg, r // G) for r in range(n * G)])
            stats = optimise_policy(cfg, model, ref_model, optimizer, batch, ro, adv_rows, group_of_row,
                              winner_groups(adv), loss, info)
            scheduler.step()
            engine.update_weights(model)
            engine.sleep()
            t_train = time.perf_counter() - t0
            m.update(stats)
            totals["skipped_updates"] += int(stats["train/skipped_updates"])

            # 8. monitors over the global batch, prompt difficulty
            all_outcome = gather_rows(outcome, info)
            all_correct = gather_rows(correct, info)
            coll = gating.collapse_metrics(all_outcome, cfg.tau, cfg.reward_low, cfg.reward_high())
            m.update({f"gate/{k}": float(v) for k, v in coll.items() if k in ("acr", "all_wrong_rate", "all_correct_rate")})
            m["reward/mean"] = float(gather_rows(rewards, info).mean())
            m["reward/std"] = float(gather_rows(rewards, info).std(unbiased=False))
            m["reward/correct_frac"] = float(all_correct.float().mean())
            m["reward/unjudged_frac"] = float(gather_rows((~judged).float(), info).mean())
            m["gate/gated_groups"] = int(all_reduce(float(len(groups)), info))
            prm_rows = int(all_reduce(float(len(groups) * G if scorer is not None else 0), info))
            m["gate/prm_completions"] = prm_rows
            m["gate/mc_rollouts"] = int(all_reduce(float(mc_rollouts), info))
            totals["mc_rollouts"] += m["gate/mc_rollouts"]
            if steps_t is not None:
                m["gate/steps_per_gated_response"] = steps_t.steps_per_response()
                m["prm/nan_steps"] = int(all_reduce(float(steps_t.nan_steps), info))
            global_idx = _gather_indices(local_idx, info)
            difficulty.update(global_idx, all_correct.float().mean(dim=1))
            for name, members in difficulty.by_difficulty().items():
                m[f"difficulty/{name}"] = len(members)
            lens = torch.tensor([float(len(c)) for c in ro.completion_ids])
            m["completion/len_mean"] = float(gather_rows(lens, info).mean())
            m["completion/truncated_frac"] = float(gather_rows(torch.tensor(ro.truncated, dtype=torch.float32), info).mean())

            # 9. evaluate, log, checkpoint
            t_eval = 0.0
            if eval_ids and (step == cfg.steps or (cfg.eval_interval and step % cfg.eval_interval == 0)):
                t1 = time.perf_counter()
                last_eval = run_eval()
                last_eval_step = step
                m.update(last_eval.metrics(G))
                t_eval = time.perf_counter() - t1
            tokens = int(all_reduce(float(sampled_tokens), info))
            step_s = time.perf_counter() - t_step
            totals["rollouts"] += int(all_reduce(float(sampled), info))
            totals["completion_tokens"] += tokens
            totals["prm_completions"] += prm_rows
            m.update({
                "time/rollout_s": t_rollout, "time/reward_s": t_reward,
                "time/prm_s": steps_t.seconds if steps_t is not None else 0.0,
                "time/train_s": t_train, "time/eval_s": t_eval, "time/step_s": step_s,
                "throughput/tokens_per_s": tokens / max(step_s - t_eval, 1e-9),
                "train/lr": scheduler.get_last_lr()[0], "train/rollouts_total": totals["rollouts"],
            })
            log.log(step, m)

            stop_now = bool(all_reduce(float(stop.requested), info, op="max"))
            if stop_now or (cfg.checkpoint_interval and step % cfg.checkpoint_interval == 0) or step == cfg.steps:
                state = {"sampler": sampler.state_dict(), "difficulty": difficulty.state_dict(),
                         "eval_before": eval_before and eval_before.to_state(), "totals": totals,
                         "last_eval": last_eval and last_eval.to_state(),
                         "last_eval_step": last_eval_step}
                save_checkpoint(out, step, model, optimizer, scheduler, state, info, tokenizer,
                                cfg.fsdp, cfg.keep_checkpoints)
            if stop_now:
                stopped = "signal"
                log.console(f"stop requested: checkpoint of step {step} written, exiting cleanly")
                break

    log.close()
    rewarder.close()  # its worker processes would otherwise live until garbage collection
    summary = _summary(cfg, out, eval_before, (last_eval, last_eval_step), totals, step, stopped,
                       t_start, info)
    teardown(info)
    return summary


# ------------------------------------------------------------------------------------------------
# The training update


def optimise_policy(cfg: Config, model: torch.nn.Module, ref_model: torch.nn.Module | None,
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


# ------------------------------------------------------------------------------------------------
# Rollout helpers


def _seeds(cfg: Config, step: int, round_: int, global_idx: list[int], info: DistInfo) -> list[int]:
    """Per-prompt sampling seeds of this rank's slice, fixed by (seed, step, round, position)."""
    per = len(global_idx) // info.world_size
    base = (cfg.seed * 1_000_003 + step * 10_007 + round_ * 101) % (2**31 - 1)
    return [(base + (info.rank * per + j) * 7_919) % (2**31 - 1) for j in range(per)]


def _dynamic_sampling(cfg, engine, rewarder, sampler, train_ids, train_refs, ro, scored, local_idx, step, info):
    """DAPO: sample more groups until this step has `n` groups with mixed outcomes (or the cap)."""
    G, n = cfg.group_size, len(local_idx)
    t_rollout = 0.0
    rounds = 0
    while True:
        keep = gating.dynamic_sampling_keep(scored.rewards.view(-1, G))
        short = int(keep.sum()) < n
        if not bool(all_reduce(float(short), info, op="max")) or rounds >= cfg.dynamic_sampling_rounds:
            break
        rounds += 1
        idx = sampler.next_indices(cfg.prompts_per_step)
        more_idx = shard(idx, info)
        more = engine.generate([train_ids[i] for i in more_idx], G, _seeds(cfg, step, rounds, idx, info))
        t_rollout += more.timings["rollout_s"]
        scored = scored.extend(rewarder.score(more.texts, [train_refs[i] for i in more_idx for _ in range(G)]))
        ro.extend(more)
        local_idx = local_idx + more_idx
    keep = gating.dynamic_sampling_keep(scored.rewards.view(-1, G))
    # Keep n groups, informative first; fill with collapsed ones if the cap was hit, so every
    # rank runs the same number of forward passes.
    order = [i for i in range(len(local_idx)) if keep[i]] + [i for i in range(len(local_idx)) if not keep[i]]
    chosen = order[:n]
    rows = [g * G + j for g in chosen for j in range(G)]
    kept = ro.select_groups(chosen, G)
    stats = {"dapo/rounds": rounds, "sampled": len(ro), "sampled_tokens": ro.num_tokens(),
             "dapo/extra_rollouts": int(all_reduce(float(rounds * n * G), info)),
             "dapo/kept_informative": int(all_reduce(float(min(int(keep.sum()), n)), info)),
             "rollout_s": t_rollout}
    return kept, scored.select(rows), [local_idx[i] for i in chosen], stats


def _eval_state(state: dict[str, Any] | None) -> EvalResult | None:
    """An evaluation stored in a checkpoint (None if there is none, or it predates per-prompt results)."""
    if not isinstance(state, dict) or "correct" not in state:
        return None
    return EvalResult.from_state(state)


def _eval_line(metrics: dict[str, Any]) -> str:
    """`pass@1 34.2% +- 1.5 | greedy 60.4% +- 2.2` for the console."""
    line = f"pass@1 {100 * metrics['eval/pass@1']:.1f}% +- {100 * metrics['eval/pass@1_se']:.1f}"
    if metrics.get("eval/greedy") is not None:
        line += f" | greedy {100 * metrics['eval/greedy']:.1f}% +- {100 * metrics['eval/greedy_se']:.1f}"
    return line


# ------------------------------------------------------------------------------------------------
# Set-up helpers


def _quiet_libraries() -> None:
    """Keep the console to our progress bar and step lines (no per-shard load/save bars)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def _make_optimizer(cfg: Config, model: torch.nn.Module) -> torch.optim.Optimizer:
    """AdamW, fused (one kernel for all parameters) where this torch build supports it."""
    kwargs = dict(lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2), weight_decay=cfg.weight_decay)
    params = [p for p in model.parameters() if p.requires_grad]
    plain = all(type(p.data) is torch.Tensor for p in params)  # FSDP2's DTensors use foreach
    if plain:
        try:
            return torch.optim.AdamW(params, fused=True, **kwargs)
        except (RuntimeError, ValueError):
            pass
    return torch.optim.AdamW(params, **kwargs)


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def _build_scorer(cfg: Config, engine, tokenizer, rewarder: OutcomeRewarder, train_set, train_ids, train_refs,
                  options: dict[str, str], device: torch.device, info: DistInfo):
    """The step scorer `cfg.prm` names; `mc:k=K` samples with this run's engine and verifiers."""
    from veristep.train.mc_values import MCStepScorer, is_mc_spec, parse_mc_spec

    if not is_mc_spec(cfg.prm):
        from veristep.prm import load_scorer

        return load_scorer(cfg.prm, device=cfg.prm_device or str(device), **options)
    if info.enabled:
        # Ranks gate different numbers of groups, so their extra generate calls would not line up.
        raise ConfigError(f"prm={cfg.prm!r}: Monte-Carlo step values run in a single process only")
    try:
        opts = parse_mc_spec(cfg.prm)
    except ValueError as err:
        raise ConfigError(f"prm={cfg.prm!r}: {err}") from None
    contexts = {p.text: (ids, refs) for p, ids, refs in zip(train_set, train_ids, train_refs, strict=True)}
    return MCStepScorer(opts["k"], engine, tokenizer, rewarder, contexts, regex=None,
                        low=cfg.reward_low, high=cfg.reward_high(), seed=cfg.seed * 7_919 + opts["seed"],
                        **options)


def _resolve_model(cfg: Config, info: DistInfo) -> str:
    """A local path or hub name for from_pretrained; builds the built-in warm start if asked."""
    if cfg.model != "builtin:warmstart":
        return cfg.model
    from veristep.train.demo import warmstart

    if info.is_main:
        path = warmstart.ensure_warm_start(cfg.warmstart_dir, seed=0)
        print(f"warm start: {path} ({warmstart.describe_checksum(warmstart.load_meta(path))})",
              file=sys.stderr, flush=True)
    if info.enabled:
        torch.distributed.barrier()
        if not info.is_main:
            path = warmstart.ensure_warm_start(cfg.warmstart_dir, seed=0)
    return str(path)


def _load_tokenizer(path: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def _load_model(path: str, dtype: torch.dtype, device: torch.device) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return model.to(device)


def _tokenize_prompts(texts: list[str], tokenizer, cfg: Config) -> list[list[int]]:
    """Token ids of each prompt, left-truncated to max_prompt_len (the question's end matters most)."""
    if not texts:
        return []
    enc = tokenizer(texts, add_special_tokens=not cfg.chat_template)["input_ids"]
    return [list(ids[-cfg.max_prompt_len:]) or [tokenizer.eos_token_id] for ids in enc]


def _lr_lambda(cfg: Config):
    def factor(step: int) -> float:
        if cfg.warmup_steps and step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        span = max(1, cfg.steps - cfg.warmup_steps)
        progress = min(1.0, (step - cfg.warmup_steps) / span)
        if cfg.lr_schedule == "linear":
            return 1.0 - progress
        if cfg.lr_schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0

    return factor


def _global_group(info: DistInfo, cfg: Config, local_group: int) -> int:
    return info.rank * (cfg.prompts_per_step // info.world_size) + local_group


def _gather_indices(items: list[int], info: DistInfo) -> list[int]:
    """This step's prompt indices over all ranks, in rank order."""
    from veristep.train.distributed import gather_objects

    return [i for part in gather_objects(items, info) for i in part]


def _difficulty_state(run_state: dict[str, Any], ckpt: Path) -> dict[str, Any]:
    """The DifficultyTracker state of a checkpoint; checkpoints before the rename call it "pool"."""
    state = run_state.get("difficulty", run_state.get("pool"))
    if not isinstance(state, dict):
        raise ValueError(f"checkpoint {ckpt} holds no prompt difficulty state (key 'difficulty'); "
                         "it was not written by this trainer, or is damaged: start without --resume")
    return state


def _write_config(cfg: Config, out: Path) -> None:
    """The run's fields as given (reloadable with --config), headed by the resolved objective."""
    import yaml

    out.mkdir(parents=True, exist_ok=True)
    resolved = " ".join(f"{k}={v}" for k, v in cfg.loss_settings().to_dict().items())
    header = f"# objective as run (loss preset + explicit fields): {resolved}\n"
    (out / "config.yaml").write_text(header + yaml.safe_dump(cfg.to_dict(), sort_keys=False))


def _summary(cfg: Config, out: Path, before: EvalResult | None, after_at: tuple[EvalResult | None, int],
             totals: dict, step: int, stopped: str | None, t_start: float, info: DistInfo) -> dict[str, Any]:
    """The run's final summary: accuracy before/after with SEs, collapse rate, compute used, paths."""
    after, after_step = after_at
    metrics_path = out / "metrics.jsonl"
    acr = []
    if info.is_main and metrics_path.exists():
        for line in metrics_path.read_text().splitlines():
            v = json.loads(line).get("gate/acr")
            if v is not None:
                acr.append(v)
    ckpt = latest_checkpoint(out)
    ev: dict[str, Any] = {}
    for name, result in (("before", before), ("after", after)):
        m = result.metrics(cfg.group_size) if result else {}
        ev[f"accuracy_{name}"] = m.get("eval/pass@1")
        ev[f"accuracy_{name}_se"] = m.get("eval/pass@1_se")
        ev[f"pass@G_{name}"] = m.get("eval/pass@G")
        ev[f"greedy_{name}"] = m.get("eval/greedy")
        ev[f"greedy_{name}_se"] = m.get("eval/greedy_se")
    # The last evaluation is compared with the one before training only if it came after a
    # step (a run stopped before its first evaluation has nothing to compare).
    diff = compare(before, after) if before and after and after_step > 0 else {}
    summary = {
        "advantage": cfg.advantage, "loss": cfg.loss, "loss_settings": cfg.loss_settings().to_dict(),
        "placebo": cfg.placebo or None, "seed": cfg.seed, "steps": step, "stopped": stopped,
        "accuracy_before": ev["accuracy_before"], "accuracy_after": ev["accuracy_after"],
        "pass@G_before": ev["pass@G_before"], "pass@G_after": ev["pass@G_after"],
        "accuracy_after_step": after_step,
        "eval_prompts": before.prompts if before else 0,
        "eval_samples": before.samples if before else 0,
        "accuracy_before_se": ev["accuracy_before_se"], "accuracy_after_se": ev["accuracy_after_se"],
        "accuracy_diff": diff["pass@1"].mean if diff else None,
        "accuracy_diff_se": diff["pass@1"].se if diff else None,
        "greedy_before": ev["greedy_before"], "greedy_after": ev["greedy_after"],
        "greedy_before_se": ev["greedy_before_se"], "greedy_after_se": ev["greedy_after_se"],
        "greedy_diff": diff["greedy"].mean if diff and diff["greedy"] else None,
        "greedy_diff_se": diff["greedy"].se if diff and diff["greedy"] else None,
        "acr_mean": float(np.mean(acr)) if acr else None,
        "acr_first": acr[0] if acr else None, "acr_last": acr[-1] if acr else None,
        "rollouts": totals["rollouts"], "completion_tokens": totals["completion_tokens"],
        "prm_completions": totals["prm_completions"], "skipped_updates": totals["skipped_updates"],
        "mc_rollouts": totals["mc_rollouts"], "prm": cfg.prm if cfg.advantage in PRM_METHODS else None,
        "credit": cfg.credit if cfg.advantage == "verigate" else None,
        "wall_s": time.perf_counter() - t_start,
        "output_dir": str(out), "metrics_path": str(metrics_path),
        "final_model": str(ckpt / "model") if ckpt else None,
    }
    if info.is_main:
        (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def print_summary(summary: dict[str, Any]) -> None:
    """Print the end-of-run summary as a few lines: each accuracy with its SE, the paired differences."""
    def pct(v, se=None):
        if v is None:
            return "n/a"
        return f"{100 * v:.1f}%" + ("" if se is None else f" +- {100 * se:.1f}")

    def points(v, se):
        return "n/a" if v is None else f"{100 * v:+.1f} +- {100 * se:.1f} points"

    s = summary
    print("\n== veristep gated GRPO: summary ==")
    print(f"advantage {s['advantage']} | loss {s['loss']}" + (f" | placebo {s['placebo']}" if s.get("placebo") else "")
          + f" | {s['steps']} steps | {s['rollouts']} rollouts | {s['wall_s']:.0f} s"
          + (" | stopped by signal" if s["stopped"] else ""))
    if s["eval_prompts"]:
        print(f"held-out: {s['eval_prompts']} prompts x {s['eval_samples']} samples at T=1, plus greedy; "
              "the same seeds before and after; +- is one standard error")
        print(f"  pass@1 (T=1): {pct(s['accuracy_before'], s['accuracy_before_se'])} -> "
              f"{pct(s['accuracy_after'], s['accuracy_after_se'])} | paired difference "
              f"{points(s['accuracy_diff'], s['accuracy_diff_se'])}")
        if s["greedy_before"] is not None:
            print(f"  greedy:       {pct(s['greedy_before'], s['greedy_before_se'])} -> "
                  f"{pct(s['greedy_after'], s['greedy_after_se'])} | paired difference "
                  f"{points(s['greedy_diff'], s['greedy_diff_se'])}")
        print(f"  pass@G: {pct(s['pass@G_before'])} -> {pct(s['pass@G_after'])}")
    print(f"advantage collapse rate (ACR): mean {pct(s['acr_mean'])}, first step "
          f"{pct(s['acr_first'])}, last step {pct(s['acr_last'])}; PRM scored "
          f"{s['prm_completions']} completions")
    print(f"results: {s['output_dir']} (metrics.jsonl, summary.json); model: {s['final_model']}")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    from veristep.verifiers.cli.jsonl_io import run_command

    cfg = parse_args(argv)

    def run() -> int:
        summary = train(cfg)
        if int(os.environ.get("RANK", "0")) == 0:
            print_summary(summary)
        return 0

    return run_command("gated_grpo.py", run)  # the exit codes of `veristep train`: 2 usage, 1 data


if __name__ == "__main__":
    sys.exit(main())

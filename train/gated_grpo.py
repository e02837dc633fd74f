"""GRPO with VeriGate advantage gating, as one readable loop.

    rollout -> rewards -> gate -> PRM on gated groups only -> advantages -> loss -> step -> log

With no arguments it trains a tiny warm-started model on the built-in step-wise arithmetic task
on CPU in a few minutes and prints a summary. On a GPU, point it at your model and data:

    python train/gated_grpo.py --model Qwen/Qwen2.5-1.5B-Instruct --dataset my_math.jsonl \
        --chat-template --rollout vllm --output-dir runs/my_run

Every flag is a field of `veristep.train.config.Config` (`--help` lists them); `--config x.yaml`
loads a YAML file of the same fields. Several GPUs: `torchrun --nproc-per-node 8 train/gated_grpo.py ...`.
This file is the recipe: the loop below, which calls the components of `veristep.train` (run
construction, sampling, advantages, the update, monitors, evaluation, summary) and nothing else
calls it. It is also run as a script, so it imports with absolute names only.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch
from veristep.train.advantages import (
    compute_advantages,
    oracle_credit_metrics,
    prm_groups,
    winner_groups,
)
from veristep.train.checkpoint import StopFlag, save_checkpoint
from veristep.train.config import Config, parse_args
from veristep.train.distributed import all_reduce, setup, teardown
from veristep.train.evaluate import EvalResult, evaluate
from veristep.train.lockstep import check_training
from veristep.train.models import quiet_libraries, seed_everything
from veristep.train.monitors import batch_monitors, prm_monitors, slowest
from veristep.train.online_prm import online_prm_state, update_online_prm
from veristep.train.rewards import gated_step_scores
from veristep.train.run import build_run, resume
from veristep.train.sampling import sample_batch, step_rewards
from veristep.train.summary import (
    eval_line,
    eval_state,
    header_line,
    print_summary,
    summarise,
    write_config,
)
from veristep.train.tracking import STEP_METRICS, MetricsLogger
from veristep.train.update import optimise_policy, policy_inputs


def train(cfg: Config) -> dict[str, Any]:
    """Run a whole training job; return the final summary (also written to summary.json)."""
    cfg.validate()
    quiet_libraries()
    info = setup(cfg.device)
    with ExitStack() as stack:  # on any exit: PRM, verifier workers, metrics file, process group
        stack.callback(teardown, info)
        check_training(cfg.prompts_per_step, cfg.mini_batches, info)  # before any model is loaded
        seed_everything(cfg.seed * 1000 + info.rank)
        out, t_start, G, device = Path(cfg.output_dir), time.perf_counter(), cfg.group_size, info.device

        # ---- models, data, verifiers, PRM, rollout engine; then the last checkpoint if resuming
        run = build_run(cfg, info, stack)
        resume(run, cfg, out, info)
        log = stack.enter_context(MetricsLogger(
            out, enabled=info.is_main, tensorboard=cfg.tensorboard, progress=cfg.progress,
            total_steps=cfg.steps, start_step=run.start_step, log_every=cfg.log_every))
        if info.is_main:
            write_config(cfg, out)
        log.console(header_line(cfg, run, info))

        def run_eval() -> EvalResult | None:
            return evaluate(run.engine, run.eval_ids, run.eval_refs, run.rewarder, cfg.eval_samples or G,
                            cfg.seed, info, cfg.eval_greedy)

        eval_before = eval_state(run.state.get("eval_before"))
        if eval_before is None and run.eval_ids:
            eval_before = run_eval()
            log.console(f"eval before training ({eval_before.seconds:.0f} s): " + eval_line(eval_before.metrics(G)))
        totals = {"rollouts": 0, "completion_tokens": 0, "prm_completions": 0, "skipped_updates": 0,
                  "mc_rollouts": 0, **run.state.get("totals", {})}
        last_eval = eval_state(run.state.get("last_eval")) or eval_before
        last_eval_step = run.state.get("last_eval_step", 0)
        step, stopped = run.start_step, None

        with StopFlag() as stop:
            for step in range(run.start_step + 1, cfg.steps + 1):
                t_step = time.perf_counter()
                m: dict[str, Any] = {k: None for k in STEP_METRICS}

                # 1-2. rollout: G completions for this rank's groups, scored by the verifiers
                b = sample_batch(cfg, run.engine, run.rewarder, run.sampler, run.train_ids, run.train_refs,
                                 step, info)  # dapo: more rounds until enough groups carry signal
                ro, n = b.ro, len(b.prompt_idx)
                m.update(b.metrics)
                # An unjudged completion (checker time-out, sandbox error, bad reference) has no
                # reward: it is left out of the gate, the advantages and the loss, and counted.
                rewards, outcome, correct, judged = step_rewards(cfg, b, step)  # [n, G] each

                # 3. gate: which groups collapsed, and which of them the PRM must score
                groups = prm_groups(cfg, rewards, judged)
                batch, token_mask, keep = policy_inputs(cfg, ro, judged, run.pad_id, device)  # keep: in the loss
                T = batch.completion_ids.shape[1]

                # 4. PRM on the gated groups only (Monte-Carlo values sample: rollouts the budget pays)
                problems = [run.train_set[i].text for i in b.prompt_idx]
                steps_t, mc_rollouts, mc_tokens = gated_step_scores(cfg, run.scorer, run.tokenizer, problems, ro,
                                                                    T, groups, step)
                sampled, sampled_tokens = b.sampled + mc_rollouts, b.sampled_tokens + mc_tokens
                # an implicit PRM then learns from this step's outcomes (PRIME; other scorers: no-op)
                m.update(update_online_prm(run.scorer, problems, ro.texts, outcome, judged))

                # 5. advantages [N, G, T]; the credit diagnostic where an oracle labels the steps
                adv, adv_metrics = compute_advantages(cfg, rewards, token_mask, steps_t, keep, judged, info)
                m.update(adv_metrics)
                if run.oracle is not None:
                    m.update(oracle_credit_metrics(cfg, run.oracle, run.tokenizer, problems, ro.completion_ids,
                                                   ro.texts, rewards, adv, info))

                # 6-7. pi_old / pi_ref log-probs, then the clipped loss over PPO epochs x mini-batches
                t0 = time.perf_counter()
                first_group = info.rank * (cfg.prompts_per_step // info.world_size)
                group_of_row = first_group + torch.arange(n * G) // G  # the mini-batch key
                m.update(optimise_policy(cfg, run.model, run.ref_model, run.optimizer, batch, ro,
                                         adv.view(n * G, T).to(device), group_of_row, winner_groups(adv),
                                         run.loss, info))
                run.scheduler.step()
                run.engine.update_weights(run.model)
                run.engine.sleep()
                t_train = time.perf_counter() - t0
                totals["skipped_updates"] += int(m["train/skipped_updates"])

                # 8. monitors over every rank's groups, prompt difficulty
                m.update(batch_monitors(cfg, info, rewards, outcome, correct, judged, ro.completion_ids,
                                        ro.truncated, b.prompt_idx, run.difficulty))
                m.update(prm_monitors(groups, G, run.scorer is not None, steps_t, mc_rollouts, info))
                totals["mc_rollouts"] += m["gate/mc_rollouts"]

                # 9. evaluate, log, checkpoint
                t_eval = 0.0
                if run.eval_ids and (step == cfg.steps or (cfg.eval_interval and step % cfg.eval_interval == 0)):
                    t1 = time.perf_counter()
                    last_eval, last_eval_step = run_eval(), step
                    m.update(last_eval.metrics(G))
                    t_eval = time.perf_counter() - t1
                tokens = int(all_reduce(float(sampled_tokens), info))
                totals["rollouts"] += int(all_reduce(float(sampled), info))
                totals["completion_tokens"] += tokens
                totals["prm_completions"] += m["gate/prm_completions"]
                m.update(slowest({"time/rollout_s": b.rollout_s, "time/reward_s": b.scored.seconds,
                                  "time/prm_s": steps_t.seconds if steps_t is not None else 0.0,
                                  "time/train_s": t_train, "time/eval_s": t_eval,
                                  "time/step_s": time.perf_counter() - t_step}, info))
                m["throughput/tokens_per_s"] = tokens / max(m["time/step_s"] - m["time/eval_s"], 1e-9)
                m.update({"train/lr": run.scheduler.get_last_lr()[0], "train/rollouts_total": totals["rollouts"]})
                log.log(step, m)

                stop_now = bool(all_reduce(float(stop.requested), info, op="max"))
                if stop_now or (cfg.checkpoint_interval and step % cfg.checkpoint_interval == 0) or step == cfg.steps:
                    state = {"sampler": run.sampler.state_dict(), "difficulty": run.difficulty.state_dict(),
                             "eval_before": eval_before and eval_before.to_state(), "totals": totals,
                             "last_eval": last_eval and last_eval.to_state(), "last_eval_step": last_eval_step,
                             **online_prm_state(run.scorer)}
                    save_checkpoint(out, step, run.model, run.optimizer, run.scheduler, state, info, run.tokenizer,
                                    cfg.fsdp, cfg.keep_checkpoints)
                if stop_now:
                    stopped = "signal"
                    log.console(f"stop requested: checkpoint of step {step} written, exiting cleanly")
                    break

        log.close()
        return summarise(cfg, out, eval_before, (last_eval, last_eval_step), totals, step, stopped, t_start, info)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    from veristep.common.jsonl_io import run_command

    cfg = parse_args(argv)

    def run() -> int:
        summary = train(cfg)
        if int(os.environ.get("RANK", "0")) == 0:
            print_summary(summary)
        return 0

    return run_command("gated_grpo.py", run)  # the exit codes of `veristep train`: 2 usage, 1 data


if __name__ == "__main__":
    sys.exit(main())

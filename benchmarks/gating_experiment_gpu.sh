#!/usr/bin/env bash
# GPU scale-up of benchmarks/gating_experiment.py: PREPARED, NOT YET RUN (no GPU was available
# when it was written; its run time, the warm start's accuracy and every result are unmeasured).
#
# On one GPU: builds a larger warm start of the same task (4x the width-depth product of the CPU
# one: hidden 256, 3 layers; built on the machine's CPUs, 16 threads, native ISA, so its weights
# are machine-bound) and runs the core arms at 10x the CPU rollout budget per run (G = 4 x 160
# prompts x 150 steps = 96,000 rollouts), 3 paired seeds, 1,000 held-out prompts, 4 runs at a time.
# Target: within 10 minutes on one H200-class GPU after the warm start; if it overruns, lower
# --seeds or --prompts-per-step and record what ran. Results go beside the CPU ones:
# benchmarks/results/gating_experiment_gpu.json / .png.
#
# CONDITION=chain8 runs the step-credit condition instead (docs/experiment.md): its own warm start
# (the chain8 recipe, built on the machine's CPUs with 16 threads), the CPU design's arms and its
# learning-rate follow-ups (GRPO at 2.62x and 3.3x, step credit at 2.62x) at the CPU budget per run (50 steps x 16 prompts x 4), 6 paired seeds for every arm, 1,000 held-out
# prompts: the full-seed replication the CPU session could not afford.
#
#   bash benchmarks/gating_experiment_gpu.sh                     # from the repository root, venv active
#   CONDITION=chain8 bash benchmarks/gating_experiment_gpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
nvidia-smi -L >/dev/null 2>&1 || { echo "no GPU visible (nvidia-smi): this script is for a GPU machine" >&2; exit 2; }
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
if [ "${CONDITION:-medium}" = chain8 ]; then
exec "$PYTHON" benchmarks/gating_experiment.py \
    --condition chain8 --device cuda \
    --warmstart-dir runs/warmstart-chain8-gpu \
    --warmstart-recipe '{"levels": ["chain8"], "demos_per_level": 5000, "step_error_rate": 0.3,
                         "train_steps": 1000, "max_new_tokens": 180, "threads": 16, "isa": "native"}' \
    --arms grpo,grpo@lr2.62,grpo@lr3.3,oracle_prefix,oracle_prefix@lr2.62,placebo_prefix,rule_prefix,rule_prefix@lr2.62 \
    --extra-arms implicit_prefix@lr2.62,oracle_blame,grpo_lr,mc \
    --seeds 6 --extra-seeds 6 --grpo-lr-scale 1.62 \
    --steps 50 --eval-size 1000 --eval-interval 25 --set eval_greedy=false \
    --jobs 8 --runs-dir runs/gating_experiment_chain8_gpu \
    --results benchmarks/results/gating_experiment_chain8_gpu \
    "$@"
fi
exec "$PYTHON" benchmarks/gating_experiment.py \
    --device cuda \
    --warmstart-dir runs/warmstart-gpu \
    --warmstart-recipe '{"hidden_size": 256, "num_layers": 3, "num_heads": 4, "num_kv_heads": 2,
                         "intermediate_size": 768, "train_steps": 600, "batch_size": 128,
                         "threads": 16, "isa": "native"}' \
    --arms grpo,suffix,progress,placebo,mc --extra-arms oracle,oracle_eps0.2 \
    --seeds 3 --extra-seeds 3 \
    --prompts-per-step 160 --eval-size 1000 --eval-interval 25 \
    --set rollout_batch_prompts=0 --set micro_batch_size=320 \
    --jobs 4 --runs-dir runs/gating_experiment_gpu \
    --results benchmarks/results/gating_experiment_gpu \
    "$@"

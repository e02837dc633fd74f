"""Two gloo processes under torchrun, DDP and FSDP2: the lockstep rules hold (uneven evaluation,
mini-batches, rollout chunks, refusals), and the run takes the same update and logs the same
metrics as one process on the same rollouts."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from veristep.train.distributed import DistInfo
from veristep.train.lockstep import LockstepError, check_training, even_shard, refuse_multi_process
from veristep.train.tracking import STEP_METRICS, read_metrics

HERE = Path(__file__).resolve().parent
#: Metrics that measure this machine, not the run: they may differ between two runs.
_CLOCK = ("time/", "throughput/")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(cfg: dict, out: Path, nproc: int) -> subprocess.CompletedProcess:
    cfg = dict(cfg, output_dir=str(out))
    cfg_path = out.with_suffix(".json")
    cfg_path.write_text(json.dumps(cfg))
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
           "--master-addr=127.0.0.1", f"--master-port={_free_port()}", str(HERE / "dist_run.py"),
           str(cfg_path)]
    # generous: two processes share a loaded machine; a hang (the bug these tests catch) times out
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=420)


def _run(cfg: dict, out: Path, nproc: int) -> Path:
    if nproc == 1:  # in-process: saves a Python start-up
        from veristep.train.config import make_config
        from veristep.train.gated_grpo import train

        train(make_config(**dict(cfg, output_dir=str(out))))
        return out
    proc = _torchrun(cfg, out, nproc)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


def _final_weights(out: Path) -> dict[str, torch.Tensor]:
    summary = json.loads((out / "summary.json").read_text())
    return load_file(str(Path(summary["final_model"]) / "model.safetensors"))


def _assert_same_metrics(rows1: list[dict], rows2: list[dict]) -> None:
    """Every logged metric but the clock's agrees (floats to reduction-order rounding)."""
    assert [r["step"] for r in rows1] == [r["step"] for r in rows2]
    for r1, r2 in zip(rows1, rows2, strict=True):
        assert set(r1) == set(r2) == {"step", *STEP_METRICS}
        for k in STEP_METRICS:
            if k.startswith(_CLOCK):
                continue
            a, b = r1[k], r2[k]
            if isinstance(a, float) or isinstance(b, float):
                assert a is not None and b is not None, (r1["step"], k, a, b)
                assert math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6), (r1["step"], k, a, b)
            else:
                assert a == b, (r1["step"], k, a, b)


# ---- the rules, one by one, without processes


@pytest.mark.parametrize(("n", "world"), [(3, 2), (4, 2), (1, 2), (5, 4), (0, 2), (7, 1)])
def test_even_shard_covers_every_item_once_with_equal_lengths(n, world):
    shards = [even_shard(n, DistInfo(rank=r, world_size=world)) for r in range(world)]
    assert len({len(items) for items, _ in shards}) == 1  # every rank makes the same calls
    real = sorted(i for items, k in shards for i in items[:k])
    assert real == list(range(n))  # the padding is dropped, nothing is lost or doubled


@pytest.mark.parametrize(("prompts", "mini_batches", "world", "field"), [
    (6, 1, 4, "prompts_per_step"), (8, 3, 2, "mini_batches"), (2, 2, 2, "mini_batches")])
def test_training_rule_refuses_uneven_splits_naming_the_field(prompts, mini_batches, world, field):
    with pytest.raises(LockstepError, match=f"^{field}="):
        check_training(prompts, mini_batches, DistInfo(world_size=world))


def test_single_process_settings_refuse_only_under_several_processes():
    refuse_multi_process(DistInfo(), "prm='mc'", "why")
    with pytest.raises(LockstepError, match="prm='mc': runs in a single process only"):
        refuse_multi_process(DistInfo(world_size=2), "prm='mc'", "why")


# ---- two gloo processes


@pytest.fixture(scope="module")
def arith_config(tiny_model_dir) -> dict:
    """The built-in task (so the credit diagnostic runs), every rule exercised in two steps:
    3 held-out prompts over 2 processes (uneven), 2 PPO epochs x 2 mini-batches of micro-batches
    of one sequence, one prompt per generate call, samples that do not depend on the batch."""
    return dict(
        model=str(tiny_model_dir), dataset="builtin:arith:level=easy", train_size=32, eval_size=3,
        verifier=f"{HERE / 'trainer_verifiers.py'}:FirstCharHalfVerifier",  # mixed and all-wrong groups
        eval_samples=2, eval_interval=1, prm="rule", advantage="verigate", steps=2, group_size=2,
        prompts_per_step=4, max_prompt_len=48, max_completion_len=8, lr=1e-2, checkpoint_interval=0,
        progress=False, seed=0, reproducible_rollouts=True, rollout_batch_prompts=1,
        ppo_epochs=2, mini_batches=2, micro_batch_size=1)


@pytest.fixture(scope="module")
def one_process(arith_config, tmp_path_factory) -> Path:
    """The reference: the same configuration in one process."""
    return _run(arith_config, tmp_path_factory.mktemp("one") / "run", 1)


@pytest.mark.parametrize("fsdp", [False, True], ids=["ddp", "fsdp2"])
def test_two_processes_with_uneven_eval_log_what_one_process_logs(arith_config, one_process, fsdp, tmp_path):
    two = _run(dict(arith_config, fsdp=fsdp), tmp_path / "two", 2)
    rows1, rows2 = read_metrics(one_process / "metrics.jsonl"), read_metrics(two / "metrics.jsonl")
    _assert_same_metrics(rows1, rows2)
    assert all(r["train/updates"] == 4 and r["loss/ratio_dev"] > 0 for r in rows2)  # the policy moved
    assert any(r["gate/gated_groups"] for r in rows2)  # the PRM scored gated groups
    assert any(r["gate/first_error_responses"] for r in rows2)  # the credit diagnostic measured
    s1, s2 = (json.loads((d / "summary.json").read_text()) for d in (one_process, two))
    assert s1["eval_prompts"] == s2["eval_prompts"] == 3
    for key in ("accuracy_before", "accuracy_after", "greedy_before", "greedy_after", "pass@k_after"):
        assert s1[key] == s2[key], key
    w1, w2 = _final_weights(one_process), _final_weights(two)
    for k in w1:
        torch.testing.assert_close(w1[k], w2[k], atol=1e-5, rtol=1e-4, msg=k)


def test_unjudged_completions_under_two_processes_log_what_one_process_logs(arith_config, tmp_path):
    # The collapse, reward and difficulty monitors gather each rank's judged mask with its rows.
    cfg = dict(arith_config, advantage="grpo", prm="",
               verifier=f"{HERE / 'trainer_verifiers.py'}:HalfOrTimeOutVerifier")
    rows1 = read_metrics(_run(cfg, tmp_path / "one", 1) / "metrics.jsonl")
    rows2 = read_metrics(_run(cfg, tmp_path / "two", 2) / "metrics.jsonl")
    _assert_same_metrics(rows1, rows2)
    assert any(r["reward/unjudged_frac"] > 0 for r in rows2)


def test_dapo_with_unjudged_completions_under_two_processes_logs_what_one_process_logs(arith_config, tmp_path):
    # Partly judged groups (checker time-outs) under DAPO: the ranks count informative groups
    # together, take the same extra rounds, and keep the groups one process keeps (a kept group
    # may move to another rank). Before, each rank kept its share from its own candidates, and
    # `loss/policy` differed from one process from the first step.
    cfg = dict(arith_config, advantage="dapo", prm="", dynamic_sampling_rounds=1,
               verifier=f"{HERE / 'trainer_verifiers.py'}:HalfOrTimeOutVerifier")
    one = _run(cfg, tmp_path / "one", 1)
    two = _run(cfg, tmp_path / "two", 2)
    rows1, rows2 = read_metrics(one / "metrics.jsonl"), read_metrics(two / "metrics.jsonl")
    _assert_same_metrics(rows1, rows2)
    assert any(r["dapo/rounds"] > 0 for r in rows2)  # the extra rounds and the pooled choice ran
    assert any(r["reward/unjudged_frac"] > 0 for r in rows2)  # the partly judged path ran
    assert all(r["train/updates"] == 4 for r in rows2)
    w1, w2 = _final_weights(one), _final_weights(two)
    for k in w1:
        torch.testing.assert_close(w1[k], w2[k], atol=1e-5, rtol=1e-4, msg=k)


def test_monte_carlo_values_are_refused_under_two_processes(arith_config, tmp_path):
    """Refused with a message on every rank, not a hang in the continuation calls."""
    proc = _torchrun(dict(arith_config, prm="mc:k=2", credit="delta", steps=1), tmp_path / "mc", 2)
    assert proc.returncode != 0
    assert "runs in a single process only" in proc.stderr


def test_ddp_matches_one_process_on_first_character_data(small_config, tmp_path):
    """A mixed-reward task (GRPO gets signal); the update equals the single-process one."""
    cfg = dict(small_config, prompts_per_step=4, steps=2, reproducible_rollouts=True, advantage="grpo",
               eval_size=4, eval_interval=2, checkpoint_interval=0)
    one = _run(cfg, tmp_path / "one", 1)
    two = _run(cfg, tmp_path / "two", 2)
    _assert_same_metrics(read_metrics(one / "metrics.jsonl"), read_metrics(two / "metrics.jsonl"))
    w1, w2 = _final_weights(one), _final_weights(two)
    base = load_file(str(next(Path(small_config["model"]).glob("*.safetensors"))))
    assert any(float((w1[k] - base[k]).abs().max()) > 0 for k in w1)  # the update did something
    for k in w1:
        torch.testing.assert_close(w1[k], w2[k], atol=1e-5, rtol=1e-4, msg=k)


@pytest.mark.slow  # four processes on a small machine: about two minutes
def test_four_processes_with_fewer_eval_prompts_than_processes_log_what_one_process_logs(
        arith_config, tmp_path):
    """3 held-out prompts on 4 processes: one process evaluates only padding."""
    cfg = dict(arith_config, prompts_per_step=8, mini_batches=1, micro_batch_size=0)
    one = _run(cfg, tmp_path / "one", 1)
    four = _run(cfg, tmp_path / "four", 4)
    _assert_same_metrics(read_metrics(one / "metrics.jsonl"), read_metrics(four / "metrics.jsonl"))



_COLLECTIVES = """
import json, sys
import torch
from veristep.train.distributed import gather_padded, setup, teardown
from veristep.train.lockstep import LockstepError, require_same_count

info = setup("cpu")
result = {}
require_same_count(3, info, "prompts")  # equal: passes
try:
    require_same_count(info.rank + 1, info, "prompts")
    result["refused"] = False
except LockstepError as err:
    result["refused"] = "between 1 and 2" in str(err)
t = torch.full((1, info.rank + 1, 2 - info.rank), float(info.rank + 1))  # both later dims differ
result["gathered"] = gather_padded(t, info, fill=-1.0).tolist()
teardown(info)
# one file per rank: two ranks printing to a shared stdout can interleave their lines
with open(f"{sys.argv[1]}/rank{info.rank}.json", "w") as f:
    json.dump(result, f)
"""


def test_lockstep_check_and_padded_gather_on_two_gloo_ranks(tmp_path):
    script = tmp_path / "collectives.py"
    script.write_text(_COLLECTIVES)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--master-addr=127.0.0.1",
           f"--master-port={_free_port()}", str(script), str(tmp_path)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("rank*.json"))]
    assert len(results) == 2 and all(r["refused"] for r in results)  # every rank refuses, none hangs
    expected = [[[1.0, 1.0], [-1.0, -1.0]], [[2.0, -1.0], [2.0, -1.0]]]
    assert all(r["gathered"] == expected for r in results)


def test_dapo_keeps_the_groups_one_process_keeps_from_every_ranks_candidates():
    from veristep.train.sampling import kept_groups

    # 2 ranks x 2 groups, 2 rounds. One process reads them round by round in global order:
    # [F T F F | T F F T] -> informative 1, 4, 7, then collapsed 0 fills the fourth place.
    keep = torch.tensor([[False, True, True, False], [False, False, False, True]])
    chosen = kept_groups(keep, 2)
    assert chosen == [(0, 1), (0, 2), (1, 3), (0, 0)]  # rank 1 trains (1, 3) and rank 0's (0, 0)
    one = kept_groups(torch.tensor([[False, True, False, False, True, False, False, True]]), 4)
    assert [i for _, i in one] == [1, 4, 7, 0]
    assert kept_groups(torch.ones(1, 3, dtype=torch.bool), 3) == [(0, 0), (0, 1), (0, 2)]

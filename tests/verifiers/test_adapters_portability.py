"""The adapters travel: loaded by file path or package path, pickled (pickle, cloudpickle), run in
a process pool the caller starts (fork, spawn, forkserver) and in Ray actors."""

from __future__ import annotations

import concurrent.futures as cf
import importlib.util
import multiprocessing
import os
import pickle
import uuid

import pytest
import veristep.verifiers.adapters as adapters

MATH_CASES = [("so \\boxed{72}", "72", 1.0), ("so \\boxed{71}", "72", 0.0), ("\\boxed{(x+1)^2}", "x^2+2x+1", 1.0)]


def _load_by_path():
    """Load adapters.py as verl's custom_reward_function.path does: a fresh module name."""
    name = f"custom_module_{uuid.uuid4().hex}"
    spec = importlib.util.spec_from_file_location(name, adapters.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _picklers():
    yield pickle.dumps, pickle.loads
    cloudpickle = pytest.importorskip("cloudpickle")
    yield cloudpickle.dumps, pickle.loads


def test_loaded_by_file_path_hands_out_the_package_objects():
    module = _load_by_path()
    assert module.compute_score is adapters.compute_score
    assert module.compute_score_batch is adapters.compute_score_batch
    assert module.trl_reward_func is adapters.trl_reward_func


@pytest.mark.parametrize("loaded", ["file", "package"])
def test_entry_points_and_reward_objects_pickle_both_ways(loaded):
    module = _load_by_path() if loaded == "file" else adapters
    trl = module.trl_reward_func("math")
    trl(["\\boxed{1}"], answer=["1"])  # live worker processes must not travel
    scorer = module.VerlScorer({"math": {"timeout": 5}})
    scorer("openai/gsm8k", "\\boxed{1}", "1")
    for dumps, loads in _picklers():
        assert loads(dumps(module.compute_score)) is adapters.compute_score
        assert loads(dumps(trl))(["\\boxed{2}", "\\boxed{3}"], answer=["2", "2"]) == [1.0, 0.0]
        copy = loads(dumps(scorer))
        assert copy.configs == {"math": {"timeout": 5}}
        assert copy("openai/gsm8k", "\\boxed{1}", "1")[0] == 1.0
    trl.verifier.close()
    scorer.close()


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_work_from_a_process_pool_the_caller_starts(method):
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {method} start method here")
    by_path = _load_by_path()
    trl = adapters.trl_reward_func("math")
    ctx = multiprocessing.get_context(method)
    # only the adapters' own objects travel: a spawned child cannot import this test module
    with cf.ProcessPoolExecutor(2, mp_context=ctx) as pool:
        verl = [pool.submit(by_path.compute_score, "openai/gsm8k", text, truth) for text, truth, _ in MATH_CASES]
        trl_rewards = [pool.submit(trl, [text], answer=[truth]) for text, truth, _ in MATH_CASES]
        scores = [f.result(timeout=300)["score"] for f in verl]
        rewards = [f.result(timeout=300)[0] for f in trl_rewards]
    assert scores == rewards == [c[2] for c in MATH_CASES]


def _score_in_child(fn, case):
    text, truth, _ = case
    return fn("openai/gsm8k", text, truth)["score"]


def test_work_from_a_daemonic_multiprocessing_pool():
    """multiprocessing.Pool workers are daemonic and may not start Process children."""
    with multiprocessing.get_context("fork").Pool(2) as pool:
        scores = pool.starmap(_score_in_child, [(adapters.compute_score, c) for c in MATH_CASES])
    assert scores == [c[2] for c in MATH_CASES]


@pytest.mark.slow
def test_work_from_ray_actors():
    if os.environ.get("VERISTEP_REQUIRE_RAY") != "1":
        pytest.importorskip("ray")
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        by_path = _load_by_path()

        # defined here so that Ray sends them by value (the tests are not importable there)
        @ray.remote
        class Scorer:
            def __init__(self, fn):
                self.fn = fn

            def score(self, text, truth):
                return self.fn("openai/gsm8k", text, truth)["score"]

        def score(fn, text, truth):
            return fn("openai/gsm8k", text, truth)["score"]

        actors = [Scorer.remote(by_path.compute_score) for _ in range(2)]
        refs = [actors[i % 2].score.remote(t, g) for i, (t, g, _) in enumerate(MATH_CASES)]
        assert ray.get(refs, timeout=300) == [c[2] for c in MATH_CASES]
        remote = ray.remote(score)
        refs = [remote.remote(by_path.compute_score, t, g) for t, g, _ in MATH_CASES]
        assert ray.get(refs, timeout=300) == [c[2] for c in MATH_CASES]
    finally:
        ray.shutdown()

"""`veristep.client` against a real server: results, retries, deadlines; the adapters' remote mode."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import socket
import threading
import time
import warnings
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")

from veristep.verifiers import get_verifier  # noqa: E402
from veristep.verifiers.adapters import compute_score_batch, trl_reward_func  # noqa: E402
from veristep.verifiers.async_adapters import async_trl_reward_func  # noqa: E402

from veristep.client import (  # noqa: E402
    AsyncVeristepClient,
    RemoteVerifier,
    ServeError,
    VeristepClient,
)

COMPLETIONS = ["\\boxed{42}", "\\boxed{\\frac{1}{2}}", "\\boxed{7}", "no answer", "\\boxed{5}"]
REFERENCES = ["42", "0.5", "8", "3", None]


def _key(r):
    return (r.status, r.reward, r.judged, r.correct, r.extracted)


def test_client_results_match_the_local_verifier(server):
    local = get_verifier("math", workers=1)
    try:
        expected = [_key(r) for r in local.verify_batch(COMPLETIONS, REFERENCES)]
    finally:
        local.close()
    with VeristepClient(server.url, chunk=2) as client:  # 3 requests for 5 items
        assert [_key(r) for r in client.verify(COMPLETIONS, REFERENCES, kind="math")] == expected
        assert client.get("/ready").status_code == 200

    async def run():
        async with AsyncVeristepClient(server.url, chunk=2) as client:
            return await client.verify(COMPLETIONS, REFERENCES)

    assert [_key(r) for r in asyncio.run(run())] == expected
    # rewards of one run come from one configuration: another one is refused, not mixed in
    with VeristepClient(server.url, expect_config="0" * 16) as client:
        with pytest.raises(ServeError, match="changed under this client"):
            client.verify(COMPLETIONS[:1], REFERENCES[:1])


def test_a_4xx_is_not_retried_and_a_dead_server_fails_by_the_deadline(server):
    with VeristepClient(server.url) as client:
        start = time.monotonic()
        with pytest.raises(ServeError, match="unknown kind 'nope'") as info:
            client.verify(["x"], ["1"], kind="nope")
        assert info.value.status == 404 and time.monotonic() - start < 5
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    with VeristepClient(f"http://127.0.0.1:{port}", deadline=2.0, backoff=0.1) as client:
        start = time.monotonic()
        with pytest.raises(ServeError, match=r"after [2-9]\d* attempts"):
            client.verify(["x"], ["1"])
        assert time.monotonic() - start < 10


def test_429_is_retried_after_retry_after(start_server):
    srv = start_server("code", "--workers", "1", "--max-queue", "2", "--set", "timeout=20")
    sleepy = {"completion": "```python\nimport time\ntime.sleep(2)\nprint(1)\n```", "language": "python",
              "tests": [{"stdin": "", "stdout": "1\n"}]}
    busy = threading.Thread(target=lambda: httpx.post(srv.url + "/v1/verify", json={"rows": [sleepy, sleepy]},
                                                      timeout=120))
    busy.start()
    for _ in range(600):
        if "veristep_queue_depth 2.0" in httpx.get(srv.url + "/metrics").text:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the server never held the slow request")
    quick = {"completion": "```python\nprint(1)\n```", "language": "python", "tests": [{"stdin": "", "stdout": "1\n"}]}
    with VeristepClient(srv.url, backoff=0.2) as client:
        rows = client.verify_rows([quick])
    busy.join(120)
    assert rows[0]["veristep"]["status"] == "correct"
    assert 'veristep_requests_total{code="429",endpoint="verify"}' in httpx.get(srv.url + "/metrics").text


def test_trl_remote_mode_scores_like_local(server):
    answers = ["4", "4", None]
    completions = ["\\boxed{4}", [{"role": "assistant", "content": "\\boxed{5}"}], "\\boxed{1}"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        local = trl_reward_func("math", workers=1)(completions, answer=answers, prompts=["p"] * 3)
        remote = trl_reward_func("math", remote=server.url)
        assert remote(completions, answer=answers, prompts=["p"] * 3) == local == [1.0, 0.0, None]
        assert remote.unjudged_counts == {"bad_reference": 1}
        again = pickle.loads(pickle.dumps(remote))  # sent to a reward worker: no pools, just the URL
        assert again(completions, answer=answers) == local
        f = async_trl_reward_func("math", remote=server.url, reference_column="gold")
        assert asyncio.run(f(completions, gold=answers)) == local
    with pytest.raises(ValueError, match="no config"):
        trl_reward_func("math", remote=server.url, timeout=3)
    assert isinstance(remote.verifier, RemoteVerifier)


def test_verl_remote_mode_and_reward_loop(server):
    if os.environ.get("VERISTEP_REQUIRE_VERL") != "1":
        pytest.importorskip("verl")
        pytest.importorskip("hydra")
    rows = [("openai/gsm8k", "so \\boxed{72}", "72"), ("openai/gsm8k", "\\boxed{71}", "72"),
            ("tools", '<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>', '[{"name": "f", "arguments": {"x": 1}}]'),
            ("tools", '<tool_call>{"name": "f", "arguments": {}}</tool_call>', '{"expected": "not a list"}')]
    args = ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        local = compute_score_batch(*args)
        remote = compute_score_batch(*args, veristep_remote=server.url)
    assert [dict(r) for r in remote] == [dict(r) for r in local]
    assert [r["status"] for r in remote] == ["correct", "wrong", "correct", "bad_reference"]

    outputs, before = _verl_reward_loop(server, rows, "naive")
    assert [o["reward_score"] for o in outputs] == [1.0, 0.0, 1.0, 0.0]
    assert [o["reward_extra_info"]["status"] for o in outputs] == ["correct", "wrong", "correct", "bad_reference"]
    assert _served(server, "tools", "correct") == before + 1  # the server judged it


@pytest.mark.slow
def test_verl_remote_manager_ray_actors_score_on_the_server(server):
    """verl's `remote` reward-loop manager: Ray actors call compute_score, which asks the server."""
    if os.environ.get("VERISTEP_REQUIRE_VERL") != "1":
        pytest.importorskip("verl")
        pytest.importorskip("hydra")
    import ray

    rows = [("openai/gsm8k", "so \\boxed{72}", "72"), ("openai/gsm8k", "\\boxed{71}", "72")]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        before = _served(server, "math", "correct")
        outputs, _ = _verl_reward_loop(server, rows, "remote", "reward.num_workers=1")
    finally:
        ray.shutdown()
    assert [o["reward_score"] for o in outputs] == [1.0, 0.0]
    assert [o["reward_extra_info"]["status"] for o in outputs] == ["correct", "wrong"]
    assert _served(server, "math", "correct") == before + 1


def _verl_reward_loop(server, rows, manager: str, *overrides: str):
    """Score rows with verl's own reward-loop `manager`, configured the documented way with
    `veristep_remote`; the outputs and the server's tools/correct count before scoring."""
    import numpy as np
    import torch
    import veristep.verifiers.adapters as adapters
    import verl.trainer.config as verl_config
    from hydra import compose, initialize_config_dir
    from veristep.train.demo.tiny import build_char_tokenizer
    from verl import DataProto
    from verl.trainer.ppo.reward import get_custom_reward_fn, resolve_reward_manager_cls

    with initialize_config_dir(config_dir=str(Path(verl_config.__file__).parent), version_base=None):
        config = compose(config_name="ppo_trainer", overrides=[
            f"reward.custom_reward_function.path={Path(adapters.__file__)}",
            f"reward.reward_manager.name={manager}",
            f"+reward.custom_reward_function.reward_kwargs.veristep_remote={json.dumps(server.url)}",
            *overrides,
        ])
    tokenizer = build_char_tokenizer()
    n, plen, rlen = len(rows), 4, 96
    prompts = torch.full((n, plen), tokenizer.pad_token_id, dtype=torch.long)
    responses = torch.full((n, rlen), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((n, plen + rlen), dtype=torch.long)
    for i, (_, text, _) in enumerate(rows):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"][:rlen]
        prompts[i, -1] = tokenizer.pad_token_id + 1
        mask[i, plen - 1] = 1
        responses[i, : len(ids)] = torch.tensor(ids)
        mask[i, plen : plen + len(ids)] = 1
    data = DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "attention_mask": mask,
                 "input_ids": torch.cat([prompts, responses], dim=1)},
        non_tensors={"data_source": np.array([r[0] for r in rows], dtype=object),
                     "reward_model": np.array([{"ground_truth": r[2], "style": "rule"} for r in rows], dtype=object),
                     "extra_info": np.array([{"index": i} for i in range(n)], dtype=object)},
    )
    rm = resolve_reward_manager_cls(config)(config, tokenizer, get_custom_reward_fn(config))
    before = _served(server, "tools", "correct")

    async def score_all():
        return await asyncio.gather(*(rm.run_single(data[i : i + 1]) for i in range(n)))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return rm.loop.run_until_complete(score_all()), before


def _served(server, kind: str, status: str) -> float:
    """How many items of `kind` the server answered with `status` so far (its /metrics)."""
    key = f'veristep_items_total{{kind="{kind}",status="{status}"}} '
    for line in httpx.get(server.url + "/metrics").text.splitlines():
        if line.startswith(key):
            return float(line[len(key):])
    return 0.0

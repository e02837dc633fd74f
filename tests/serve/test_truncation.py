"""Cut-off completions (issue 31) on every served surface: native rows, /get_reward, /slime,
the client, TRL's async function and slime's in-process RM. A cut-off completion whose answer
is found only by loose extraction (its last number) is `no_answer`, not rewarded."""

from __future__ import annotations

import asyncio
import json
import warnings
from types import SimpleNamespace

import pytest

httpx = pytest.importorskip("httpx")

from veristep.verifiers import get_verifier  # noqa: E402
from veristep.verifiers.async_adapters import (  # noqa: E402
    async_trl_reward_func,
    slime_rm,
    slime_sample_cut,
)
from veristep.verifiers.core.text import is_truncated, mark_truncated  # noqa: E402

from veristep.client import AsyncVeristepClient, RemoteVerifier, VeristepClient, row_of  # noqa: E402

#: Scores 1.0 from its last number when whole; `no_answer` when marked as cut off.
CUT = "She sold 40 on Monday and 32 on Tuesday, 40 + 32 = 72, so in total she sol"
BOXED_CUT = "so the answer is \\boxed{72} and then we"  # a marked answer counts even when cut off


def _statuses(rows):
    return [row["veristep"]["status"] for row in rows]


def test_native_rows_read_the_flag_as_veristep_verify_does(server):
    rows = [{"completion": CUT, "answer": "72"},
            {"completion": CUT, "answer": "72", "truncated": True},
            {"completion": CUT, "answer": "72", "finish_reason": "length"},
            {"completion": CUT, "answer": "72", "truncated": False, "finish_reason": "stop"},
            {"completion": [{"role": "assistant", "content": CUT, "finish_reason": "length"}], "answer": "72"},
            {"completion": BOXED_CUT, "answer": "72", "truncated": True}]
    expected = ["correct", "no_answer", "no_answer", "correct", "no_answer", "correct"]
    r = httpx.post(server.url + "/v1/verify", json={"rows": rows}, timeout=120)
    assert r.status_code == 200, r.text
    assert _statuses(r.json()["rows"]) == expected
    assert "truncated" in r.json()["rows"][1]["veristep"]["detail"]
    r = httpx.post(server.url + "/v1/verify/math", content="".join(json.dumps(row) + "\n" for row in rows),
                   headers={"content-type": "application/x-ndjson"}, timeout=120)
    assert _statuses(json.loads(line) for line in r.text.splitlines()) == expected


def test_get_reward_takes_a_truncated_column(server):
    body = {"query": ["Q" + CUT] * 3 + ["Q" + BOXED_CUT], "prompts": ["Q"] * 4, "labels": ["72"] * 4}
    r = httpx.post(server.url + "/get_reward", json=body, timeout=120)  # OpenRLHF's shape: no signal
    assert r.json()["statuses"] == ["correct"] * 4
    r = httpx.post(server.url + "/get_reward", json={**body, "truncated": [True, False, None, True]}, timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["statuses"] == ["no_answer", "correct", "correct", "correct"]
    assert r.json()["rewards"] == [0.0, 1.0, 1.0, 1.0]
    assert r.json()["extra_logs"]["veristep_judged"] == [1.0] * 4  # cut off is a verdict, not unjudged
    for bad, reason in [([True], "1 truncated for 4 queries"), ("yes", "field 'truncated' must be a list"),
                        ([True, 1, None, None], "truncated[1] must be true, false or null, got int")]:
        r = httpx.post(server.url + "/get_reward", json={**body, "truncated": bad}, timeout=60)
        assert r.status_code == 422 and reason in r.json()["error"], r.text


def test_slime_takes_truncated_finish_reason_or_the_samples_status(server):
    def reward(**extra):
        r = httpx.post(server.url + "/slime?detail=1", timeout=120,
                       json={"prompt": "Q", "response": CUT, "label": "72", **extra})
        assert r.status_code == 200, r.text
        return r.json()["status"]

    assert reward() == "correct"  # slime's own remote_rm sends no signal
    assert reward(truncated=True) == "no_answer"
    assert reward(status="truncated") == "no_answer"  # Sample.to_dict()["status"]
    assert reward(status="completed") == "correct"
    assert reward(finish_reason="length") == "no_answer"
    assert reward(truncated=False, status="truncated") == "correct"  # the explicit flag wins
    r = httpx.post(server.url + "/slime", timeout=60, json={"response": CUT, "label": "72", "truncated": "yes"})
    assert r.status_code == 422 and "'truncated' must be true, false or null" in r.json()["error"]
    r = httpx.post(server.url + "/slime", timeout=60, json={"response": CUT, "label": "72", "status": 3})
    assert r.status_code == 422 and "'status' must be str" in r.json()["error"]


def test_the_client_carries_the_mark_and_matches_the_local_verifier(server):
    completions = [CUT, mark_truncated(CUT), mark_truncated(BOXED_CUT), mark_truncated(CUT, False)]
    # a record-shaped reference with its own cut-off keys: the completion's mark decides, as locally
    references = ["72", {"answer": "72"}, "72", {"answer": "72", "truncated": True, "finish_reason": "length"}]
    assert row_of(completions[1], references[1]) == {"answer": "72", "completion": CUT, "truncated": True}
    assert "truncated" not in row_of(completions[3], references[3])
    local = get_verifier("math", workers=1)
    try:
        expected = [r.status.value for r in local.verify_batch(
            completions, [local.reference_from_record(r) if isinstance(r, dict) else r for r in references])]
    finally:
        local.close()
    assert expected == ["correct", "no_answer", "correct", "correct"]
    with VeristepClient(server.url) as client:
        assert [r.status.value for r in client.verify(completions, references)] == expected
        reply = client.get_reward(["Q" + CUT] * 2, ["Q"] * 2, ["72"] * 2, truncated=[False, True])
        assert reply["statuses"] == ["correct", "no_answer"]

    async def run():
        async with AsyncVeristepClient(server.url) as client:
            results = await client.verify(completions, references)
            reply = await client.get_reward(["Q" + CUT] * 2, ["Q"] * 2, ["72"] * 2, truncated=[True, False])
            return [r.status.value for r in results], reply["statuses"]

    assert asyncio.run(run()) == (expected, ["no_answer", "correct"])


def test_async_trl_marks_by_eos_locally_and_remotely(server):
    ids = [[7, 9, 2], [7, 9, 5], []]  # ended in EOS; cut off; no ids (no signal)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for kwargs in ({"workers": 1}, {"remote": server.url}):
            f = async_trl_reward_func("math", eos_token_id=2, **kwargs)
            try:
                assert asyncio.run(f([CUT] * 3, answer=["72"] * 3, completion_ids=ids)) == [1.0, 0.0, 1.0], kwargs
                plain = async_trl_reward_func("math", **kwargs)
                assert asyncio.run(plain([CUT], answer=["72"], completion_ids=[[5]])) == [1.0]
            finally:
                f.verifier.close()
    assert isinstance(async_trl_reward_func("math", remote=server.url).verifier, RemoteVerifier)


def test_slime_in_process_rm_reads_the_samples_status():
    status = SimpleNamespace(TRUNCATED=SimpleNamespace(value="truncated"), COMPLETED=SimpleNamespace(value="completed"),
                             PENDING=SimpleNamespace(value="pending"))
    args = SimpleNamespace(rollout_max_response_len=100)

    def sample(state, length=0):
        return SimpleNamespace(prompt="Q", response=CUT, label="72", metadata={}, status=state,
                               response_length=length)

    samples = [sample(status.COMPLETED), sample(status.TRUNCATED), sample(status.PENDING, 100),
               sample(status.PENDING, 20), sample(None)]
    assert [slime_sample_cut(args, s) for s in samples] == [False, True, True, False, None]
    rm = slime_rm("math", as_dict=True, workers=1)
    try:
        out = asyncio.run(rm.batch(args, samples))
    finally:
        for verifier in rm._verifiers.values():
            verifier.close()
    assert [o["status"] for o in out] == ["correct", "no_answer", "no_answer", "correct", "correct"]
    assert not is_truncated(CUT)

"""Truncated completions (issue 31.3): an answer found without a marker is not rewarded."""

from __future__ import annotations

import pickle

import pytest
from veristep.verifiers import Status
from veristep.verifiers.core.text import (
    TruncatedText,
    completion_text,
    is_truncated,
    mark_truncated,
)
from veristep.verifiers.math import MathVerifier

CUT = "She sold 40 on Monday and 32 on Tuesday, 40 + 32 = 72, so in total she sol"


@pytest.fixture(scope="module")
def verifier():
    with MathVerifier(workers=1, timeout=5.0) as v:
        yield v


def test_a_cut_off_completion_gets_no_reward_from_loose_extraction(verifier):
    # Without the mark this cut-mid-word response scores 1.0 from its last number.
    assert verifier.verify(CUT, "72").status is Status.CORRECT
    result = verifier.verify(mark_truncated(CUT), "72")
    assert result.status is Status.NO_ANSWER and result.reward == 0.0 and result.judged
    assert "truncated" in result.detail
    # Cut mid-computation: no_answer, not wrong from whatever number came last.
    assert verifier.verify(mark_truncated("First, 12 * 7 = 84. Then 84 - 1"), "83").status \
        is Status.NO_ANSWER


def test_a_marked_answer_still_counts_when_cut_off(verifier):
    for text, status in [("so the answer is \\boxed{72} and then we", Status.CORRECT),
                         ("#### 71\nand the", Status.WRONG),
                         ("<answer>72</answer> more words aft", Status.CORRECT)]:
        assert verifier.verify(mark_truncated(text), "72").status is status, text


def test_the_mark_reaches_the_workers_and_batches(verifier):
    long = "x " * 20_000 + CUT  # longer than INLINE_CHARS: extracted in a worker
    results = verifier.verify_batch([long, mark_truncated(long), CUT, mark_truncated(CUT)],
                                    ["72"] * 4)
    assert [r.status for r in results] == [Status.CORRECT, Status.NO_ANSWER] * 2
    assert mark_truncated(CUT, False) == CUT and not is_truncated(mark_truncated(CUT, False))
    assert mark_truncated(CUT, None) is CUT


def test_the_mark_survives_pickling_and_chat_messages_carry_it():
    marked = mark_truncated("abc")
    assert isinstance(marked, str) and marked == "abc"
    assert is_truncated(pickle.loads(pickle.dumps(marked))) and not is_truncated("abc")
    cut = completion_text({"role": "assistant", "content": "x", "finish_reason": "length"})
    assert isinstance(cut, TruncatedText)
    assert is_truncated(completion_text([{"role": "assistant", "content": "x", "truncated": True}]))
    assert not is_truncated(completion_text({"role": "assistant", "content": "x",
                                             "finish_reason": "stop"}))


def test_the_jsonl_cli_reads_the_mark_from_the_record(tmp_path):
    import json

    from veristep.cli import main

    rows = [{"completion": CUT, "answer": "72"},
            {"completion": CUT, "answer": "72", "truncated": True},
            {"completion": CUT, "answer": "72", "finish_reason": "length"},
            {"completion": [{"role": "assistant", "content": CUT, "finish_reason": "length"}],
             "answer": "72"}]
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["verify", "math", str(src), "-o", str(out), "--workers", "1"]) == 0
    statuses = [json.loads(line)["veristep"]["status"] for line in out.read_text().splitlines()]
    assert statuses == ["correct", "no_answer", "no_answer", "no_answer"]


def test_trl_marks_completions_without_the_end_of_sequence_token():
    from veristep.verifiers.adapters import trl_reward_func

    reward = trl_reward_func("math", eos_token_id=2, workers=1)
    try:
        scores = reward(completions=[CUT, CUT, CUT], answer=["72"] * 3,
                        completion_ids=[[7, 9, 2], [7, 9, 5], []])
        assert scores == [1.0, 0.0, 1.0]  # ended in EOS; cut off; no ids: no signal
        plain = trl_reward_func("math", workers=1)  # no eos_token_id: no signal, as before
        assert plain(completions=[CUT], answer=["72"], completion_ids=[[7, 9, 5]]) == [1.0]
        plain.verifier.close()
    finally:
        reward.verifier.close()

"""Rewards and PRM tensors: unjudged results, non-finite step scores, token character offsets."""

from __future__ import annotations

import os
import random
import string
from pathlib import Path

import pytest
import torch
from veristep.prm import load_scorer
from veristep.train.demo.tiny import build_char_tokenizer
from veristep.train.rewards import OutcomeRewarder, prm_step_tensors, token_char_offsets
from veristep.verifiers import Status, VerifyResult

HERE = Path(__file__).resolve().parent
TIMING_OUT = f"{HERE / 'trainer_verifiers.py'}:TimeOutOnMarkVerifier"


def test_an_unjudged_result_is_marked_not_scored_as_wrong():
    rewarder = OutcomeRewarder([TIMING_OUT], [1.0])
    mark = rewarder.verifiers[0].mark
    out = rewarder.score([mark + "1", "2", "1", mark], [["1"]] * 4)
    assert out.judged.tolist() == [False, True, True, False]
    assert out.correct.tolist() == [False, False, True, False]
    assert out.statuses == ["timeout", "wrong", "correct", "timeout"]


def _prefix_offsets(tokenizer, ids):
    """The quadratic definition: a token ends where the decoded prefix that ends with it ends."""
    offsets, prev = [], 0
    for k in range(len(ids)):
        end = max(prev, len(tokenizer.decode(ids[: k + 1], skip_special_tokens=True)))
        offsets.append((prev, end))
        prev = end
    return offsets


def _trained(model_name: str):
    """A small BPE (byte-level) or Unigram (SentencePiece-style) tokenizer trained here, offline."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(model_name)
    words = ["".join(rng.choice(string.ascii_lowercase + "éü中€") for _ in range(rng.randint(1, 7)))
             for _ in range(300)]
    corpus = [" ".join(rng.choice(words) for _ in range(30)) + " 12+7=19 😀" for _ in range(200)]
    if model_name == "bpe":
        core = Tokenizer(models.BPE())
        core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        core.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<eos>", "<pad>"],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    else:
        core = Tokenizer(models.Unigram())
        core.pre_tokenizer = pre_tokenizers.Metaspace()
        core.decoder = decoders.Metaspace()
        trainer = trainers.UnigramTrainer(vocab_size=300, special_tokens=["<eos>", "<pad>", "<unk>"],
                                          unk_token="<unk>")
    core.train_from_iterator(corpus, trainer)
    extra = {"unk_token": "<unk>"} if model_name == "unigram" else {}
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<eos>", pad_token="<pad>",
                                   clean_up_tokenization_spaces=False, **extra)


@pytest.mark.parametrize("name", ["char", "bpe", "unigram"])
def test_token_offsets_equal_the_prefix_definition_on_random_text_and_ids(name):
    tok = build_char_tokenizer() if name == "char" else _trained(name)
    rng = random.Random(0)
    alphabet = string.printable + "é€😀ü中"
    for trial in range(120):
        if trial % 2:  # sampled ids need not be any text's encoding; specials included
            ids = [rng.randrange(len(tok)) for _ in range(rng.randint(0, 40))]
        else:
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
            ids = tok(text, add_special_tokens=False).input_ids
        assert token_char_offsets(tok, ids) == _prefix_offsets(tok, ids), (name, ids)


def test_token_offsets_decode_a_bounded_window_per_token():
    """Linear work: every decoded window holds at most context + 1 tokens (+ skipped specials)."""
    tok = _trained("bpe")
    calls: list[int] = []
    real = tok.batch_decode

    def counting(seqs, **kw):
        calls.extend(len(s) for s in seqs)
        return real(seqs, **kw)

    tok.batch_decode = counting
    ids = tok("abc é中 " * 300, add_special_tokens=False).input_ids
    token_char_offsets(tok, ids)
    assert len(calls) == 2 * len(ids) and max(calls) <= 5


class _NaNScorer:
    """The rule scorer, except that the second step of every completion scores NaN."""

    neutral = 0.5

    def __init__(self):
        self.rule = load_scorer("rule", separator="\n")

    def score_batch(self, problems, completions):
        out = self.rule.score_batch(problems, completions)
        for s in out:
            if len(s.scores) > 1:
                s.scores[1] = float("nan")
        return out


def test_a_nan_step_score_keeps_its_step_with_the_neutral_score():
    tok = build_char_tokenizer()
    texts = ["Step 1: 1+1=2\nStep 2: 2*3=7\nAnswer: 7", "Step 1: 1+1=3\nStep 2: 3*3=9\nAnswer: 9"]
    ids = [tok(t, add_special_tokens=False).input_ids + [tok.eos_token_id] for t in texts]
    width = max(len(i) for i in ids)
    steps = prm_step_tensors(_NaNScorer(), tok, ["Compute: (1+1)*3\n"], ids, texts, 2, width, [0])
    assert steps.nan_steps == 2
    assert steps.step_mask[0].sum(-1).tolist() == [3, 3]  # no hole in the step sequence
    assert steps.step_scores[0, :, 1].tolist() == [0.5, 0.5]
    assert torch.isfinite(steps.step_scores).all()
    # every real token maps to a step, in order
    assert (steps.token_step[0, 0, : len(ids[0])] >= 0).all()


def test_unjudged_status_set_includes_the_bad_reference():
    assert not VerifyResult(0.0, False, Status.BAD_REFERENCE).judged


def test_close_stops_the_verifiers_worker_processes():
    symbolic = ["\\boxed{\\frac{x^2-1}{x-1}}"], [["x+1"]]  # beyond the in-process fast path
    with OutcomeRewarder(["math"], [1.0], workers=2) as rewarder:
        assert rewarder.score(*symbolic).correct.tolist() == [True]
        pids = rewarder.verifiers[0].worker_pids()
        assert pids
    assert rewarder.verifiers[0].worker_pids() == []
    for pid in pids:  # reaped: no such process any more
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    # A later call starts new workers.
    assert rewarder.score(*symbolic).correct.tolist() == [True]
    rewarder.close()

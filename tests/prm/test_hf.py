"""Model scorers on tiny random models built offline: layouts, read positions, batching."""

from __future__ import annotations

import json

import pytest
import torch
from veristep.prm import load_scorer
from veristep.prm.hf import (
    QwenPRMScorer,
    ShepherdScorer,
    TokenClassificationScorer,
    pick_dtype,
)

PROMPT = "What is 3*4+5?"
COMPLETION = "3 * 4 = 12\n\n12 + 5 = 17\n\nThe answer is 17."
OTHERS = [("Q", "a\n\nb"), ("A much longer prompt here.", "one step only"), ("P", "x\n\ny\n\nz\n\nw")]


@pytest.fixture(scope="module")
def prm_tokenizer():
    from veristep.train.demo.tiny import build_char_tokenizer

    tok = build_char_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<extra_0>"]})
    tok.add_tokens(["ки"])  # Math-Shepherd's step tag as one token, like in its vocabulary
    return tok


def _config(tok, num_labels=2):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=1, num_key_value_heads=1, num_labels=num_labels,
        pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        max_position_embeddings=512,
    )


@pytest.fixture(scope="module")
def cls_model(prm_tokenizer):
    from transformers import LlamaForTokenClassification

    torch.manual_seed(0)
    return LlamaForTokenClassification(_config(prm_tokenizer)).eval()


@pytest.fixture(scope="module")
def lm_model(prm_tokenizer):
    from transformers import LlamaForCausalLM

    torch.manual_seed(1)
    return LlamaForCausalLM(_config(prm_tokenizer)).eval()


def _manual_logits(model, ids):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0]


def test_qwen_layout_reads_at_each_separator(prm_tokenizer, cls_model):
    scorer = QwenPRMScorer(cls_model, prm_tokenizer)
    result = scorer.score(PROMPT, COMPLETION)
    enc = scorer.encode(PROMPT, result.steps)
    text = prm_tokenizer.decode(enc.input_ids)
    assert text.startswith("system: Please reason step by step")
    assert "assistant: 3 * 4 = 12<extra_0>12 + 5 = 17<extra_0>The answer is 17.<extra_0>" in text
    sep_id = prm_tokenizer.convert_tokens_to_ids("<extra_0>")
    assert enc.positions == [i for i, t in enumerate(enc.input_ids) if t == sep_id]
    probs = torch.softmax(_manual_logits(cls_model, enc.input_ids), -1)[enc.positions, 1]
    assert result.scores == pytest.approx(probs.tolist(), abs=1e-5)
    assert len(result.scores) == 3 and result.truncated_steps == 0


def test_qwen_separator_inside_model_output_does_not_shift_scores(prm_tokenizer, cls_model):
    scorer = QwenPRMScorer(cls_model, prm_tokenizer)
    hostile = "I say <extra_0> here\n\nsecond"
    enc = scorer.encode("p", ["I say <extra_0> here", "second"])
    sep_id = prm_tokenizer.convert_tokens_to_ids("<extra_0>")
    seps = [i for i, t in enumerate(enc.input_ids) if t == sep_id]
    assert len(seps) == 3 and enc.positions == [seps[1], seps[2]]
    assert len(scorer.score("p", hostile).scores) == 2


def test_token_cls_matches_trl_prm_trainer_layout(prm_tokenizer, cls_model):
    scorer = TokenClassificationScorer(cls_model, prm_tokenizer, step_separator="\n")
    steps = ["3 * 4 = 12", "12 + 5 = 17"]
    enc = scorer.encode(PROMPT, steps)
    # TRL PRMTrainer.tokenize_row: bos + prompt, then each step tokenised alone followed by
    # the separator ids, label on the last token of each (step + separator) piece.
    tok = lambda s: prm_tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    pieces = [tok(s) + tok("\n") for s in steps]
    expected_ids = [prm_tokenizer.bos_token_id] + tok(PROMPT) + pieces[0] + pieces[1]
    labels = [-100] * (1 + len(tok(PROMPT))) + [-100] * (len(pieces[0]) - 1) + [1] + [-100] * (len(pieces[1]) - 1) + [0]
    assert enc.input_ids == expected_ids
    assert enc.positions == [i for i, lab in enumerate(labels) if lab != -100]
    # no separator between prompt and first step
    assert enc.input_ids[len(tok(PROMPT)) + 1] == tok("3")[0]
    result = scorer.score(PROMPT, "3 * 4 = 12\n\n12 + 5 = 17")
    probs = torch.softmax(_manual_logits(cls_model, expected_ids), -1)[enc.positions, 1]
    assert result.scores == pytest.approx(probs.tolist(), abs=1e-5)


def test_shepherd_reads_plus_vs_minus_at_each_tag(prm_tokenizer, lm_model):
    scorer = ShepherdScorer(lm_model, prm_tokenizer)
    result = scorer.score(PROMPT, COMPLETION)
    enc = scorer.encode(PROMPT, result.steps)
    assert prm_tokenizer.decode(enc.input_ids) == (
        f"{PROMPT} 3 * 4 = 12 ки\n12 + 5 = 17 ки\nThe answer is 17. ки"
    )
    tag = prm_tokenizer.convert_tokens_to_ids("ки")
    assert enc.positions == [i for i, t in enumerate(enc.input_ids) if t == tag]
    plus, minus = prm_tokenizer.convert_tokens_to_ids(["+", "-"])
    logits = _manual_logits(lm_model, enc.input_ids)[enc.positions][:, [plus, minus]]
    assert result.scores == pytest.approx(torch.softmax(logits, -1)[:, 0].tolist(), abs=1e-5)


@pytest.mark.parametrize("kind", ["hf", "token-cls", "shepherd"])
def test_batching_equals_one_by_one(kind, prm_tokenizer, cls_model, lm_model):
    cls = {"hf": QwenPRMScorer, "token-cls": TokenClassificationScorer, "shepherd": ShepherdScorer}[kind]
    model = lm_model if kind == "shepherd" else cls_model
    scorer = cls(model, prm_tokenizer, batch_size=3)
    pairs = [(PROMPT, COMPLETION), *OTHERS, ("empty", "  ")]
    batched = scorer.score_batch([p for p, _ in pairs], [c for _, c in pairs])
    single = [scorer.score(p, c) for p, c in pairs]
    for b, s in zip(batched, single, strict=True):
        assert b.steps == s.steps and b.spans == s.spans
        assert b.scores == pytest.approx(s.scores, abs=1e-5)
    assert [len(b.scores) for b in batched] == [3, 2, 1, 4, 0]
    assert all(0.0 <= x <= 1.0 for b in batched for x in b.scores)


def test_truncation_drops_prompt_first_then_marks_late_steps(prm_tokenizer, cls_model):
    scorer = TokenClassificationScorer(cls_model, prm_tokenizer, max_length=30, neutral=0.25)
    long_prompt = "p" * 100
    full = TokenClassificationScorer(cls_model, prm_tokenizer)
    # Prompt alone too long: it is cut (BOS kept), every step still scored.
    r = scorer.score(long_prompt, "ab\n\ncd")
    assert r.truncated_steps == 0 and len(r.scores) == 2
    enc = full.encode(long_prompt, ["ab", "cd"])
    assert len(enc.input_ids) > 30
    # Completion too long: the steps beyond the window get the neutral score.
    r = scorer.score("q", "\n\n".join(["abcdefgh"] * 6))
    assert r.truncated_steps > 0
    assert r.scores[-r.truncated_steps :] == [0.25] * r.truncated_steps
    assert all(s != 0.25 for s in r.scores[: -r.truncated_steps])


def test_load_scorer_round_trip_from_disk(tmp_path, prm_tokenizer, cls_model, lm_model):
    cls_dir, lm_dir = tmp_path / "cls", tmp_path / "lm"
    for model, d in ((cls_model, cls_dir), (lm_model, lm_dir)):
        model.save_pretrained(d)
        prm_tokenizer.save_pretrained(d)
    direct = QwenPRMScorer(cls_model, prm_tokenizer).score(PROMPT, COMPLETION).scores
    loaded = load_scorer(f"hf:{cls_dir}", device="cpu")
    assert isinstance(loaded, QwenPRMScorer)
    assert loaded.score(PROMPT, COMPLETION).scores == pytest.approx(direct, abs=1e-5)
    assert isinstance(load_scorer(f"token-cls:{cls_dir}", device="cpu"), TokenClassificationScorer)
    shep = load_scorer(f"shepherd:{lm_dir}", device="cpu", batch_size=2)
    assert isinstance(shep, ShepherdScorer) and shep.batch_size == 2
    assert shep.score(PROMPT, COMPLETION).scores == pytest.approx(
        ShepherdScorer(lm_model, prm_tokenizer).score(PROMPT, COMPLETION).scores, abs=1e-5
    )


def test_remote_code_checkpoint_needs_explicit_trust(tmp_path, prm_tokenizer, cls_model):
    d = tmp_path / "remote"
    cls_model.save_pretrained(d)
    prm_tokenizer.save_pretrained(d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["auto_map"] = {"AutoModel": "modeling_prm.Qwen2ForProcessRewardModel"}
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="trust_remote_code"):
        load_scorer(f"hf:{d}", device="cpu")


def test_load_scorer_rejects_bad_specs(tmp_path):
    with pytest.raises(ValueError, match="unknown scorer"):
        load_scorer("magic:thing")
    with pytest.raises(ValueError, match="needs a path"):
        load_scorer("hf:")
    with pytest.raises(ValueError, match="takes no path"):
        load_scorer("rule:x")
    with pytest.raises(ValueError, match="unexpected scorer options"):
        load_scorer("rule", batch_size=3)
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        load_scorer(f"hf:{tmp_path / 'f.txt'}", device="cpu")


def test_dtype_choice():
    assert pick_dtype("cuda") == torch.bfloat16
    assert pick_dtype("cuda:1") == torch.bfloat16
    assert pick_dtype("cpu") == torch.float32

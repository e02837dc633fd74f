"""Step splitting and the span -> token map the gate uses."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from veristep.prm.steps import split_steps, step_texts, token_step_index


def test_split_on_blank_lines_trims_and_drops_empty_pieces():
    text = "  First step.\n\nSecond step\n\n\n\n  \n\nThird.  \n"
    spans = split_steps(text)
    assert step_texts(text, spans) == ["First step.", "Second step", "Third."]
    assert spans[0] == (2, 13)


def test_a_runaway_step_regex_is_a_value_error_within_its_time_limit():
    # Under `re`, ^(x|x)*$ on 40 x's and a '!' runs for a day: the scorer hung on one completion.
    started = time.monotonic()
    with pytest.raises(ValueError, match="ran past"):
        split_steps("x" * 40 + "!", regex=r"^(x|x)*$")
    assert time.monotonic() - started < 10
    assert split_steps("Step 1: x" + "\n" * 40 + "Step 2: y", regex=r"(\n\s*)+(?=Step \d)") == [(0, 9), (49, 58)]


def test_split_custom_separator_and_regex():
    text = "Step 1: 2+2=4\nStep 2: 4*2=8\nAnswer: 8"
    assert step_texts(text, split_steps(text, separator="\n")) == [
        "Step 1: 2+2=4", "Step 2: 4*2=8", "Answer: 8",
    ]
    # A zero-width lookahead cuts before each "Step k:" without eating it.
    glued = "Step 1: a Step 2: b Step 3: c"
    assert step_texts(glued, split_steps(glued, regex=r"(?=Step \d+:)")) == [
        "Step 1: a", "Step 2: b", "Step 3: c",
    ]
    assert step_texts("a;; b ;c", split_steps("a;; b ;c", regex=r";+")) == ["a", "b", "c"]


def test_split_blank_and_without_separator():
    assert split_steps("") == []
    assert split_steps(" \n\n \t ") == []
    assert split_steps("one step only") == [(0, 13)]
    with pytest.raises(ValueError):
        split_steps("x", separator="")
    with pytest.raises(ValueError):
        split_steps("x", regex="(")


def test_token_map_straddling_token_goes_to_earlier_step():
    text = "ab\n\ncd"
    spans = split_steps(text)  # [(0, 2), (4, 6)]
    # tokens: "ab", "\n\nc" (straddles into step 1), "d", then EOS with (0, 0) offsets.
    offsets = [(0, 2), (2, 5), (5, 6), (0, 0)]
    assert token_step_index(spans, offsets, 4) == [0, 0, 1, 1]


def test_token_map_leading_trailing_and_zero_width():
    text = "  x\n\ny\n\nz  trailing?"
    spans = split_steps(text)
    assert step_texts(text, spans) == ["x", "y", "z  trailing?"]
    offsets = [(0, 0), (0, 2), (2, 3), (3, 5), (5, 6), (6, 8), (8, 9), (9, 20), (0, 0), (0, 0)]
    # BOS-like first token and the leading spaces -> step 0; EOS/pad after the end -> last step.
    assert token_step_index(spans, offsets, 10) == [0, 0, 0, 0, 1, 1, 2, 2, 2, 2]
    # More tokens than offsets (padding appended by the trainer) take the last step too.
    assert token_step_index(spans, offsets[:8], 10)[-3:] == [2, 2, 2]
    assert token_step_index(spans, offsets, 3) == [0, 0, 0]


def test_token_map_overlapping_offsets_never_go_back():
    # Byte-level tokenizers can report overlapping offsets for a multi-byte character.
    spans = [(0, 3), (5, 8)]
    offsets = [(0, 3), (5, 6), (4, 6), (6, 8)]
    assert token_step_index(spans, offsets, 4) == [0, 1, 1, 1]


def test_token_map_without_steps_is_step_zero():
    # Same convention as veristep.gating.token_step_from_offsets: step 0, masked there.
    assert token_step_index([], [(0, 1)], 3) == [0, 0, 0]
    with pytest.raises(ValueError):
        token_step_index([(0, 1)], [], -1)


def test_token_map_with_the_char_tokenizer(char_tokenizer):
    text = "2+2=4\n\n4*3=12\n\nAnswer: 12"
    enc = char_tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    spans = split_steps(text)
    steps = token_step_index(spans, enc["offset_mapping"], len(enc["input_ids"]) + 1)
    # The separator characters after a step belong to that step, EOS to the last.
    assert steps == [0] * 7 + [1] * 8 + [2] * 10 + [2]


@given(st.lists(st.text(alphabet="ab \n", min_size=0, max_size=6), min_size=0, max_size=6),
       st.integers(min_value=1, max_value=4))
def test_token_map_properties(pieces, width):
    text = "\n\n".join(pieces)
    spans = split_steps(text)
    offsets = [(i, min(i + width, len(text))) for i in range(0, len(text), width)]
    idx = token_step_index(spans, offsets, len(offsets) + 1)
    if not spans:
        assert set(idx) <= {0}
        return
    assert all(0 <= k < len(spans) for k in idx)
    assert idx == sorted(idx)  # never decreasing
    for t, (a, _end) in enumerate(offsets):
        for k, (s, e) in enumerate(spans):
            if s <= a < e:  # a token starting inside a step belongs to it
                assert idx[t] == k


def test_token_map_with_a_trained_byte_level_bpe():
    # A real subword tokenizer (trained here, offline) merges across step boundaries and
    # reports byte-level offsets: "12\n\n" or ".\n\nThen" can be single tokens.
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    corpus = ["3 * 4 = 12.\n\nThen 12 + 5 = 17.\n\nSo the answer is 17 ≥ 16.\n\n"] * 50
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, show_progress=False,
                                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    text = "3 * 4 = 12.\n\nThen 12 + 5 = 17.\n\nSo the answer is 17 ≥ 16."
    enc = tok.encode(text)
    spans = split_steps(text)
    assert len(spans) == 3
    idx = token_step_index(spans, enc.offsets, len(enc.ids))
    assert any(b - a > 3 for a, b in enc.offsets)  # merges really happened
    starts = [s for s, _ in spans]
    for (a, b), k in zip(enc.offsets, idx, strict=True):
        if b > a:
            owner = max([j for j, s in enumerate(starts) if s <= a], default=0)
            assert k == owner
    assert idx == sorted(idx) and idx[0] == 0 and idx[-1] == 2


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet="ab \n", min_size=0, max_size=6), min_size=1, max_size=5),
       st.integers(min_value=1, max_value=4))
def test_token_map_agrees_with_the_gating_tensor_version(pieces, width):
    # The trainer may use either; they must assign every token of positive width alike.
    import torch
    from veristep.gating import token_step_from_offsets

    text = "\n\n".join(pieces)
    spans = split_steps(text)
    offsets = [(i, min(i + width, len(text))) for i in range(0, len(text), width)]
    if not offsets:
        return
    ours = token_step_index(spans, offsets, len(offsets))
    starts = [s for s, _ in spans] or [0]
    theirs = token_step_from_offsets(
        torch.tensor([[[a for a, _ in offsets]]]), torch.ones(1, 1, len(offsets), dtype=torch.bool),
        torch.tensor([[starts]]), torch.tensor([[[bool(spans)] * len(starts)]]),
    )
    assert theirs[0, 0].tolist() == ours

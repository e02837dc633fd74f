"""The offline tokenizer and tiny model that the rest of the suite stands on."""

from __future__ import annotations

import torch
from transformers import AutoTokenizer


def test_char_tokenizer_round_trips_with_offsets(char_tokenizer):
    text = "Step 1: 7 × 8 = 56\n\nSo the answer is \\boxed{56}."
    enc = char_tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
    assert len(enc.input_ids) == len(text)
    assert enc.offset_mapping == [(i, i + 1) for i in range(len(text))]
    assert char_tokenizer.decode(enc.input_ids) == text
    assert char_tokenizer.pad_token_id != char_tokenizer.eos_token_id


def test_saved_tokenizer_reloads_identically(tiny_model_dir, char_tokenizer):
    reloaded = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = "a b\n\tc = 12 + 5"
    assert reloaded(text).input_ids == char_tokenizer(text).input_ids
    assert reloaded.decode(reloaded(text).input_ids) == text


def test_tiny_model_generates_and_logprobs_match_forward(tiny_model, tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    batch = tok(["12+5=", "7*8="], return_tensors="pt", padding=True)
    torch.manual_seed(0)
    out = tiny_model.generate(
        **batch, max_new_tokens=6, do_sample=True, output_logits=True, return_dict_in_generate=True
    )
    prompt_len = batch.input_ids.shape[1]
    new_tokens = out.sequences[:, prompt_len:]
    assert new_tokens.shape == (2, 6)

    # Log-probs from generate's raw (unprocessed) logits ...
    gen_logits = torch.stack(out.logits, dim=1)
    # ... must equal a manual forward pass over prompt + completion.
    full = out.sequences
    attn = torch.cat([batch.attention_mask, torch.ones_like(new_tokens)], dim=1)
    # Left padding: positions count real tokens only, as generate does.
    position_ids = (attn.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = tiny_model(input_ids=full, attention_mask=attn, position_ids=position_ids).logits
    manual = torch.log_softmax(logits[:, prompt_len - 1 : -1].float(), dim=-1)
    manual_lp = manual.gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)
    assert torch.isfinite(manual_lp).all()
    assert gen_logits.shape[:2] == (2, 6)
    gen_lp = torch.log_softmax(gen_logits.float(), dim=-1).gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(gen_lp, manual_lp, atol=1e-4, rtol=1e-4)

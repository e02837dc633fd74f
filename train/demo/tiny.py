"""Offline building blocks for tests and CPU demos: a character tokenizer and a tiny causal LM.

The tiny model uses the Llama architecture rather than Qwen2: transformers 5 loads a saved
tokenizer of a `qwen2` checkpoint with its own BPE class (dropping our per-character
pre-tokenizer), whereas for `llama` it honours the saved `tokenizer.json` as is.
"""

from __future__ import annotations

import string
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

PAD, EOS, BOS, UNK = "<pad>", "<eos>", "<bos>", "<unk>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, EOS, BOS, UNK)
#: Characters every tokenizer knows: printable ASCII plus a few maths symbols.
DEFAULT_ALPHABET: str = string.printable + "×÷−√π½²³·…→≤≥≠"

# A chat template so `apply_chat_template` works on conversational prompts in tests.
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def build_char_tokenizer(alphabet: str = DEFAULT_ALPHABET, model_max_length: int = 4096):
    """Build a character-level `PreTrainedTokenizerFast` with pad/eos/bos/unk set, offline."""
    from transformers import PreTrainedTokenizerFast

    vocab: dict[str, int] = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in dict.fromkeys(alphabet):  # keeps first-seen order, drops repeats
        vocab.setdefault(ch, len(vocab))
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    # One token per character, including whitespace and newlines, with exact offsets.
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        eos_token=EOS,
        bos_token=BOS,
        unk_token=UNK,
        model_max_length=model_max_length,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_causal_lm(
    tokenizer,
    hidden_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 2,
    num_kv_heads: int = 1,
    intermediate_size: int = 256,
    max_position_embeddings: int = 2048,
    seed: int = 0,
):
    """Build a randomly initialised Llama-architecture causal LM sized for CPU (head dim >= 64)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if hidden_size // num_heads < 64:
        raise ValueError(
            f"head dim hidden_size/num_heads = {hidden_size // num_heads} < 64; vLLM's CPU "
            "attention kernel needs >= 64: raise hidden_size or lower num_heads"
        )
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def save_tiny_model(directory: str | Path, **model_kwargs) -> Path:
    """Write a tiny model and its character tokenizer to `directory`, loadable by from_pretrained."""
    directory = Path(directory)
    tokenizer = build_char_tokenizer()
    model = build_tiny_causal_lm(tokenizer, **model_kwargs)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory

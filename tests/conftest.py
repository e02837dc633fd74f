"""Offline fixtures shared by the whole suite: a character tokenizer and a tiny causal LM."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Nothing in the suite may reach a hub: fail fast instead of hanging on the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parent.parent
TEST_DATA = REPO_ROOT / "tests" / "data"


@pytest.fixture(scope="session")
def char_tokenizer():
    """A character-level PreTrainedTokenizerFast with pad/eos/bos set and a chat template."""
    from veristep.train.demo.tiny import build_char_tokenizer

    return build_char_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A directory with a random tiny Llama-style LM and its tokenizer, for from_pretrained."""
    from veristep.train.demo.tiny import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir):
    """The tiny model loaded back from disk, in eval mode."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()


@pytest.fixture(scope="session")
def test_data_dir() -> Path:
    """The folder of data files shipped for tests."""
    return TEST_DATA

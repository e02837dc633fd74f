"""Fixtures for trainer tests: a tiny JSONL data set and a small, fast trainer configuration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
FIRST_CHAR = f"{HERE / 'trainer_verifiers.py'}:FirstCharVerifier"
NEVER = f"{HERE / 'trainer_verifiers.py'}:NeverCorrectVerifier"

# Two disjoint halves of the tiny tokenizer's commonest characters: a random model starts
# about half of its completions with one of them, so groups of 4 are often mixed.
_HALF_A = "abcdefghijklmnopqrstuvwxyz0123456789 \n\t.,;:!?+-*/=()[]{}<>'\"#$%&@^_`|~"
_HALF_B = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@pytest.fixture(scope="session")
def trainer_data(tmp_path_factory) -> Path:
    """A JSONL file of 16 prompts whose reference is a set of allowed first characters."""
    path = tmp_path_factory.mktemp("trainer-data") / "prompts.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(16):
            answer = _HALF_A if i % 2 == 0 else _HALF_B + _HALF_A[:26]
            fh.write(json.dumps({"prompt": f"Problem {i}: {i} + {i} =", "answer": answer}) + "\n")
    return path


@pytest.fixture
def small_config(tiny_model_dir, trainer_data, tmp_path):
    """Keyword values of a Config that runs a step in about a second on CPU."""
    return dict(
        model=str(tiny_model_dir), dataset=str(trainer_data), eval_dataset=str(trainer_data),
        verifier=FIRST_CHAR, prm="rule", steps=2, group_size=4, prompts_per_step=2,
        max_prompt_len=32, max_completion_len=8, eval_size=0, eval_interval=0, eval_samples=2,
        lr=1e-3, checkpoint_interval=0, progress=False, output_dir=str(tmp_path / "run"), seed=0,
    )

"""The warm start: a loadable model, cached by recipe hash, rebuilt when the recipe changes."""

from __future__ import annotations

import json

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer
from veristep.train.demo import task, warmstart

# A recipe small enough to train in a few seconds on a loaded CPU.
TINY = dict(
    levels=("easy",), demos_per_level=64, train_steps=6, batch_size=8, warmup_steps=2,
    eval_per_level=4, max_new_tokens=24,
)


@pytest.fixture(scope="module")
def warm_dir(tmp_path_factory):
    return warmstart.ensure_warm_start(tmp_path_factory.mktemp("ws") / "model", seed=1, **TINY)


def test_warm_start_is_loadable_and_generates(warm_dir):
    model = AutoModelForCausalLM.from_pretrained(warm_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(warm_dir)
    assert model.config.hidden_size // model.config.num_attention_heads >= 64
    problems = task.make_problems(3, seed=0, level="easy")
    completions = warmstart.generate_completions(
        model, tokenizer, [p["prompt"] for p in problems], temperature=1.0, max_new_tokens=12
    )
    assert len(completions) == 3 and all(isinstance(c, str) for c in completions)
    meta = warmstart.load_meta(warm_dir)
    assert meta["hash"] == warmstart.recipe_hash(warmstart.recipe_from_kwargs(**TINY), seed=1)
    assert meta["loss_last"] < meta["loss_first"]  # supervised training moved the model
    row = meta["eval"]["easy"]
    for key in ("greedy_success", "sampled_t1_success", "greedy_step_accuracy"):
        assert 0.0 <= row[key] <= 1.0


def test_cache_hit_skips_training_and_recipe_change_rebuilds(warm_dir):
    before = (warm_dir / "model.safetensors").stat().st_mtime_ns
    again = warmstart.ensure_warm_start(warm_dir, seed=1, **TINY)
    assert again == warm_dir
    assert (warm_dir / "model.safetensors").stat().st_mtime_ns == before
    changed = warmstart.ensure_warm_start(warm_dir, seed=1, **{**TINY, "train_steps": 3})
    meta = json.loads((changed / warmstart.META_FILE).read_text())
    assert meta["recipe"]["train_steps"] == 3
    assert not list(warm_dir.parent.glob(".model.tmp-*"))  # no temporary directory left behind


def test_bad_recipe_and_foreign_directory_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="unknown warm-start option"):
        warmstart.ensure_warm_start(tmp_path / "m", learning_rate=1.0)
    with pytest.raises(ValueError, match="head dim"):
        warmstart.ensure_warm_start(tmp_path / "m", hidden_size=128, num_heads=4)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not a warm-start directory"):
        warmstart.ensure_warm_start(foreign, **TINY)
    assert (foreign / "notes.txt").read_text() == "keep me"

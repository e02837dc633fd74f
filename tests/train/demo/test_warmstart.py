"""The warm start: a loadable model, cached by recipe hash, rebuilt when the recipe changes."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer
from veristep.train.demo import task, warmstart

# A recipe small enough to train in a few seconds on a loaded CPU (one thread: the test machine
# may have one core; the numerics are pinned all the same).
TINY = dict(
    levels=("easy",), demos_per_level=64, train_steps=6, batch_size=8, warmup_steps=2,
    eval_per_level=4, max_new_tokens=24, threads=1,
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


def test_two_builds_give_identical_weights_and_record_their_checksum(tmp_path, capfd):
    first = warmstart.ensure_warm_start(tmp_path / "first", seed=1, **TINY)
    other = warmstart.ensure_warm_start(tmp_path / "again", seed=1, **TINY)
    err = capfd.readouterr().err
    assert "warm start" in err and "6/6" in err  # the child's progress bar, with its step count
    a, b = warmstart.load_meta(first), warmstart.load_meta(other)
    assert a["weights_sha256"] == b["weights_sha256"] == warmstart.weights_sha256(other)
    wa = load_file(str(first / "model.safetensors"))
    wb = load_file(str(other / "model.safetensors"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert a["pinned_env"]["MKL_CBWR"] == "AVX2" and a["torch_threads"] == 1
    assert a["build_machine"]["torch"] == torch.__version__ and a["build_machine"]["cpu"]
    # another seed is another model (the checksum tells them apart)
    third = warmstart.ensure_warm_start(tmp_path / "seed2", seed=2, **TINY)
    assert warmstart.load_meta(third)["weights_sha256"] != a["weights_sha256"]


def test_changed_weights_are_detected_and_rebuilt(tmp_path, capfd):
    path = warmstart.ensure_warm_start(tmp_path / "m", seed=1, **TINY)
    good = warmstart.load_meta(path)["weights_sha256"]
    weights = load_file(str(path / "model.safetensors"))
    name = sorted(weights)[0]
    weights[name] = weights[name] + 1.0
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    assert warmstart.weights_sha256(path) != good
    capfd.readouterr()
    warmstart.ensure_warm_start(path, seed=1, **TINY)
    assert "do not match the checksum" in capfd.readouterr().err
    assert warmstart.weights_sha256(path) == good


def test_describe_checksum_compares_with_the_reference_build(monkeypatch):
    meta = {"hash": "abc", "weights_sha256": "1" * 64}
    assert "no reference build" in warmstart.describe_checksum(meta)
    monkeypatch.setitem(warmstart.REFERENCE_SHA256, "abc", {"2" * 64: "machine A", "1" * 64: "machine B"})
    assert "identical to the reference build on machine B" in warmstart.describe_checksum(meta)
    monkeypatch.setitem(warmstart.REFERENCE_SHA256, "abc", {"2" * 64: "machine A"})
    assert "differ from every reference build's (2222222222222222)" in warmstart.describe_checksum(meta)


def test_no_training_or_held_out_prompt_was_a_demonstration():
    """The default recipe's demonstrations and the default run's prompts share no prompt."""
    from veristep.train.config import make_config
    from veristep.train.data import load_train_and_eval
    from veristep.train.demo.tiny import build_char_tokenizer

    recipe = warmstart.WarmStartRecipe()
    demos = {p["prompt"] for i, level in enumerate(recipe.levels)
             for p in task.make_problems(recipe.demos_per_level, seed=i, level=level, part="demo")}
    for dataset in ("builtin:arith:level=medium", "builtin:arith:level=easy", "builtin:arith"):
        train, held_out = load_train_and_eval(make_config(dataset=dataset), build_char_tokenizer())
        prompts = {p.text for p in train} | {p.text for p in held_out}
        assert len(held_out) == 500
        assert not prompts & demos, dataset

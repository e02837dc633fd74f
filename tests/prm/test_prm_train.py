"""`veristep prm label` / `prm train`: Monte-Carlo labels, a trained token-cls PRM, save/load, resume."""

from __future__ import annotations

import json

import pytest
import torch
from veristep.prm import load_scorer
from veristep.prm.builtin_traces import exact_record
from veristep.prm.mc_labels import LabelledExample, mc_label, parse_label_row
from veristep.prm.train import (
    META_FILE,
    PRMTrainConfig,
    TrainingInterrupted,
    partial_dir,
    train_prm,
)
from veristep.train.demo import task
from veristep.train.mc_values import load_policy

from veristep.cli import main

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    pol = load_policy(str(tiny_model_dir), max_new_tokens=24)
    yield pol
    pol.close()


@pytest.fixture(scope="module")
def examples():
    """Noisy demonstrations of the built-in task with exact step labels (wrong steps are 0)."""
    problems = task.make_problems(24, seed=3, level="easy")
    demos = task.make_noisy_demonstrations(problems, seed=3, step_error_rate=0.3, answer_error_rate=0.2)
    out = []
    for d in demos:
        rec = exact_record(d.prompt, d.completion, d.answer, "x")
        out.append(LabelledExample(d.prompt, rec["steps"], [float(v) for v in rec["local_step_labels"]]))
    return out


def test_mc_labels_count_every_continuation_and_label_the_last_step_by_outcome(policy):
    problems = task.make_problems(2, seed=0, level="easy")
    right = problems[0]["solution"]
    wrong = right.rsplit("Answer: ", 1)[0] + "Answer: 99999"
    pairs = [(problems[0], right), (problems[0], right), (problems[0], wrong), (problems[1], problems[1]["solution"])]
    rows, budget = mc_label(policy, pairs, k=3, chunk=16)
    n_steps = [len(r["steps"]) for r in rows]
    assert n_steps == [3, 3, 3, 3]  # two step lines and the answer line
    # The second copy shares every prefix with the first, the wrong one its two step prefixes.
    assert [r["mc_rollouts"] for r in rows] == [6, 0, 0, 6]
    assert budget.continuations == 12 and budget.traces == 4 and budget.rollouts == 16
    assert budget.continuation_tokens > 0
    for r in rows:
        assert all(0.0 <= v <= 1.0 for v in r["soft_labels"])
        assert r["hard_labels"] == [int(v > 0) for v in r["soft_labels"]]
        assert r["soft_labels"][-1] == float(r["correct"])
    assert [r["correct"] for r in rows] == [True, True, False, True]
    assert rows[0]["soft_labels"] == rows[1]["soft_labels"]  # one value per shared prefix


def test_label_rows_are_checked_field_by_field():
    good = {"prompt": "p", "steps": ["a", "b"], "soft_labels": [1, 0.5]}
    assert parse_label_row(good, "soft_labels", "\n").targets == [1.0, 0.5]
    assert parse_label_row({"prompt": "p", "completion": "a\nb", "soft_labels": [1, 0]},
                           "soft_labels", "\n").steps == ["a", "b"]
    bad = [
        ({"steps": ["a"], "soft_labels": [1]}, "missing key 'prompt'"),
        ({"prompt": "p", "soft_labels": [1]}, "needs 'steps'"),
        ({"prompt": "p", "steps": ["a"]}, "missing key 'soft_labels'"),
        ({"prompt": "p", "steps": ["a", "b"], "soft_labels": [1]}, "1 labels for 2 steps"),
        ({"prompt": "p", "steps": ["a"], "soft_labels": [1.5]}, "in [0, 1]"),
        ({"prompt": "p", "steps": ["a"], "soft_labels": [True]}, "in [0, 1]"),
        ({"prompt": "p", "completion": "  \n ", "soft_labels": []}, "no steps"),
    ]
    for row, why in bad:
        with pytest.raises(ValueError, match=why.replace("[", r"\[").replace("]", r"\]")):
            parse_label_row(row, "soft_labels", "\n")


def _cfg(base, **kw):
    return PRMTrainConfig(base=str(base), **{"steps": 12, "batch_size": 8, "lr": 1e-3,
                                             "warmup_steps": 2, "checkpoint_every": 4, **kw})


def test_trained_prm_learns_saves_atomically_and_loads_back(tiny_model_dir, examples, tmp_path):
    out = tmp_path / "prm"
    meta = train_prm(examples, _cfg(tiny_model_dir, steps=30), out)
    assert meta["loss_last"] < meta["loss_first"]
    assert (out / META_FILE).is_file() and not partial_dir(out).exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folder left
    scorer = load_scorer(f"trained:{out}")
    ex = examples[0]
    completion = "\n".join(ex.steps)
    res = scorer.score(ex.prompt, completion)
    assert res.steps == ex.steps and all(0.0 <= s <= 1.0 for s in res.scores)
    # The TRL token-classification layout reads the same folder to the same numbers.
    same = load_scorer(f"token-cls:{out}", separator="\n", step_separator="\n")
    assert same.score(ex.prompt, completion).scores == pytest.approx(res.scores, abs=1e-6)
    # Training moved the scores toward the labels: lower step cross-entropy than the fresh head.
    fresh = train_prm(examples, _cfg(tiny_model_dir, steps=1, lr=1e-9), tmp_path / "fresh")

    def xent(s):
        import math

        tot = n = 0
        for e in examples:
            for p, y in zip(s.score(e.prompt, "\n".join(e.steps)).scores, e.targets, strict=True):
                p = min(max(p, 1e-6), 1 - 1e-6)
                tot -= y * math.log(p) + (1 - y) * math.log(1 - p)
                n += 1
        return tot / n

    assert fresh["train_steps"] == 1
    assert xent(scorer) < xent(load_scorer(f"trained:{tmp_path / 'fresh'}"))


def test_interrupted_training_leaves_no_model_and_resumes_to_the_same_weights(tiny_model_dir, examples, tmp_path):
    from safetensors.torch import load_file

    whole = tmp_path / "whole"
    train_prm(examples, _cfg(tiny_model_dir), whole)

    def stop_at_6(step, loss):
        if step == 6:
            raise KeyboardInterrupt

    out = tmp_path / "resumed"
    with pytest.raises(TrainingInterrupted, match="interrupted at step 6"):
        train_prm(examples, _cfg(tiny_model_dir), out, on_step=stop_at_6)
    assert not out.exists() and (partial_dir(out) / "checkpoint.pt").is_file()
    with pytest.raises(ValueError, match="no folder"):
        load_scorer(f"trained:{out}")
    # Another config does not silently resume this run's checkpoint.
    with pytest.raises(ValueError, match="another run"):
        train_prm(examples, _cfg(tiny_model_dir, lr=5e-4), out)
    meta = train_prm(examples, _cfg(tiny_model_dir), out)
    assert meta["train_steps"] == 12 and not partial_dir(out).exists()
    a, b = load_file(whole / "model.safetensors"), load_file(out / "model.safetensors")
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-6)


def test_load_scorer_refuses_half_written_or_foreign_folders(tiny_model_dir, examples, tmp_path):
    out = tmp_path / "prm"
    train_prm(examples, _cfg(tiny_model_dir, steps=2), out)
    with pytest.raises(ValueError, match="not a finished veristep PRM"):
        load_scorer(f"trained:{tiny_model_dir}")  # a causal LM, never trained here
    weights = out / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # a truncated copy
    with pytest.raises(ValueError, match="wrong size"):
        load_scorer(f"trained:{out}")
    (out / META_FILE).write_text("{not json")
    with pytest.raises(ValueError, match="unreadable"):
        load_scorer(f"trained:{out}")
    (out / META_FILE).write_text(json.dumps({"kind": "implicit", "weights": {}}))
    with pytest.raises(ValueError, match="not a 'trained' one"):
        load_scorer(f"trained:{out}")


def _write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_cli_label_then_train_then_score(tiny_model_dir, tmp_path, capsys):
    labels = tmp_path / "labels.jsonl"
    rc = main(["prm", "label", "--policy", str(tiny_model_dir), "--data", "builtin:arith:level=easy",
               "--n", "2", "--samples", "2", "--k", "2", "--max-new-tokens", "16", "-o", str(labels)])
    err = capsys.readouterr().err
    assert rc == 0 and "label budget" in err and '"rollouts"' in err
    rows = [json.loads(line) for line in labels.read_text().splitlines()]
    assert len(rows) == 4 and all(len(r["soft_labels"]) == len(r["steps"]) for r in rows)
    out = tmp_path / "prm"
    rc = main(["prm", "train", str(labels), "--base", str(tiny_model_dir), "-o", str(out),
               "--steps", "3", "--batch-size", "2", "--labels-from", "hard"])
    err = capsys.readouterr().err
    assert rc == 0 and f"trained:{out}" in err
    assert json.loads((out / META_FILE).read_text())["label_rollouts"] == sum(r["mc_rollouts"] + 1 for r in rows)
    scored = tmp_path / "scored.jsonl"
    _write_jsonl(tmp_path / "in.jsonl", [{"prompt": rows[0]["prompt"], "completion": "Step 1: 1+1=2\nAnswer: 2"}])
    assert main(["prm", "score", "--scorer", f"trained:{out}", str(tmp_path / "in.jsonl"), "-o", str(scored)]) == 0
    assert len(json.loads(scored.read_text())["veristep"]["step_scores"]) == 2


def test_cli_train_bad_input_is_one_line_never_a_model(tiny_model_dir, tmp_path, capsys):
    good = {"prompt": "Compute: 1+2\n", "steps": ["Step 1: 1+2=3", "Answer: 3"], "soft_labels": [1, 1]}
    labels = _write_jsonl(tmp_path / "labels.jsonl", [
        good, "{bad json", {"prompt": "p", "steps": ["a"]},
        {"prompt": "p", "completion": "a\nb\nc", "soft_labels": [1, 0]},
    ])
    out = tmp_path / "prm"
    rc = main(["prm", "train", str(labels), "--base", str(tiny_model_dir), "-o", str(out), "--steps", "2"])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err
    assert "labels.jsonl:2:" in err and "labels.jsonl:3: missing key 'soft_labels'" in err
    assert "labels.jsonl:4: 2 labels for 3 steps" in err
    assert (out / META_FILE).exists()  # trained on the one good line

    only_bad = _write_jsonl(tmp_path / "bad.jsonl", [{"steps": ["a"], "soft_labels": [1]}])
    rc = main(["prm", "train", str(only_bad), "--base", str(tiny_model_dir), "-o", str(tmp_path / "none")])
    err = capsys.readouterr().err
    assert rc == 1 and "nothing trained" in err and not (tmp_path / "none").exists()

    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    rc = main(["prm", "train", str(labels), "--base", str(broken), "-o", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert rc == 2 and "cannot load base model" in err and "Traceback" not in err
    assert len(err.strip().splitlines()[-1]) < 400 and not (tmp_path / "x").exists()

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    assert main(["prm", "train", str(labels), "--base", str(tiny_model_dir), "-o", str(foreign)]) == 2
    assert "not a trained PRM folder" in capsys.readouterr().err
    assert main(["prm", "train", str(tmp_path / "missing.jsonl"), "--base", str(tiny_model_dir),
                 "-o", str(tmp_path / "y")]) == 2
    capsys.readouterr()
    assert main(["prm", "calibrate", "--data", str(labels), "--scorer", f"trained:{tmp_path / 'nope'}"]) == 2
    assert "cannot load scorer" in capsys.readouterr().err


def test_cli_train_help_documents_the_command(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["prm", "train", "--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0
    for word in ("--base", "--labels-from", "--kind", "implicit", "trained:OUTPUT", "resumes"):
        assert word in out

"""The implicit (PRIME) PRM: token rewards beta*log(pi_phi/pi_ref), online updates from outcomes."""

from __future__ import annotations

import io
import json
import math

import pytest
import torch
from veristep.prm import load_scorer
from veristep.prm.implicit import ImplicitPRM, load_implicit, train_implicit
from veristep.prm.metrics import auroc
from veristep.prm.train import META_FILE
from veristep.train.demo import task

from veristep.cli import main

torch.set_num_threads(1)


def _demos(n, seed):
    problems = task.make_problems(n, seed=seed, level="easy")
    d = task.make_noisy_demonstrations(problems, seed=seed, step_error_rate=0.25, answer_error_rate=0.2)
    return [x.prompt for x in d], [x.completion for x in d], [float(x.correct) for x in d]


def test_starts_neutral_and_sums_token_rewards_per_step(tiny_model_dir):
    prm = load_scorer(f"implicit:{tiny_model_dir}", beta=0.1)
    assert isinstance(prm, ImplicitPRM)
    prompts, completions, _ = _demos(3, 0)
    res = prm.score_batch(prompts, completions)
    for r, c in zip(res, completions, strict=True):
        assert r.steps == c.split("\n") and r.scores == [0.5] * len(r.steps)  # phi == ref
    # After an update phi differs from ref: a step's reward is the sum of its tokens' rewards,
    # and mode "q" scores sigmoid of the running sum.
    prm.update(prompts, completions, [1.0, 0.0, 1.0])
    tokens = prm.token_rewards(prompts[:1], completions[:1])[0]
    steps = prm.step_rewards(prompts[:1], completions[:1])[0]
    assert len(tokens) == len(completions[0])  # one character, one token
    assert sum(steps) == pytest.approx(sum(tokens), abs=1e-5)
    first = len(completions[0].split("\n")[0]) + 1  # the newline after a step belongs to it
    assert steps[0] == pytest.approx(sum(tokens[:first]), abs=1e-5)
    q = prm.score(prompts[0], completions[0]).scores
    assert q[-1] == pytest.approx(1 / (1 + math.exp(-sum(tokens))), abs=1e-5)


def test_steps_stored_with_blank_lines_score_as_the_policy_writes_them(tiny_model_dir):
    prm = load_implicit(str(tiny_model_dir), beta=0.1, lr=1e-3)
    prompts, completions, ys = _demos(4, 1)
    prm.update(prompts, completions, ys)
    a = prm.score(prompts[0], completions[0])
    spaced = completions[0].replace("\n", "\n\n")
    b = prm.score(prompts[0], spaced)
    assert b.scores == pytest.approx(a.scores, abs=1e-6)
    assert [spaced[x:y] for x, y in b.spans] == a.steps


def test_online_updates_separate_right_from_wrong_completions(tiny_model_dir):
    """The acceptance test of the trainer hook: score, then update from outcomes, a few rounds."""
    prm = load_implicit(str(tiny_model_dir), beta=0.1, lr=5e-4, batch_size=32)
    train_p, train_c, train_y = _demos(64, 1)
    held_p, held_c, held_y = _demos(64, 2)

    def separation(p, c, y):
        return auroc([sum(r) for r in prm.step_rewards(p, c)], y)

    assert separation(held_p, held_c, held_y) == 0.5  # every reward is 0 at initialisation
    costs = []
    for r in range(15):
        part = slice((r * 16) % 64, (r * 16) % 64 + 16)
        prm.score_batch(train_p[part], train_c[part])  # what the trainer reads before the update
        costs.append(prm.update(train_p[part], train_c[part], train_y[part]))
    assert separation(train_p, train_c, train_y) > 0.65
    assert separation(held_p, held_c, held_y) > 0.58
    assert all(c["seqs"] == 16 and c["tokens"] > 0 and c["backward_s"] > 0 for c in costs)
    assert prm.stats["updates"] == 15 and prm.stats["update_seqs"] == 240


def test_state_dict_resumes_the_same_reward_model(tiny_model_dir):
    p, c, y = _demos(8, 6)
    a = load_implicit(str(tiny_model_dir), beta=0.1, lr=1e-3)
    a.update(p, c, y)
    b = load_implicit(str(tiny_model_dir), beta=0.1, lr=1e-3)
    buffer = io.BytesIO()  # through bytes, as the trainer's checkpoint file carries it
    torch.save(a.state_dict(), buffer)
    buffer.seek(0)
    b.load_state_dict(torch.load(buffer, weights_only=False))
    a.update(p, c, y)
    b.update(p, c, y)
    for x, z in zip(b.step_rewards(p[:2], c[:2]), a.step_rewards(p[:2], c[:2]), strict=True):
        assert x == pytest.approx(z, abs=1e-6)
    assert b.stats["updates"] == 2
    with pytest.raises(ValueError, match="beta"):
        load_implicit(str(tiny_model_dir), beta=0.2).load_state_dict(a.state_dict())


def test_update_contract_and_bad_options(tiny_model_dir):
    prm = load_implicit(str(tiny_model_dir))
    with pytest.raises(ValueError, match="one outcome reward per completion"):
        prm.update(["a"], ["b"], [])
    assert math.isnan(prm.update([], [], [])["loss"])
    with pytest.raises(ValueError, match="beta"):
        load_implicit(str(tiny_model_dir), beta=0)
    with pytest.raises(ValueError, match="mode"):
        load_implicit(str(tiny_model_dir), mode="mean")
    with pytest.raises(ValueError, match="no model folder"):
        load_scorer("implicit:/no/such/folder")


def test_saved_implicit_prm_loads_back_with_its_reference(tiny_model_dir, tmp_path):
    prm = load_implicit(str(tiny_model_dir), beta=0.1, lr=1e-3)
    p, c, y = _demos(8, 4)
    summary = train_implicit(prm, [{"prompt": a, "completion": b, "correct": bool(v)} for a, b, v in zip(p, c, y, strict=True)],
                             steps=3, batch_size=4, seed=0, output=tmp_path / "imp")
    assert summary["updates"] == 3 and (tmp_path / "imp" / META_FILE).exists()
    again = load_scorer(f"implicit:{tmp_path / 'imp'}")
    assert again.beta == 0.1 and again.stats["updates"] == 3
    assert again.score(p[0], c[0]).scores == pytest.approx(prm.score(p[0], c[0]).scores, abs=1e-6)
    # A truncated weights file is refused, not loaded half-way.
    w = tmp_path / "imp" / "reference" / "model.safetensors"
    w.write_bytes(w.read_bytes()[:100])
    with pytest.raises(ValueError, match="wrong size"):
        load_scorer(f"implicit:{tmp_path / 'imp'}")


def test_cli_trains_an_implicit_prm_from_outcomes(tiny_model_dir, tmp_path, capsys):
    p, c, y = _demos(6, 5)
    rows = [json.dumps({"prompt": a, "completion": b, "correct": bool(v)}) for a, b, v in zip(p, c, y, strict=True)]
    rows.append(json.dumps({"prompt": "x", "completion": "y"}))
    data = tmp_path / "traces.jsonl"
    data.write_text("\n".join(rows) + "\n")
    out = tmp_path / "imp"
    rc = main(["prm", "train", str(data), "--kind", "implicit", "--base", str(tiny_model_dir),
               "-o", str(out), "--steps", "2", "--batch-size", "3", "--lr", "1e-3"])
    err = capsys.readouterr().err
    assert rc == 1 and "traces.jsonl:7: missing key 'correct'" in err and f"implicit:{out}" in err
    assert json.loads((out / META_FILE).read_text())["stats"]["updates"] == 2

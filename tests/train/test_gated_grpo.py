"""End-to-end trainer runs on CPU with the tiny model: every advantage method, metrics, resume."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from veristep.train.checkpoint import latest_checkpoint
from veristep.train.config import make_config
from veristep.train.gated_grpo import train
from veristep.train.tracking import STEP_METRICS, read_metrics

METHODS = ("verigate", "grpo", "dr_grpo", "dapo", "avspo", "sign", "wapo", "prm_as_outcome")
#: Every estimator with the default objective, plus the estimators with their own loss preset.
RUNS = [(m, "dapo-clip-higher") for m in METHODS] + [
    ("grpo", "ppo-clip"), ("dr_grpo", "dr-grpo"), ("wapo", "wapo")]
REPO = Path(__file__).resolve().parents[2]


def _weights(model_dir: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def _max_change(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


@pytest.mark.parametrize(("method", "loss"), RUNS)
def test_each_method_trains_end_to_end(method, loss, small_config, tiny_model_dir):
    summary = train(make_config(**small_config, advantage=method, loss=loss))
    assert (summary["advantage"], summary["loss"]) == (method, loss)
    assert summary["loss_settings"] == make_config(loss=loss, max_completion_len=8).loss_settings().to_dict()
    rows = read_metrics(summary["metrics_path"])
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        missing = [k for k in STEP_METRICS if k not in row]
        assert not missing, f"{method}: metrics line lacks {missing}"
        unlisted = sorted(set(row) - {"step", *STEP_METRICS})
        assert not unlisted, f"{method}: logs names STEP_METRICS does not list: {unlisted}"
        assert math.isfinite(row["loss/policy"]) and row["train/skipped_updates"] == 0
        assert 0.0 <= row["gate/acr"] <= 1.0 and 0.0 <= row["adv/nonzero_frac"] <= 1.0
    signal = any(r["adv/nonzero_frac"] > 0 for r in rows)
    change = _max_change(_weights(tiny_model_dir), _weights(Path(summary["final_model"])))
    # Parameters move exactly when some token carried a non-zero advantage.
    assert (change > 0) == signal, (method, change, [r["adv/nonzero_frac"] for r in rows])
    if method in ("grpo", "sign", "verigate", "avspo"):
        assert signal, f"{method}: mixed first-character rewards must give some advantage"
    if method == "sign":  # sign advantages never vanish, whatever the group
        assert all(r["adv/nonzero_frac"] == 1.0 for r in rows)
    if method == "dapo":
        assert all("dapo/extra_rollouts" in r for r in rows)
    prm_used = sum(r["gate/prm_completions"] for r in rows)
    if method == "prm_as_outcome":
        assert prm_used == 2 * 2 * 4  # every completion of every step
    elif method != "verigate":
        assert prm_used == 0  # outcome-only methods never pay for the PRM
    else:  # only gated (collapsed, all-wrong) groups are scored
        assert prm_used == 4 * sum(r["gate/gated_groups"] for r in rows)


def test_summary_and_files(small_config, capsys):
    summary = train(make_config(**dict(small_config, eval_size=4, eval_interval=2)))
    out = Path(small_config["output_dir"])
    # The objective as run, resolved from the preset, is printed, summarised and recorded.
    assert "advantage verigate | loss dapo-clip-higher (eps 0.2/0.28, token-mean) |" in capsys.readouterr().err
    assert summary["loss_settings"] == {"loss": "dapo-clip-higher", "eps_low": 0.2, "eps_high": 0.28,
                                        "loss_agg": "token-mean", "loss_constant": 8.0}
    header = (out / "config.yaml").read_text().splitlines()[0]
    assert header.startswith("#") and "eps_high=0.28" in header and "loss_agg=token-mean" in header
    rows = read_metrics(out / "metrics.jsonl")
    assert rows[0]["eval/pass@1"] is None  # evaluated at step 2 only
    assert 0.0 <= rows[-1]["eval/pass@1"] <= rows[-1]["eval/pass@G"] <= 1.0
    assert json.loads((out / "summary.json").read_text())["steps"] == 2
    assert (out / "config.yaml").exists()
    assert summary["accuracy_before"] is not None and summary["accuracy_after"] is not None
    assert summary["rollouts"] == 2 * 2 * 4
    assert (Path(summary["final_model"]) / "config.json").exists()


def test_metric_names_are_documented_in_the_trainer_docs():
    page = (REPO / "docs" / "trainer.md").read_text(encoding="utf-8")
    section = page.split("## Metrics", 1)[-1]
    assert "## Metrics" in page
    missing = [k for k in STEP_METRICS if f"`{k}`" not in section]
    assert not missing, f"docs/trainer.md ## Metrics does not document {missing}"


def test_resume_continues_and_reproduces_an_uninterrupted_run(small_config, tmp_path):
    common = dict(small_config, reproducible_rollouts=True, checkpoint_interval=1, eval_interval=0)
    full = train(make_config(**dict(common, steps=2, output_dir=str(tmp_path / "full"))))
    part_dir = str(tmp_path / "part")
    first = train(make_config(**dict(common, steps=1, output_dir=part_dir)))
    assert first["steps"] == 1
    resumed = train(make_config(**dict(common, steps=2, output_dir=part_dir, resume=True)))
    assert resumed["steps"] == 2
    rows = read_metrics(Path(part_dir) / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]  # no duplicate or missing step lines
    full_rows = read_metrics(Path(full["metrics_path"]))
    assert rows[1]["reward/mean"] == full_rows[1]["reward/mean"]
    assert rows[1]["loss/policy"] == pytest.approx(full_rows[1]["loss/policy"], abs=1e-7)
    a, b = _weights(Path(full["final_model"])), _weights(Path(resumed["final_model"]))
    assert _max_change(a, b) < 1e-6
    assert resumed["rollouts"] == full["rollouts"]


def _rename_state_key(run_dir: str, old: str, new: str | None) -> None:
    """Rewrite the latest checkpoint's trainer.pt with one run-state key renamed (or dropped)."""
    path = latest_checkpoint(run_dir) / "trainer.pt"
    state = torch.load(path, weights_only=False)
    value = state.pop(old)
    if new is not None:
        state[new] = value
    torch.save(state, path)


def test_resume_reads_a_checkpoint_from_before_the_difficulty_rename(small_config, tmp_path):
    common = dict(small_config, reproducible_rollouts=True, checkpoint_interval=1, eval_interval=0)
    full = train(make_config(**dict(common, steps=2, output_dir=str(tmp_path / "full"))))
    part_dir = str(tmp_path / "part")
    train(make_config(**dict(common, steps=1, output_dir=part_dir)))
    _rename_state_key(part_dir, "difficulty", "pool")  # the key earlier versions wrote
    resumed = train(make_config(**dict(common, steps=2, output_dir=part_dir, resume=True)))
    # The per-prompt history came back: step 2 counts the prompts of both steps, as uninterrupted.
    counts = [{k: r[k] for k in ("difficulty/easy", "difficulty/frontier", "difficulty/hard")}
              for r in (read_metrics(Path(d) / "metrics.jsonl")[-1] for d in (full["output_dir"], part_dir))]
    assert counts[0] == counts[1] and sum(counts[1].values()) > small_config["prompts_per_step"]
    assert resumed["steps"] == 2


def test_resume_from_a_checkpoint_without_difficulty_state_says_so(small_config, tmp_path):
    run_dir = str(tmp_path / "run")
    common = dict(small_config, checkpoint_interval=1, output_dir=run_dir)
    train(make_config(**dict(common, steps=1)))
    _rename_state_key(run_dir, "difficulty", None)
    with pytest.raises(ValueError, match="no prompt difficulty state"):
        train(make_config(**dict(common, steps=2, resume=True)))


def test_resume_without_checkpoint_starts_fresh(small_config):
    summary = train(make_config(**dict(small_config, steps=1, resume=True)))
    assert summary["steps"] == 1


def test_tensorboard_sink(small_config):
    pytest.importorskip("tensorboard", reason="tensorboard is an optional extra (pip install tensorboard)")
    summary = train(make_config(**dict(small_config, steps=1, tensorboard=True)))
    events = list((Path(summary["output_dir"]) / "tensorboard").glob("events.*"))
    assert events and events[0].stat().st_size > 0


def test_mask_truncated_leaves_cut_completions_out(small_config, tiny_model_dir):
    # 8 new tokens from a random model almost never reach EOS: nearly everything is cut.
    summary = train(make_config(**dict(small_config, advantage="sign", mask_truncated=True)))
    rows = read_metrics(summary["metrics_path"])
    for r in rows:
        assert r["completion/truncated_frac"] > 0.5
        # sign advantages are never 0, so every non-zero token is an uncut completion's
        assert r["adv/nonzero_frac"] == pytest.approx(1.0 - r["completion/truncated_frac"], abs=0.3)
        assert r["adv/nonzero_frac"] < 1.0


def test_bf16_compute_keeps_float32_master_weights_that_move(small_config, tiny_model_dir):
    """In bf16 an AdamW step of 3e-5 rounds away on most weights; the trainer steps on float32."""
    from safetensors.torch import load_file

    summary = train(make_config(**dict(small_config, dtype="bfloat16", steps=1, lr=3e-5,
                                       advantage="grpo", prompts_per_step=4)))
    before = load_file(str(tiny_model_dir / "model.safetensors"))
    after = load_file(str(Path(summary["final_model"]) / "model.safetensors"))
    assert all(t.dtype == torch.float32 for t in after.values())
    moved = sum(int((after[k] != before[k]).sum()) for k in before)
    assert moved / sum(t.numel() for t in before.values()) > 0.5


@pytest.mark.parametrize(("advantage", "prm", "blamed"), [("verigate", "oracle", 1.0), ("grpo", "rule", 0.0)])
def test_credit_diagnostic_on_the_builtin_task(advantage, prm, blamed, small_config):
    # A random tiny model gets every built-in problem wrong: every group is gated, and the oracle
    # labels its first line wrong. Progress credit on oracle scores charges exactly that step.
    cfg = make_config(**dict(small_config, dataset="builtin:arith:level=medium", eval_dataset=None,
                             verifier="math", advantage=advantage, prm=prm, credit="progress",
                             train_size=16, max_completion_len=12))
    rows = read_metrics(train(cfg)["metrics_path"])
    for r in rows:
        assert r["gate/first_error_responses"] == 8
        assert r["gate/first_error_blamed"] == blamed
        assert r["credit/adv_first_error"] == (-1.0 if blamed else 0.0)
        assert r["credit/adv_on_track"] in (None, 0.0) and r["credit/adv_after_error"] in (None, 0.0)

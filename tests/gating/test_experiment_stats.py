"""The experiment script's statistics, reading rule and aggregation (benchmarks/gating_experiment.py)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gating_experiment.py"
spec = importlib.util.spec_from_file_location("gating_experiment", SCRIPT)
exp = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = exp  # dataclasses look their module up while the class is created
spec.loader.exec_module(exp)


def test_sign_flip_p_is_exact():
    # 3 positive pairs: only the all-plus and all-minus sign vectors reach |sum| = 6 -> 2/8
    assert exp.sign_flip_p([1.0, 2.0, 3.0]) == pytest.approx(2 / 8)
    # [3, -1]: sums 2, 4, -4, -2 -> |sum| >= 2 always
    assert exp.sign_flip_p([3.0, -1.0]) == 1.0
    assert exp.sign_flip_p([0.01] * 6) == pytest.approx(2 / 64)  # the smallest value with 6 seeds
    assert exp.sign_flip_p([]) is None


def test_mean_ci95_uses_student_t():
    out = exp.mean_ci95([1.0, 2.0, 3.0])
    half = 4.303 * 1.0 / math.sqrt(3)
    assert out["mean"] == 2.0 and out["sd"] == 1.0
    assert out["ci95"] == pytest.approx([2.0 - half, 2.0 + half])
    assert exp.mean_ci95([5.0])["ci95"] == [None, None]
    assert exp.t975(40) == 1.96


def test_eval_noise_se_pools_seeds():
    # two seeds, per-prompt differences with variance 1 over 4 prompts each: sqrt(2 * 1/4) / 2
    d = [1.0, -1.0, 1.0, -1.0]
    var = sum((x - 0) ** 2 for x in d) / 3
    assert exp.eval_noise_se([d, d]) == pytest.approx(math.sqrt(2 * var / 4) / 2)


def _rec(arm, seed, after, before=0.2, greedy=0.4):
    return {"arm": arm, "seed": seed, "advantage": arm, "prm": None, "credit": None, "placebo": None,
            "final": {"pass@1": after, "greedy": greedy, "pass@1_before": before, "greedy_before": 0.4,
                      "pass@1_per_prompt": None, "greedy_per_prompt": None},
            "curve": [{"rollouts": 0, "pass@1": before, "pass@1_se": 0.01},
                      {"rollouts": 100, "pass@1": after, "pass@1_se": 0.01}],
            "rollouts": 100, "mc_rollouts": 0, "prm_completions": 0, "optimizer_steps": 10,
            "train_s": 1.0, "prm_s": 0.0, "wall_s": 1.0, "diagnostic": {"gate/first_error_blamed": None}}


def test_summary_applies_the_reading_rule():
    recs = []
    for s in range(4):
        recs += [_rec("grpo", s, 0.27 + 0.001 * s), _rec("good", s, 0.33 + 0.002 * s),
                 _rec("placebo", s, 0.27), _rec("bad", s, 0.20 - 0.001 * s), _rec("same", s, 0.27 + 0.01 * (-1) ** s)]
    summary = exp.summarise(recs, ["grpo", "good", "placebo", "bad", "same"], budget=100)
    rows = {r["arm"]: r for r in summary["rows"]}
    assert summary["positive_control"]["passed"] and summary["positive_control"]["mean"] == pytest.approx(0.0715)
    assert rows["good"]["verdict"] == "helps"
    assert rows["bad"]["verdict"] == "hurts"
    assert rows["same"]["verdict"].startswith("null")
    assert rows["good"]["pass@1_vs_grpo"]["p_sign_flip"] == pytest.approx(2 / 16)
    assert rows["good"]["rollouts_to_grpo_final"] <= 100
    assert rows["bad"]["rollouts_to_grpo_final"] is None
    assert "helps" in exp.format_tables(summary)


def test_mass_matched_pairs_and_their_reading():
    recs = []
    for s in range(4):
        recs += [_rec("grpo", s, 0.27 + 0.001 * s), _rec("oracle@lr0.6", s, 0.272 + 0.001 * s + 0.004 * (-1) ** s),
                 _rec("grpo@lr2", s, 0.40), _rec("oracle", s, 0.45 + 0.002 * s)]
    arms = ["grpo", "oracle@lr0.6", "grpo@lr2", "oracle"]
    pairs = [("oracle@lr0.6", "grpo"), ("oracle", "grpo@lr2"), ("oracle", "missing")]
    summary = exp.summarise(recs, arms, budget=100, margin=0.02, matched_pairs=pairs)
    got = {(m["arm"], m["against"]): m for m in summary["matched_pairs"]}
    assert set(got) == {("oracle@lr0.6", "grpo"), ("oracle", "grpo@lr2")}  # a pair without runs is left out
    assert got[("oracle@lr0.6", "grpo")]["pass@1"]["mean"] == pytest.approx(0.002)
    assert got[("oracle@lr0.6", "grpo")]["reading"] == "within the margin"
    assert got[("oracle", "grpo@lr2")]["reading"] == "above 0"
    assert summary["matched_reading"] == "inconclusive"  # one pair each way
    both_equal = exp.summarise(recs, arms, budget=100, margin=0.02, matched_pairs=pairs[:1])
    assert both_equal["matched_reading"] == "step size"
    table = exp.format_tables(summary)
    assert "| oracle - grpo@lr2 |" in table and "above 0" in table


def test_each_method_at_its_best_rate_against_grpo_at_its_best():
    recs = []
    for s in range(4):
        recs += [_rec("grpo", s, 0.20 + 0.01 * s), _rec("grpo_lr", s, 0.30 + 0.01 * s),
                 _rec("grpo@lr4", s, 0.18), _rec("rule_prefix", s, 0.31 + 0.01 * s),
                 _rec("rule_prefix@lr2.62", s, 0.50 + 0.01 * s + 0.005 * (-1) ** s),
                 _rec("oracle_prefix@lr2.62", s, 0.301 + 0.01 * s + 0.004 * (-1) ** s)]
    arms = ["grpo", "grpo_lr", "grpo@lr4", "rule_prefix", "rule_prefix@lr2.62", "oracle_prefix@lr2.62"]
    summary = exp.summarise(recs, arms, budget=100, margin=0.02)
    best = summary["best_rates"]
    assert best["best"] == {"grpo": "grpo_lr", "rule_prefix": "rule_prefix@lr2.62",
                            "oracle_prefix": "oracle_prefix@lr2.62"}
    got = {m["arm"]: m for m in best["vs_grpo_best"]}
    assert got["rule_prefix@lr2.62"]["against"] == "grpo_lr" and got["rule_prefix@lr2.62"]["reading"] == "above 0"
    assert got["rule_prefix@lr2.62"]["pass@1"]["mean"] == pytest.approx(0.20)
    assert got["oracle_prefix@lr2.62"]["reading"] == "within the margin"
    assert "| rule_prefix@lr2.62 (best of 2 rates) - grpo_lr (best of 3) |" in exp.format_tables(summary)
    assert "best_rates" not in exp.summarise(recs, ["grpo", "rule_prefix"], budget=100)  # one rate each


def test_grpo_reaches_its_own_final_accuracy():
    # the curve's mean (numpy) and the final mean (fmean) may round apart in the last bit
    finals = [0.29875, 0.28825, 0.2825, 0.298, 0.2935, 0.295]  # fmean 0.29266666666666670, numpy ...663
    recs = [_rec("grpo", s, v) for s, v in enumerate(finals)]
    rows = exp.summarise(recs, ["grpo"], budget=100)["rows"]
    assert rows[0]["rollouts_to_grpo_final"] == 100


def test_arms_build_valid_trainer_configs(tmp_path):
    from veristep.train.config import make_config

    settings = exp.Settings()
    for arm in exp.ARMS:
        cfg = make_config(**exp.trainer_values(settings, arm, 0, tmp_path, 1, False))
        if arm in exp.PROBE_ARMS:
            assert cfg.credit == settings.probe_credit
    with pytest.raises(ValueError, match="unknown arm"):
        exp.trainer_values(settings, "nope", 0, tmp_path, 1, False)


def test_an_arm_at_a_scaled_learning_rate(tmp_path):
    """`ARM@lrS` is ARM with its learning rate times S (an lr sweep of any arm)."""
    from veristep.train.config import Config, make_config

    settings = exp.Settings()
    cfg = make_config(**exp.trainer_values(settings, "oracle_prefix@lr0.62", 0, tmp_path, 1, False))
    assert cfg.lr == pytest.approx(0.62 * Config.lr) and cfg.prm == "oracle" and cfg.credit == "prefix"
    assert make_config(**exp.trainer_values(settings, "grpo@lr2.62", 0, tmp_path, 1, False)).lr == pytest.approx(
        2.62 * Config.lr)
    for bad in ("nope@lr2", "grpo@lr", "grpo@lr-1", "grpo@lrx", "grpo@2"):
        with pytest.raises(ValueError):
            exp.trainer_values(settings, bad, 0, tmp_path, 1, False)


def test_aggregating_finished_runs_builds_no_warm_start(tmp_path):
    import json

    runs = tmp_path / "runs"
    for arm, after in (("grpo", 0.28), ("suffix", 0.27)):
        for seed in range(2):
            (runs / f"{arm}-seed{seed}").mkdir(parents=True)
            rec = {**_rec(arm, seed, after + 0.001 * seed), "output_dir": str(runs / f"{arm}-seed{seed}")}
            (runs / f"{arm}-seed{seed}" / "record.json").write_text(json.dumps(rec))
    warm = tmp_path / "warmstart"
    out = tmp_path / "results" / "agg"
    assert exp.main(["--arms", "grpo,suffix", "--extra-arms", "", "--seeds", "2", "--from-runs",
                     "--runs-dir", str(runs), "--warmstart-dir", str(warm), "--results", str(out)]) == 0
    assert not warm.exists()  # minutes of CPU saved: aggregation trains nothing
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["reduced"] and len(report["runs"]) == 4
    row = {r["arm"]: r for r in report["table"]}["suffix"]
    assert row["pass@1_vs_grpo"]["mean"] == pytest.approx(-0.01)


def _gpu_script_args(which: int = -1) -> list[str]:
    """The experiment arguments of one `exec` of benchmarks/gating_experiment_gpu.sh (-1: the last)."""
    import shlex

    text = (SCRIPT.parent / "gating_experiment_gpu.sh").read_text()
    head = 'exec "$PYTHON" benchmarks/gating_experiment.py'
    blocks = text.split(head)[1:]
    command = blocks[which].split('"$@"')[0].replace("\\\n", " ")
    return shlex.split(command)


def test_gpu_script_arguments_build_valid_runs(tmp_path):
    # The GPU scale-up has never had a GPU to run on: its flags, warm-start recipe and trainer
    # overrides are checked here, so a typo fails on CPU rather than after a GPU machine starts.
    import json

    from veristep.train.config import make_config
    from veristep.train.demo.warmstart import recipe_from_kwargs

    args = exp.parse_args(_gpu_script_args())
    recipe = recipe_from_kwargs(**json.loads(args.warmstart_recipe))
    assert recipe.hidden_size == 256 and args.device == "cuda"
    settings = exp.Settings(steps=args.steps, prompts_per_step=args.prompts_per_step, eval_size=args.eval_size,
                            eval_interval=args.eval_interval, device=args.device, overrides=exp._overrides(args.set))
    assert settings.rollout_budget == 10 * exp.Settings().rollout_budget
    arms = [a for a in (args.arms + "," + args.extra_arms).split(",") if a]
    assert {"grpo", "suffix", "progress", "placebo", "mc"} <= set(arms)
    for arm in arms:
        cfg = make_config(**exp.trainer_values(settings, arm, 0, tmp_path, 1, False))
        assert cfg.device == "cuda" and cfg.micro_batch_size == 320


def test_gpu_script_runs_the_step_credit_condition(tmp_path):
    import json

    from veristep.train.config import make_config
    from veristep.train.demo.warmstart import CONDITION_RECIPES, recipe_from_kwargs

    args = exp.parse_args(_gpu_script_args(0))
    assert args.condition == "chain8" and args.seeds == 6 and args.device == "cuda"
    recipe = json.loads(args.warmstart_recipe)
    assert {k: v for k, v in recipe.items() if k in CONDITION_RECIPES["chain8"]} == CONDITION_RECIPES["chain8"]
    recipe_from_kwargs(**recipe)
    setup = exp.CONDITION_SETUP["chain8"]
    settings = exp.Settings(dataset=exp.CONDITIONS["chain8"], steps=args.steps, device=args.device,
                            overrides={**setup["overrides"], **exp._overrides(args.set)},
                            grpo_lr_scale=args.grpo_lr_scale)
    arms = [a for a in (args.arms + "," + args.extra_arms).split(",") if a]
    assert {"grpo", "oracle_prefix", "placebo_prefix", "rule_prefix", "grpo@lr2.62", "rule_prefix@lr2.62",
            "implicit_prefix@lr2.62"} <= set(arms)
    settings.warmstart_dir = args.warmstart_dir
    for arm in arms:
        cfg = make_config(**exp.trainer_values(settings, arm, 0, tmp_path, 1, False))
        assert cfg.device == "cuda" and cfg.max_completion_len == 180 and not cfg.eval_greedy
        if arm.startswith("implicit"):  # the PRM starts from this script's own warm start
            assert cfg.prm == "implicit:runs/warmstart-chain8-gpu,lr=5e-4"
    lr = make_config(**exp.trainer_values(settings, "grpo_lr", 0, tmp_path, 1, False)).lr
    assert lr == pytest.approx(1.62 * 3e-5)


def test_aggregation_recollects_runs_from_their_folders(tmp_path):
    # A record written by older code lacks completion lengths; --from-runs rebuilds it from the
    # run's metrics and summary, so a new diagnostic reaches runs that finished before it existed.
    import json

    out = tmp_path / "min-seed0"
    out.mkdir()
    lengths = [56.0] * 10 + [50.0] * 20 + [26.0] * 10
    rows = [{"step": i + 1, "completion/len_mean": v, "train/rollouts_total": 64 * (i + 1),
             "eval/pass@1": 0.05 if i == len(lengths) - 1 else None, "gate/first_error_blamed": 0.5}
            for i, v in enumerate(lengths)]
    (out / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (out / "summary.json").write_text(json.dumps({"steps": 40, "rollouts": 2560, "accuracy_before": 0.2,
                                                  "accuracy_after": 0.05, "advantage": "verigate"}))
    old = _rec("min", 0, 0.05)  # as older code wrote it: no "completion_len"
    (out / "record.json").write_text(json.dumps({**old, "trainer_calls": 1, "output_dir": str(out)}))
    rec = exp.recollect(out / "record.json")
    assert rec["completion_len"] == {"first10": 56.0, "last10": 26.0}
    assert rec["final"]["pass@1"] == 0.05 and rec["optimizer_steps"] == 40
    assert rec["diagnostic"]["gate/first_error_blamed"] == 0.5
    table = exp.format_tables(exp.summarise([rec], ["min"], budget=2560))
    assert "| 56 -> 26 |" in table
    (out / "summary.json").unlink()  # a folder without its summary: the record as written
    assert "completion_len" not in exp.recollect(out / "record.json")


def _runs(values):
    return {s: {"final": {"pass@1": v}} for s, v in enumerate(values)}


def test_share_of_ceiling_and_its_bootstrap():
    grpo, ceiling = _runs([0.10, 0.12, 0.11]), _runs([0.20, 0.22, 0.21])
    half = exp.share_of_ceiling(_runs([0.15, 0.17, 0.16]), grpo, ceiling)
    assert half["share"] == pytest.approx(0.5) and half["seeds"] == [0, 1, 2]
    assert half["ci95"][0] == pytest.approx(0.5) and half["ci95"][1] == pytest.approx(0.5)  # no spread
    noisy = exp.share_of_ceiling(_runs([0.10, 0.22, 0.16]), grpo, ceiling)
    assert noisy["ci95"][0] < noisy["share"] < noisy["ci95"][1]
    # A ceiling that does not beat GRPO leaves the share undefined, not infinite.
    assert exp.share_of_ceiling(_runs([0.2] * 3), grpo, grpo)["share"] is None


def test_verdict_with_an_equivalence_margin():
    inside = {"ci95": [-0.01, 0.015], "mean": 0.0}
    assert exp.verdict(inside, None).startswith("null")
    assert exp.verdict(inside, None, margin=0.02).startswith("equivalent")
    assert exp.verdict({"ci95": [-0.03, 0.01], "mean": -0.01}, None, margin=0.02).startswith("null")


def test_recollect_keeps_the_final_models_diagnosis(tmp_path):
    import json

    out = tmp_path / "grpo-seed0"
    out.mkdir()
    (out / "metrics.jsonl").write_text(json.dumps({"step": 1, "train/rollouts_total": 64, "eval/pass@1": 0.2}) + "\n")
    (out / "summary.json").write_text(json.dumps({"steps": 1, "rollouts": 64, "accuracy_before": 0.1,
                                                  "accuracy_after": 0.2}))
    mech = {"step_accuracy_mean": 0.8, "step_accuracy_by_position": [0.8, 0.8]}
    (out / "record.json").write_text(json.dumps({**_rec("grpo", 0, 0.2), "trainer_calls": 1, "mechanism": mech}))
    rec = exp.recollect(out / "record.json")
    assert rec["mechanism"] == mech
    row = exp.summarise([rec], ["grpo"], budget=64)["rows"][0]
    assert row["step_accuracy"]["mean"] == 0.8 and row["step_accuracy_by_position"] == [0.8, 0.8]


def _demo_rec(arm, seed, before, after):
    rec = _rec(arm, seed, sum(after) / len(after), before=sum(before) / len(before), greedy=None)
    rec["final"].update({"pass@1_per_prompt": after, "pass@1_before_per_prompt": before})
    return rec


def test_brief_summary_puts_grpo_beside_the_step_credit_arm():
    before = [0.0, 0.25, 0.0, 0.25]
    grpo, step = [0.25, 0.5, 0.0, 0.25], [0.75, 0.5, 0.25, 0.5]
    run = [_demo_rec("grpo", 0, before, grpo), _demo_rec("rule_prefix@lr2.62", 0, before, step)]
    # the committed experiment: 3 seeds, differences 0.10, 0.20, 0.30 -> mean 0.20, t(2) interval
    ref = {"runs": [_rec("grpo", s, 0.30) for s in range(3)]
           + [_rec("rule_prefix@lr2.62", s, 0.40 + 0.1 * s) for s in range(3)]}
    text = exp.brief_summary(run, ref)
    # after, with the SE over prompts: grpo 25.0, sd of [.25,.5,0,.25] = 0.2041 -> SE 10.2
    assert "| grpo | 12.5 | 25.0 ± 10.2 | +12.5 |" in text
    assert "| rule_prefix@lr2.62 | 12.5 | 50.0 ± 10.2 | +37.5 |" in text
    # the paired difference over prompts: [.5, 0, .25, .25] -> mean 25.0, SE 10.2
    half = 4.303 * 0.1 / math.sqrt(3)
    assert (f"| rule_prefix@lr2.62 - grpo | +25.0 ± 10.2 | +20.0 [{100 * (0.2 - half):+.1f}, "
            f"{100 * (0.2 + half):+.1f}], 3 seeds |") in text
    # the committed experiment's arm means sit beside this run's
    assert "| grpo | 3 | 30.0 (0.0) |" in text and "| rule_prefix@lr2.62 | 3 | 50.0 (10.0) |" in text


def test_brief_summary_without_a_committed_experiment():
    before = [0.0, 0.5]
    run = [_demo_rec("grpo", 0, before, [0.5, 0.5]), _demo_rec("rule_prefix", 0, before, [1.0, 0.5])]
    text = exp.brief_summary(run, None)
    assert "| rule_prefix - grpo | +25.0 ± 25.0 | - |" in text


def test_share_of_ceiling_at_the_arms_own_learning_rate():
    recs = []
    for s in range(3):
        recs += [_rec("grpo", s, 0.20), _rec("oracle_prefix", s, 0.30), _rec("grpo@lr2", s, 0.40),
                 _rec("oracle_prefix@lr2", s, 0.60), _rec("rule_prefix@lr2", s, 0.50)]
    arms = ["grpo", "oracle_prefix", "grpo@lr2", "oracle_prefix@lr2", "rule_prefix@lr2"]
    rows = {r["arm"]: r for r in exp.summarise(recs, arms, budget=100, ceiling_arm="oracle_prefix")["rows"]}
    same = rows["rule_prefix@lr2"]["share_of_ceiling_same_rate"]
    # (0.50 - 0.40) / (0.60 - 0.40) at 2x, not (0.50 - 0.20) / (0.30 - 0.20) against the 1x arms
    assert same["share"] == pytest.approx(0.5) and same["against"] == ["grpo@lr2", "oracle_prefix@lr2"]
    assert rows["rule_prefix@lr2"]["share_of_ceiling"]["share"] == pytest.approx(3.0)
    assert "share_of_ceiling_same_rate" not in rows["oracle_prefix@lr2"]  # the ceiling itself
    assert "share_of_ceiling_same_rate" not in rows["grpo@lr2"]
    assert "| rule_prefix@lr2 | 300 % [300, 300] | 50 % [50, 50] |" in exp.format_tables(
        exp.summarise(recs, arms, budget=100, ceiling_arm="oracle_prefix"))


def test_a_costly_arm_measures_its_step_cost_before_spending_the_budget():
    # The first call is one step, whatever a step costs.
    assert exp.next_chunk(0, 0, budget=3200, per_step=64) == 1
    # Monte-Carlo continuations made that step cost 1,244 rollouts: one more fits, not two.
    assert exp.next_chunk(1, 1244, budget=3200, per_step=64) == 1
    assert exp.next_chunk(2, 2488, budget=3200, per_step=64) == 0
    # A step of one batch: most of what is left in one call, and never past the budget.
    assert exp.next_chunk(1, 64, budget=3200, per_step=64) == int(0.8 * 3136 / 64)
    assert exp.next_chunk(49, 3136, budget=3200, per_step=64) == 1
    assert exp.next_chunk(50, 3200, budget=3200, per_step=64) == 0
    assert exp.next_chunk(0, 0, budget=32, per_step=64) == 0

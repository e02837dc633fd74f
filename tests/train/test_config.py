"""The configuration dataclass as CLI and YAML, and its start-up validation."""

from __future__ import annotations

import pytest
from veristep.train.config import Config, ConfigError, make_config, parse_args


def test_defaults_are_the_builtin_cpu_job():
    cfg = Config().validate()
    assert (cfg.model, cfg.dataset, cfg.verifier, cfg.prm, cfg.advantage) == (
        "builtin:warmstart", "builtin:arith:level=medium", "math", "rule", "verigate")
    # the recipe of docs/trainer.md ("The default run"), and an evaluation that can tell
    assert (cfg.group_size, cfg.prompts_per_step, cfg.lr, cfg.steps) == (4, 16, 3e-5, 150)
    assert (cfg.eval_size, cfg.eval_samples, cfg.eval_greedy, cfg.placebo) == (500, 4, True, "")


@pytest.mark.parametrize(("field", "value"), [
    ("advantage", "ppo"), ("loss_agg", "sum"), ("group_size", 1), ("temperature", 0.0),
    ("rollout", "sglang"), ("eps_low", 1.5), ("gate", "never"), ("verifier_weights", "1,2"),
    ("old_logprobs", "engine"), ("credit", "sum"),
])
def test_invalid_values_name_the_field(field, value):
    with pytest.raises(ConfigError, match=field):
        make_config(**{field: value})


def test_prm_methods_need_a_prm():
    with pytest.raises(ConfigError, match="prm"):
        make_config(advantage="verigate", prm="")
    assert make_config(advantage="grpo", prm="").prm == ""


def test_yaml_then_flags(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("group_size: 4\nlr: 0.001\nadvantage: grpo\nchat_template: true\n")
    cfg = parse_args(["--config", str(path), "--lr", "0.01", "--no-chat-template"])
    assert cfg.group_size == 4 and cfg.advantage == "grpo"
    assert cfg.lr == 0.01 and cfg.chat_template is False  # flags win over the file


def test_yaml_unknown_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("group_sise: 4\n")
    with pytest.raises(SystemExit):
        parse_args(["--config", str(path)])
    with pytest.raises(ConfigError, match="group_sise"):
        make_config(group_sise=4)


def test_cli_subcommand_is_registered():
    from veristep.cli import build_parser

    args = build_parser().parse_args(["train", "--steps", "3", "--advantage", "grpo"])
    assert args.steps == 3 and args.advantage == "grpo" and callable(args.func)


@pytest.mark.parametrize(("loss", "expected"), [
    ("dapo-clip-higher", (0.2, 0.28, "token-mean")),
    ("ppo-clip", (0.2, 0.2, "sequence-mean")),
    ("dr-grpo", (0.2, 0.2, "constant")),
    ("wapo", (0.2, 0.28, "winner-constant")),
])
def test_loss_presets_resolve_to_their_documented_values(loss, expected):
    settings = make_config(loss=loss, max_completion_len=64).loss_settings()
    assert (settings.eps_low, settings.eps_high, settings.agg) == expected
    assert settings.preset == loss and settings.constant == 64.0


def test_default_loss_is_dapo_clip_higher_for_every_estimator():
    # The estimator never changes the objective: dr_grpo and wapo used to force `constant`.
    for advantage in ("verigate", "grpo", "dr_grpo", "wapo"):
        s = make_config(advantage=advantage).loss_settings()
        assert (s.preset, s.eps_low, s.eps_high, s.agg) == ("dapo-clip-higher", 0.2, 0.28, "token-mean")


def test_explicit_fields_override_a_preset_field_by_field():
    s = make_config(loss="ppo-clip", eps_high=0.28).loss_settings()
    assert (s.eps_low, s.eps_high, s.agg) == (0.2, 0.28, "sequence-mean")
    s = make_config(loss="dr-grpo", loss_agg="token-mean", eps_low=0.1).loss_settings()
    assert (s.eps_low, s.eps_high, s.agg) == (0.1, 0.2, "token-mean")
    s = make_config(loss="dr-grpo", loss_constant=512.0).loss_settings()
    assert s.constant == 512.0
    cfg = parse_args(["--loss", "wapo", "--eps-high", "0.3"])
    assert (cfg.loss_settings().agg, cfg.loss_settings().eps_high) == ("winner-constant", 0.3)


@pytest.mark.parametrize(("values", "field"), [
    ({"loss": "grpo"}, "loss"),
    ({"loss": "ppo-clip", "loss_constant": 100.0}, "loss_constant"),  # would be silently unused
    ({"loss_agg": "token-mean", "loss": "dr-grpo", "loss_constant": 100.0}, "loss_constant"),
    ({"eps_high": -0.1}, "eps_high"),
])
def test_loss_combinations_that_cannot_work_name_the_field(values, field):
    with pytest.raises(ConfigError, match=field):
        make_config(**values)


def test_renamed_field_says_its_new_name():
    with pytest.raises(ConfigError, match="pool_ema.*renamed to difficulty_ema"):
        make_config(pool_ema=0.5)
    assert make_config(difficulty_ema=0.5).difficulty_ema == 0.5


def test_centring_is_a_suffix_credit_option():
    assert make_config(credit="min").credit == "min"
    with pytest.raises(ConfigError, match="centre_scores"):
        make_config(credit="progress", centre_scores=True)

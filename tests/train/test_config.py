"""The configuration dataclass as CLI and YAML, and its start-up validation."""

from __future__ import annotations

import pytest
from veristep.train.config import Config, ConfigError, make_config, parse_args


def test_defaults_are_the_builtin_cpu_job():
    cfg = Config().validate()
    assert (cfg.model, cfg.dataset, cfg.verifier, cfg.prm, cfg.advantage) == (
        "builtin:warmstart", "builtin:arith", "math", "rule", "verigate")


@pytest.mark.parametrize(("field", "value"), [
    ("advantage", "ppo"), ("loss_agg", "sum"), ("group_size", 1), ("temperature", 0.0),
    ("rollout", "sglang"), ("eps_low", 1.5), ("gate", "never"), ("verifier_weights", "1,2"),
    ("old_logprobs", "engine"),
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

"""Conventions every `veristep` command shares: -o/--output, defaults in --help, exit codes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from veristep.cli import main


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "veristep", *args], capture_output=True,
                          text=True, timeout=120)


def test_bare_veristep_prints_help_and_exits_0():
    proc = _run()
    assert proc.returncode == 0, proc.stderr
    for command in ("verify", "audit", "prm", "train", "bench"):
        assert command in proc.stdout
    assert "Exit codes" in " ".join(proc.stdout.split())


@pytest.mark.parametrize(
    ("command", "defaults"),
    [
        (["verify"], ["(default: 256)", "(default: completion)",
                      "(default: local)", "(default: -)"]),
        (["audit"], ["(default: prompt_id)", "(default: 20)", "INPUT.audit.jsonl"]),
        (["prm", "score"], ["(default: prompt)", "(default: -)"]),
        (["prm", "calibrate"], ["(default: 1000)", "(default: 0.3)", "(default: min)",
                                "the dev split (default: 0)",
                                "pip install 'veristep[plot]'"]),
    ],
)
def test_help_shows_output_option_and_defaults(command, defaults, capsys):
    with pytest.raises(SystemExit) as info:
        main([*command, "--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "-o PATH, --output PATH" in text
    assert "--no-progress" in text
    for needle in defaults:
        assert needle in text


def test_usage_mistakes_exit_2_and_bare_groups_exit_0(capsys):
    with pytest.raises(SystemExit) as info:
        main(["verify"])  # KIND and INPUT missing
    assert info.value.code == 2
    assert main(["prm"]) == 0
    assert "score" in capsys.readouterr().out

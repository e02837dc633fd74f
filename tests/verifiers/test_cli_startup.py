"""Start-up of `veristep verify math` (issue 31.2): only the command's own module loads, and
sympy / Math-Verify load only when an item needs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROBE = r"""
import json, sys
from veristep.cli import main
code = main(sys.argv[1:])
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"torch", "sympy", "math_verify", "numpy",
                                                          "transformers", "starlette"})
print(json.dumps({"code": code, "heavy": heavy, "train": "veristep.train.config" in sys.modules}))
"""


def _run(tmp_path: Path, rows: list[dict]) -> tuple[dict, list[dict]]:
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-c", PROBE, "verify", "math", str(src), "--workers", "1",
                           "--no-progress", "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    probe = json.loads(proc.stdout.strip().splitlines()[-1])
    return probe, [json.loads(line)["veristep"] for line in out.read_text().splitlines()]


def test_verify_loads_neither_the_trainer_nor_sympy_when_exact_rules_decide(tmp_path):
    probe, results = _run(tmp_path, [{"completion": "so \\boxed{72}", "answer": "72"},
                                     {"completion": "the answer is 0.5", "answer": "\\frac{1}{2}"}])
    assert [r["status"] for r in results] == ["correct", "correct"]
    assert probe == {"code": 0, "heavy": [], "train": False}


def test_sympy_loads_when_an_item_needs_it(tmp_path):
    probe, results = _run(tmp_path, [{"completion": "\\boxed{(x+1)^2}", "answer": "x^2+2x+1"}])
    assert results[0]["status"] == "correct"
    assert "sympy" in probe["heavy"] and "torch" not in probe["heavy"]


def test_help_still_lists_every_command():
    proc = subprocess.run([sys.executable, "-m", "veristep", "--help"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0
    for command in ("verify", "audit", "prm", "train", "bench", "serve"):
        assert f"    {command} " in proc.stdout, command
    bad = subprocess.run([sys.executable, "-m", "veristep", "nosuch"], capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr

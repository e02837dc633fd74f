"""`veristep bench`: lists the benchmark scripts and runs one with its own arguments."""

from __future__ import annotations

import subprocess
import sys

from veristep.bench import available_benchmarks, benchmarks_dir
from veristep.cli import main


def _bench_dir(tmp_path):
    d = tmp_path / "benchmarks"
    d.mkdir()
    (d / "echo_bench.py").write_text(
        '"""Echo the arguments and exit with the first one."""\n'
        "import sys\nprint('args', sys.argv[1:])\nsys.exit(int(sys.argv[1]) if sys.argv[1:] else 0)\n"
    )
    (d / "broken.py").write_text("def (:\n")
    (d / "_helpers.py").write_text('"""Not a benchmark."""\n')
    return d


def test_lists_benchmarks_with_their_first_docstring_line(tmp_path, capsys):
    d = _bench_dir(tmp_path)
    assert available_benchmarks(d) == {
        "broken": "(unreadable script)",
        "echo_bench": "Echo the arguments and exit with the first one.",
    }
    assert main(["bench", "--dir", str(d)]) == 0
    out = capsys.readouterr().out
    assert "echo_bench" in out and "Echo the arguments" in out and "_helpers" not in out


def test_runs_a_benchmark_passing_arguments_and_exit_code(tmp_path):
    d = _bench_dir(tmp_path)
    cmd = [sys.executable, "-m", "veristep", "bench", "--dir", str(d), "echo_bench", "3", "--help"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert "args ['3', '--help']" in proc.stdout


def test_unknown_benchmark_and_missing_folder(tmp_path, capsys, monkeypatch):
    d = _bench_dir(tmp_path)
    assert main(["bench", "--dir", str(d), "nope"]) == 2
    assert "available: broken, echo_bench" in capsys.readouterr().err
    assert main(["bench", "--dir", str(tmp_path / "missing")]) == 2
    monkeypatch.setenv("VERISTEP_BENCHMARKS", str(d))
    assert benchmarks_dir() == d

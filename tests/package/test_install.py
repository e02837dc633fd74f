"""The distribution installs under `veristep.*` and never shadows other packages."""

from __future__ import annotations

import subprocess
import sys


def _run(code: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_subpackages_import_from_anywhere(tmp_path):
    proc = _run("import veristep.verifiers, veristep.prm, veristep.gating, veristep.train", tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_bare_folder_names_are_not_installed(tmp_path):
    code = (
        "import importlib.util as u\n"
        "for name in ('verifiers', 'prm', 'gating', 'train'):\n"
        "    spec = u.find_spec(name)\n"
        "    origin = (spec.origin or str(spec.submodule_search_locations)) if spec else ''\n"
        "    assert spec is None or 'veristep' not in origin, (name, origin)\n"
    )
    proc = _run(code, tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_console_command_has_help(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "veristep", "--help"], cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert "veristep" in proc.stdout

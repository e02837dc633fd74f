"""The distribution installs under `veristep.*` and never shadows other packages."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path


def _run(code: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_subpackages_import_from_anywhere(tmp_path):
    proc = _run("import veristep.common, veristep.verifiers, veristep.prm, veristep.gating, veristep.train",
                tmp_path)
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


# The source folders and the import names they install under (pyproject.toml's package-dir).
_ROOTS = {"veristep": "veristep", "common": "veristep.common", "verifiers": "veristep.verifiers",
          "prm": "veristep.prm", "gating": "veristep.gating", "train": "veristep.train"}
_REPO = Path(__file__).resolve().parents[2]


def _source_packages() -> dict[str, Path]:
    """Every package in the source folders (a folder with an __init__.py), by import name."""
    found = {}
    for folder, name in _ROOTS.items():
        for init in sorted((_REPO / folder).rglob("__init__.py")):
            rel = init.parent.relative_to(_REPO / folder)
            found[".".join((name, *rel.parts))] = init.parent
    return found


def test_built_wheel_holds_and_imports_every_subpackage(tmp_path):
    # Built from a copy so the check never writes build/ or egg-info into the checkout.
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for folder in _ROOTS:
        shutil.copytree(_REPO / folder, src / folder, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(_REPO / name, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    wheel_dir, target = tmp_path / "wheel", tmp_path / "site"
    build = [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(wheel_dir)]
    proc = subprocess.run([*build, str(src)], capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = wheel_dir.glob("veristep-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = _source_packages()
    assert {"veristep.verifiers.core", "veristep.verifiers.math", "veristep.verifiers.code",
            "veristep.verifiers.tools", "veristep.verifiers.cli"} <= set(packages)
    for name, folder in packages.items():
        for module in folder.glob("*.py"):  # supervisor.py is read as a file, not imported
            assert f"{name.replace('.', '/')}/{module.name}" in names, (name, module.name)

    install = [*pip, "install", "--no-deps", "--no-index", "--target", str(target), str(wheel)]
    proc = subprocess.run(install, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr
    code = (
        "import importlib, sys\n"
        f"target = {str(target)!r}\n"
        f"for name in {sorted(packages)!r}:\n"
        "    module = importlib.import_module(name)\n"
        "    assert module.__file__.startswith(target), (name, module.__file__)\n"
        "from veristep.verifiers.code.sandbox import _SUPERVISOR_SOURCE\n"
        "assert 'def _child(' in _SUPERVISOR_SOURCE\n"
        "from veristep.verifiers.core.registry import available_kinds, verifier_class\n"
        "for kind in available_kinds():\n"
        "    module = sys.modules[verifier_class(kind).__module__]\n"
        "    assert module.__file__.startswith(target), (kind, module.__file__)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(target)})
    assert proc.returncode == 0, proc.stderr

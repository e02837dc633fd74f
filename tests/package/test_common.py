"""`veristep.common`: below every part, and the deprecated old names of what moved into it."""

from __future__ import annotations

import subprocess
import sys


def _run(code: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-W", "always::DeprecationWarning", "-c", code],
        cwd=cwd, capture_output=True, text=True, timeout=120,
    )


def test_common_imports_no_part(tmp_path):
    code = (
        "import sys\n"
        "import veristep.common.jsonl_io\n"
        "parts = ('verifiers', 'prm', 'gating', 'train')\n"
        "loaded = [m for m in sys.modules if m.split('.')[:2] in [['veristep', p] for p in parts]]\n"
        "assert not loaded, loaded\n"
    )
    proc = _run(code, tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_old_jsonl_io_name_is_the_moved_module_and_warns(tmp_path):
    code = (
        "import veristep.common.jsonl_io as new\n"
        "from veristep.verifiers.cli import jsonl_io as old\n"
        "from veristep.verifiers.cli.jsonl_io import UsageError, _json_safe, run_command\n"
        "assert old is new and UsageError is new.UsageError and run_command is new.run_command\n"
        "assert _json_safe(float('nan')) is None\n"
    )
    proc = _run(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "DeprecationWarning: veristep.verifiers.cli.jsonl_io is deprecated" in proc.stderr
    assert "import veristep.common.jsonl_io" in proc.stderr


def test_no_part_imports_the_deprecated_name(tmp_path):
    # `veristep verify` on its own must not load the alias (it would warn every user).
    code = (
        "import sys\n"
        "import veristep.cli, veristep.verifiers.cli.verify, veristep.verifiers.cli.audit\n"
        "import veristep.prm.cli, veristep.train.data\n"
        "assert 'veristep.verifiers.cli.jsonl_io' not in sys.modules\n"
    )
    proc = _run(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "DeprecationWarning" not in proc.stderr

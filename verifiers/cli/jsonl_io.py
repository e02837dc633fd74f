"""Deprecated: moved to `veristep.common.jsonl_io`; this alias is removed in the next release.

Import `veristep.common.jsonl_io` instead. The conventions are shared by every part, so they
live below them all (docs/architecture.md, "Layers"), not in a verifiers edge.
"""

from __future__ import annotations

import sys
import warnings

from veristep.common import jsonl_io as _moved

warnings.warn(
    "veristep.verifiers.cli.jsonl_io is deprecated and removed in the next release; "
    "import veristep.common.jsonl_io",
    DeprecationWarning,
    stacklevel=2,
)

# The old name is the moved module itself, not a copy of its names: a monkeypatch through
# either name, a private helper, and `isinstance` on its error classes all keep working.
sys.modules[__name__] = _moved

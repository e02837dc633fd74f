"""Outcome verifiers: turn a completion into a reward with a status.

Layout: `core/` (result types, registry, combine, the worker pool), one folder per domain
(`math/`, `code/`, `tools/`, plus `format.py`), `cli/` (the JSONL command line) and
`adapters.py` (TRL and verl).
"""

from typing import Any

from .core.combine import WeightedVerifier, combine
from .core.registry import available_kinds, get_verifier, register_verifier
from .core.result import UNJUDGED, Status, Verifier, VerifyResult

__all__ = [
    "UNJUDGED",
    "Status",
    "Verifier",
    "VerifyResult",
    "WeightedVerifier",
    "available_kinds",
    "averify",
    "averify_batch",
    "combine",
    "get_verifier",
    "register_verifier",
]


def __getattr__(name: str) -> Any:
    """`averify` / `averify_batch` on first use: asyncio is a tenth of a second of every
    `veristep verify` start-up that never uses it."""
    if name in ("averify", "averify_batch"):
        from .core import aio

        return getattr(aio, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


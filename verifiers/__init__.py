"""Outcome verifiers: turn a completion into a reward with a status.

Layout: `core/` (result types, registry, combine, the worker pool), one folder per domain
(`math/`, `code/`, `tools/`, plus `format.py`), `cli/` (the JSONL command line) and
`adapters.py` (TRL and verl).
"""

from .core.aio import averify, averify_batch
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

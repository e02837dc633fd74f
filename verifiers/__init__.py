"""Outcome verifiers: turn a completion into a reward with a status."""

from .base import UNJUDGED, Status, Verifier, VerifyResult
from .combine import WeightedVerifier, combine
from .registry import available_kinds, get_verifier, register_verifier

__all__ = [
    "UNJUDGED",
    "Status",
    "Verifier",
    "VerifyResult",
    "WeightedVerifier",
    "available_kinds",
    "combine",
    "get_verifier",
    "register_verifier",
]

"""Outcome verifiers: turn a completion into a reward with a status."""

from .base import UNJUDGED, Status, Verifier, VerifyResult
from .registry import available_kinds, get_verifier

__all__ = ["UNJUDGED", "Status", "Verifier", "VerifyResult", "available_kinds", "get_verifier"]

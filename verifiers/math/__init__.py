"""Math answer verification: extract the final answer, normalise it, decide equivalence
(exact rules first, math-verify and sympy in killable worker processes)."""

from .extract import Extraction, ExtractionMethod, choice_letter, extract_answer
from .normalize import normalize_answer
from .verifier import CALL_GRACE_S, MathVerifier

__all__ = [
    "CALL_GRACE_S",
    "Extraction",
    "ExtractionMethod",
    "MathVerifier",
    "choice_letter",
    "extract_answer",
    "normalize_answer",
]

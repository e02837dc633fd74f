"""Math answer verification: extract the final answer, normalise it, decide equivalence
(exact rules first, math-verify and sympy in killable worker processes)."""

from .extract import Extraction, ExtractionMethod, choice_letter, extract_answer, reference_answer
from .normalize import normalize_answer
from .sympy_free import Reference, prepare_reference
from .verifier import CALL_GRACE_S, INLINE_CHARS, MathVerifier

__all__ = [
    "CALL_GRACE_S",
    "INLINE_CHARS",
    "Extraction",
    "ExtractionMethod",
    "MathVerifier",
    "Reference",
    "choice_letter",
    "extract_answer",
    "normalize_answer",
    "prepare_reference",
    "reference_answer",
]

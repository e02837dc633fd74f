"""Code verification: extract the program, run it against its tests in a sandbox, compare."""

from .reference import BadReference, CodeReference, IOTest, parse_reference
from .sandbox import Isolation, Limits, Sandbox, SandboxError, SandboxUnavailable
from .verifier import (
    LANGUAGES,
    CodeVerifier,
    Language,
    classify_step,
    extract_code,
    looks_like_prose,
    outputs_match,
)

__all__ = [
    "LANGUAGES",
    "BadReference",
    "CodeReference",
    "CodeVerifier",
    "IOTest",
    "Isolation",
    "Language",
    "Limits",
    "Sandbox",
    "SandboxError",
    "SandboxUnavailable",
    "classify_step",
    "extract_code",
    "looks_like_prose",
    "outputs_match",
    "parse_reference",
]

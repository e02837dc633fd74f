"""Code verification: extract the program, run it against I/O tests in a sandbox, compare."""

from .sandbox import Isolation, Limits, Sandbox, SandboxError, SandboxUnavailable
from .verifier import (
    LANGUAGES,
    CodeReference,
    CodeVerifier,
    IOTest,
    Language,
    extract_code,
    outputs_match,
    parse_reference,
)

__all__ = [
    "LANGUAGES",
    "CodeReference",
    "CodeVerifier",
    "IOTest",
    "Isolation",
    "Language",
    "Limits",
    "Sandbox",
    "SandboxError",
    "SandboxUnavailable",
    "extract_code",
    "outputs_match",
    "parse_reference",
]

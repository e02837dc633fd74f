"""One front door to every verifier kind: `get_verifier("math" | "code" | "tools" | "format")`."""

from __future__ import annotations

import importlib
from typing import Any

from .base import Verifier

# Lazy "module:Class" targets so importing the registry does not import sympy, torch, etc.
_KINDS: dict[str, str] = {
    "math": "veristep.verifiers.math:MathVerifier",
    "code": "veristep.verifiers.code:CodeVerifier",
    "tools": "veristep.verifiers.tools:ToolCallVerifier",
    "format": "veristep.verifiers.format:FormatVerifier",
}


def available_kinds() -> list[str]:
    """Return the verifier kinds `get_verifier` accepts."""
    return sorted(_KINDS)


def get_verifier(kind: str, **config: Any) -> Verifier:
    """Build the verifier registered under `kind` with keyword configuration."""
    try:
        target = _KINDS[kind]
    except KeyError:
        raise ValueError(
            f"unknown verifier kind {kind!r}; choose one of {', '.join(available_kinds())}"
        ) from None
    module_name, _, class_name = target.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls(**config)

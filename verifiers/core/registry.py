"""One front door to every verifier kind: `get_verifier("math" | "code" | "tools" | "format")`."""

from __future__ import annotations

import importlib
from typing import Any

from .aio import add_async_methods
from .result import Verifier

# Lazy "module:Class" targets so importing the registry does not import sympy, torch, etc.
_KINDS: dict[str, str | type] = {
    "math": "veristep.verifiers.math.verifier:MathVerifier",
    "code": "veristep.verifiers.code.verifier:CodeVerifier",
    "tools": "veristep.verifiers.tools.verifier:ToolCallVerifier",
    "format": "veristep.verifiers.format:FormatVerifier",
    "weighted": "veristep.verifiers.core.combine:WeightedVerifier",
}


def available_kinds() -> list[str]:
    """Return the verifier kinds `get_verifier` accepts."""
    return sorted(_KINDS)


def register_verifier(kind: str, target: str | type, *, replace: bool = False) -> None:
    """Register a verifier class (or a lazy "module:Class" string) under a new kind name."""
    if not kind or ":" in kind:
        raise ValueError(f"verifier kind {kind!r} must be a non-empty name without ':'")
    if isinstance(target, str) and target.count(":") != 1:
        raise ValueError(f"verifier target {target!r} must look like 'package.module:ClassName'")
    if kind in _KINDS and not replace:
        raise ValueError(f"verifier kind {kind!r} is already registered; pass replace=True")
    _KINDS[kind] = target


def verifier_class(kind: str) -> type:
    """Resolve `kind` (a registered name or a "package.module:ClassName" path) to its class."""
    if kind in _KINDS:
        target = _KINDS[kind]
    elif ":" in kind:  # a user's own verifier, importable by path
        target = kind
    else:
        raise ValueError(
            f"unknown verifier kind {kind!r}; choose one of {', '.join(available_kinds())} "
            "or give 'package.module:ClassName'"
        )
    if isinstance(target, type):
        return add_async_methods(target)
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and module_name.startswith(err.name):  # the verifier itself is missing
            raise ValueError(
                f"verifier kind {kind!r} needs module {module_name}, which is not installed"
            ) from err
        raise
    try:
        cls = getattr(module, class_name)
    except AttributeError:
        raise ValueError(f"module {module_name} has no verifier class {class_name!r}") from None
    # every kind gets `averify` / `averify_batch` on its own pool (core/aio.py)
    return add_async_methods(cls) if isinstance(cls, type) else cls


def get_verifier(kind: str, **config: Any) -> Verifier:
    """Build the verifier registered under `kind` with keyword configuration."""
    return verifier_class(kind)(**config)

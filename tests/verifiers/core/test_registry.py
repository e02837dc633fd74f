"""The registry: built-in kinds, user registration, "module:Class" paths, clear errors."""

from __future__ import annotations

import pytest
from veristep.verifiers import available_kinds, get_verifier, register_verifier
from veristep.verifiers.core.combine import WeightedVerifier
from veristep.verifiers.core.registry import verifier_class


def test_builtin_kinds_and_module_paths():
    assert {"math", "code", "tools", "format", "weighted"} <= set(available_kinds())
    assert verifier_class("weighted") is WeightedVerifier
    assert verifier_class("veristep.verifiers.core.combine:WeightedVerifier") is WeightedVerifier


def test_registration_rules(exact_cls):
    with pytest.raises(ValueError, match="already registered"):
        register_verifier("weighted", exact_cls)
    with pytest.raises(ValueError):
        register_verifier("bad:name", exact_cls)
    with pytest.raises(ValueError):
        register_verifier("lazy", "no_colon_here")
    register_verifier("lazy_exact", f"{exact_cls.__module__}:ExactVerifier", replace=True)
    assert get_verifier("lazy_exact").kind == "exact"


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("nope", "unknown verifier kind 'nope'"),
        ("veristep.verifiers.no_such_module:X", "needs module veristep.verifiers.no_such_module"),
        ("veristep.verifiers.core.combine:NoSuchClass", "has no verifier class 'NoSuchClass'"),
    ],
)
def test_errors_say_what_to_change(kind, message):
    with pytest.raises(ValueError, match=message):
        get_verifier(kind)

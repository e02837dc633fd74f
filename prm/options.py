"""The options of a step scorer spec (`oracle:eps=0.1,seed=1`, `mc:k=8`): one parser for every kind.

Kept apart from the scorers so that any of them, and the trainer's Monte-Carlo scorer, can read
their options without importing another scorer's module.
"""

from __future__ import annotations


def spec_kind(spec: str | None) -> str:
    """A scorer spec's kind, lower-case (`mc` of `mc:k=4`); "" for no spec."""
    return spec.partition(":")[0].strip().lower() if spec else ""


def parse_options(spec_tail: str, allowed: dict[str, type]) -> dict[str, object]:
    """`k=4,seed=1` -> {"k": 4, "seed": 1}, typed by `allowed`; unknown or bad values raise ValueError."""
    out: dict[str, object] = {}
    for item in filter(None, (p.strip() for p in spec_tail.split(","))):
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in allowed:
            raise ValueError(f"scorer option {item!r}: expected one of "
                             f"{', '.join(f'{k}=...' for k in allowed)}")
        try:
            out[name] = allowed[name](value.strip())
        except ValueError:
            raise ValueError(f"scorer option {name}={value!r}: not a {allowed[name].__name__}") from None
    return out

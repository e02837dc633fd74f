"""A weighted sum of verifiers that is itself a verifier (e.g. math correctness + 0.1 x format)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .registry import get_verifier
from .result import Verifier, VerifyResult


@dataclass
class Component:
    """One part of a weighted verifier: its name, the verifier and its weight."""

    name: str
    verifier: Verifier
    weight: float


class WeightedVerifier:
    """Reward = sum of weight x component reward; correctness and status come from the first
    (primary) component unless some component could not judge the item.

    The reference is either a mapping keyed by component name (a missing name gets None) or a
    single value, which goes to the primary component while the others get None.
    """

    kind = "weighted"

    def __init__(
        self,
        components: Mapping[str, float] | Sequence[tuple[str | Verifier, float]],
        *,
        configs: Mapping[str, Mapping[str, Any]] | None = None,
        workers: int | None = None,
    ) -> None:
        pairs = list(components.items()) if isinstance(components, Mapping) else list(components)
        if not pairs:
            raise ValueError("a weighted verifier needs at least one component")
        configs = dict(configs or {})
        self.components: list[Component] = []
        for entry in pairs:
            if not (isinstance(entry, (tuple, list)) and len(entry) == 2):
                raise ValueError(
                    f"components must be (kind or verifier, weight) pairs, got {entry!r}"
                )
            target, weight = entry
            self.components.append(self._component(target, weight, configs, workers))
        names = [c.name for c in self.components]
        unknown = sorted(set(configs) - set(names))
        if unknown:
            raise ValueError(f"configs for unknown components {unknown}; components are {names}")

    def _component(
        self, target: str | Verifier, weight: Any, configs: dict[str, Any], workers: int | None
    ) -> Component:
        if (
            isinstance(weight, bool)
            or not isinstance(weight, (int, float))
            or not math.isfinite(weight)
        ):
            raise ValueError(f"weight of {target!r} must be a finite number, got {weight!r}")
        taken = {c.name for c in self.components}
        if isinstance(target, str):
            if target in taken:
                raise ValueError(f"component {target!r} given twice")
            config = dict(configs.get(target, {}))
            if workers is not None:
                config.setdefault("workers", workers)
            return Component(target, get_verifier(target, **config), float(weight))
        if not isinstance(target, Verifier):
            raise ValueError(f"component {target!r} is neither a kind name nor a Verifier")
        name, n = target.kind, 2
        while name in taken:  # two verifiers of one kind: math, math_2, ...
            name, n = f"{target.kind}_{n}", n + 1
        return Component(name, target, float(weight))

    @property
    def primary(self) -> Component:
        """The component that decides `correct`, `status` and `extracted`."""
        return self.components[0]

    def references(self, reference: Any) -> dict[str, Any]:
        """Split one reference into the reference of each component."""
        names = {c.name for c in self.components}
        if isinstance(reference, Mapping) and reference and set(reference) <= names:
            return {c.name: reference.get(c.name) for c in self.components}
        return {c.name: (reference if c is self.primary else None) for c in self.components}

    def reference_from_record(self, record: dict[str, Any]) -> dict[str, Any]:
        """Each component reads its own reference from the record (KeyError if one is absent)."""
        return {c.name: c.verifier.reference_from_record(record) for c in self.components}

    def verify(self, completion: str, reference: Any) -> VerifyResult:
        """Verify one completion with every component and combine the results."""
        return self.verify_batch([completion], [reference])[0]

    def verify_batch(
        self, completions: Sequence[str], references: Sequence[Any]
    ) -> list[VerifyResult]:
        """Run each component's own parallel batch, then combine item by item."""
        if len(completions) != len(references):
            raise ValueError(f"{len(completions)} completions but {len(references)} references")
        split = [self.references(ref) for ref in references]
        per_component = [
            c.verifier.verify_batch(list(completions), [refs[c.name] for refs in split])
            for c in self.components
        ]
        return [self._combine([results[i] for results in per_component]) for i in range(len(split))]

    async def averify(self, completion: str, reference: Any) -> VerifyResult:
        """`verify` without blocking the event loop."""
        return (await self.averify_batch([completion], [reference]))[0]

    async def averify_batch(
        self, completions: Sequence[str], references: Sequence[Any]
    ) -> list[VerifyResult]:
        """`verify_batch` without blocking the event loop; the components run concurrently."""
        if len(completions) != len(references):
            raise ValueError(f"{len(completions)} completions but {len(references)} references")
        import asyncio  # here, not at the top: asyncio is a tenth of every CLI start-up

        from .aio import averify_batch as _averify_batch

        split = [self.references(ref) for ref in references]
        per_component = await asyncio.gather(*(
            _averify_batch(c.verifier, list(completions), [refs[c.name] for refs in split])
            for c in self.components
        ))
        return [self._combine([results[i] for results in per_component]) for i in range(len(split))]

    def _combine(self, results: list[VerifyResult]) -> VerifyResult:
        primary = results[0]
        unjudged = next((r for r in results if not r.judged), None)
        status = unjudged.status if unjudged is not None else primary.status
        parts = {
            c.name: {"reward": r.reward, "status": r.status.value, "weight": c.weight}
            for c, r in zip(self.components, results, strict=True)
        }
        timings: dict[str, float] = {}
        for c, r in zip(self.components, results, strict=True):
            timings.update({f"{c.name}/{k}": v for k, v in r.timings.items()})
        return VerifyResult(
            reward=sum(c.weight * r.reward for c, r in zip(self.components, results, strict=True)),
            correct=primary.correct and unjudged is None,
            status=status,
            detail="; ".join(
                f"{c.name}: {r.detail}"
                for c, r in zip(self.components, results, strict=True)
                if r.detail
            ),
            extracted=primary.extracted,
            timings=timings,
            extra={**primary.extra, "components": parts},
        )

    def close(self) -> None:
        """Close every component that holds workers."""
        for c in self.components:
            close = getattr(c.verifier, "close", None)
            if callable(close):
                close()

    def __enter__(self) -> WeightedVerifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def combine(
    *pairs: tuple[str | Verifier, float], workers: int | None = None, **weights: float
) -> WeightedVerifier:
    """Build a weighted verifier: `combine(math=1.0, format=0.1)` or `combine((v1, 1.0), (v2, 0.1))`."""
    return WeightedVerifier([*pairs, *weights.items()], workers=workers)

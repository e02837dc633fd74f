"""Optional Ray backend for `veristep verify --backend ray`: batches fan out to verifier actors."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from veristep.common.jsonl_io import UsageError

from ..core.result import VerifyResult
from .runner import Item, close_verifier, merge, pending, safe_verify_batch


class _VerifierActor:
    """Holds one verifier inside a Ray worker process and verifies the batches sent to it."""

    def __init__(self, verifier_cls: type, config: dict[str, Any]) -> None:
        self.verifier = verifier_cls(**config)

    def verify_batch(self, completions: list[str], references: list[Any]) -> list[VerifyResult]:
        """Verify one batch with the actor's verifier; a raising item costs only itself."""
        return safe_verify_batch(self.verifier, completions, references)

    def close(self) -> None:
        """Shut the verifier's own pool before the actor goes away."""
        close_verifier(self.verifier)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError("--backend ray needs ray: pip install 'veristep[ray]'") from None
    return ray


class RayBackend:
    """Run verify_batch on `actors` Ray actors, keeping a few batches in flight per actor."""

    def __init__(
        self,
        verifier_cls: type,
        config: dict[str, Any],
        *,
        actors: int | None = None,
        address: str | None = None,
        inflight_per_actor: int = 2,
    ) -> None:
        if actors is not None and actors < 1:
            raise ValueError(f"the Ray backend needs >= 1 actor, got {actors}")
        ray = self._ray = _import_ray()
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            # address=None starts a local instance unless RAY_ADDRESS points at a cluster.
            ray.init(address=address, include_dashboard=False, logging_level="ERROR")
        cpus = float(ray.cluster_resources().get("CPU", 1.0))
        count = actors or max(1, int(cpus))
        # Fractional CPUs let more actors than cores start instead of waiting forever.
        actor_cls = ray.remote(num_cpus=min(1.0, cpus / count))(_VerifierActor)
        self.actors = [actor_cls.remote(verifier_cls, config) for _ in range(count)]
        self._max_inflight = max(1, inflight_per_actor) * count

    def run(self, batches: Iterable[list[Item]]) -> Iterator[tuple[list[Item], list[VerifyResult]]]:
        """Submit batches round-robin and yield results in input order as they complete.

        Only the items that still need the verifier travel to an actor.
        """
        inflight: deque = deque()
        source = iter(batches)
        targets = itertools.cycle(self.actors)

        def fill() -> None:
            while len(inflight) < self._max_inflight:
                batch = next(source, None)
                if batch is None:
                    return
                idx, completions, references = pending(batch)
                ref = next(targets).verify_batch.remote(completions, references) if idx else None
                inflight.append((batch, idx, ref))

        fill()
        while inflight:
            batch, idx, ref = inflight.popleft()
            results = self._ray.get(ref) if ref is not None else []
            yield batch, merge(batch, idx, results)
            fill()

    def close(self) -> None:
        """Stop the actors, and the local Ray instance if this backend started it."""
        ray = self._ray
        try:
            ray.get([actor.close.remote() for actor in self.actors], timeout=30)
        except Exception:  # a dead actor has nothing left to close
            pass
        for actor in self.actors:
            ray.kill(actor)
        self.actors = []
        if self._owns_ray:
            ray.shutdown()

"""`veristep serve --ray`: the same HTTP front, with verdicts computed by Ray actors on a cluster.

The front process keeps everything HTTP (routes, the token, admission and 429s, deadlines,
metrics, the SIGTERM drain: app.py and service.py, unchanged) and reads each item's reference
with a local verifier (cheap, and an unusable one is `bad_reference` before anything travels).
Only the pool moves: `RayPool` starts N actors spread over the cluster's nodes, each holding
every served kind's verifier with its own worker pool on its node. Each kind's async bridge
batches concurrent requests as it does for a local pool; a batch is split over the actors,
each chunk to the actor with the fewest items outstanding.

What a caller can count on:
* the same verdict for the same row as a single-machine server with the same options (the
  actors run the same verifiers; `config_hash` is the same);
* nothing lost: an actor that dies (its process or its node) is restarted by Ray, and a chunk it
  held is sent once more (to another actor when there is one); if that fails too its items are
  `internal_error` (unjudged), never dropped and never a silent 0;
* no hang: a chunk without an answer `call_timeout_s` after it was sent is answered `timeout`
  (unjudged) and the lane moves on.
"""

from __future__ import annotations

import math
import os
import pickle
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from veristep.common.jsonl_io import UsageError
from veristep.verifiers.core.aio import run_batch
from veristep.verifiers.core.result import Status, VerifyResult

from .metrics import worker_restarts

#: Fewest items a batch is split into per actor (smaller chunks cost more messages than they save).
MIN_CHUNK = 8
#: How long the front waits for every actor to build its verifiers and warm its pools.
READY_TIMEOUT_S = 600.0


def import_ray() -> Any:
    """The `ray` module, or a UsageError with the install command."""
    try:
        import ray
    except ImportError:
        raise UsageError("--ray needs ray: pip install 'veristep[ray]'") from None
    return ray


class VerifierActor:
    """One Ray actor: every served kind's verifier, with its own pool on the actor's node."""

    def __init__(self, kinds: list[str], configs: dict[str, dict[str, Any]]) -> None:
        from veristep.verifiers.core.registry import get_verifier

        from .service import verifier_options, warm_up

        self.verifiers = {kind: get_verifier(kind, **verifier_options(kind, configs)) for kind in kinds}
        warm_up(self.verifiers)

    def info(self) -> dict[str, Any]:
        """Where this actor runs: Ray node id, host name and process id."""
        import ray

        return {"node": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(),
                "pid": os.getpid()}

    def verify_batch(self, kind: str, completions: list[Any], references: list[Any],
                     ) -> tuple[list[VerifyResult | BaseException], int, int]:
        """Results (an item that raised: its exception), the kind's worker restarts, and the pid."""
        verifier = self.verifiers[kind]
        results = [_portable(r) for r in run_batch(verifier, completions, references)]
        return results, worker_restarts(verifier), os.getpid()

    def close(self) -> None:
        """Close every verifier's pool before the actor goes away."""
        from .service import close_verifiers

        close_verifiers(self.verifiers)


def _portable(outcome: VerifyResult | BaseException) -> VerifyResult | BaseException:
    """An item's exception as one that survives the trip to the front (its type and text kept)."""
    if not isinstance(outcome, BaseException):
        return outcome
    try:
        pickle.loads(pickle.dumps(outcome))
        return outcome
    except Exception:  # noqa: BLE001 - an exception class that does not pickle
        base = ValueError if isinstance(outcome, ValueError) else TypeError if isinstance(
            outcome, TypeError) else RuntimeError
        return base(f"{type(outcome).__name__}: {outcome}")


@dataclass
class _Slot:
    """One actor and what the front knows of it."""

    index: int
    handle: Any
    outstanding: int = 0  # items sent and not yet answered
    node: str = ""
    host: str = ""
    pid: int = 0
    #: worker restarts per (pid, kind): an actor restarted by Ray is a new pid with new counts
    restarts: dict[tuple[int, str], int] = field(default_factory=dict)
    pids: set[int] = field(default_factory=set)
    deaths: int = 0  # chunks that met this actor dead (one death can fail several chunks)
    items: int = 0  # items this actor answered


class RayPool:
    """N verifier actors on a Ray cluster and the dispatch of batches over them."""

    def __init__(self, config: Any) -> None:
        ray = self._ray = import_ray()
        self.kinds = list(config.kinds)
        self.cpus = float(config.ray_cpus)
        self.call_timeout_s = float(config.deadline_s) + 30.0
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            try:
                ray.init(address=config.ray_address, include_dashboard=False,
                         logging_level="ERROR", namespace="veristep-serve")
            except Exception as err:  # noqa: BLE001 - ConnectionError, ValueError, RuntimeError ...
                raise UsageError(f"--ray {config.ray_address}: cannot join the Ray cluster: "
                                 f"{type(err).__name__}: {err}") from None
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        count = config.ray_actors or max(1, len(nodes))
        lanes_total = max(1, config.lanes) * len(self.kinds)
        actor_cls = ray.remote(
            num_cpus=config.ray_cpus,
            max_restarts=-1,  # a dead actor (process or node) is rebuilt; its chunk is re-sent
            max_concurrency=lanes_total + 2,  # every kind's lanes at once, plus info calls
            scheduling_strategy="SPREAD",  # one actor per node while there are nodes to spare
        )(VerifierActor)
        self._lock = threading.Lock()
        self.slots = [_Slot(i, actor_cls.remote(self.kinds, config.configs)) for i in range(count)]
        self.ready = False

    # ------------------------------------------------------------------ life cycle

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait until every actor has built its verifiers and warmed its pools (or raise why not)."""
        ray = self._ray
        refs = [slot.handle.info.remote() for slot in self.slots]
        done, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        if pending:
            free = ray.available_resources().get("CPU", 0.0)
            raise RuntimeError(
                f"{len(pending)} of {len(refs)} Ray actors not ready after {timeout_s:g} s (each "
                f"reserves {self.cpus:g} CPU; the cluster has {free:g} free): fewer "
                "--ray-actors, a smaller --ray-cpus, or more nodes")
        try:
            infos = ray.get(refs)
        except ray.exceptions.RayError as err:
            raise RuntimeError(f"a Ray actor could not build the verifiers: {err}") from None
        for slot, info in zip(self.slots, infos, strict=True):
            self._seen(slot, info)
        self.ready = True

    def close(self) -> None:
        """Close the actors' pools, stop the actors, and leave the cluster if this process joined it."""
        ray = self._ray
        slots, self.slots = self.slots, []
        try:
            ray.get([slot.handle.close.remote() for slot in slots], timeout=30)
        except Exception:  # noqa: BLE001 - a dead actor has nothing left to close
            pass
        for slot in slots:
            try:
                ray.kill(slot.handle)
            except Exception:  # noqa: BLE001 - already gone
                pass
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()

    # ------------------------------------------------------------------ verifying

    def verify(self, kind: str, completions: Sequence[Any], references: Sequence[Any],
               ) -> list[VerifyResult | BaseException]:
        """Each item's result (or the exception it raised), split over the actors; blocks."""
        ray = self._ray
        n = len(completions)
        out: list[VerifyResult | BaseException | None] = [None] * n
        if n == 0:
            return []
        with self._lock:
            if not self.slots:
                raise RuntimeError("the Ray pool is closed")
            size = max(MIN_CHUNK, math.ceil(n / len(self.slots)))
        sent: dict[Any, tuple[int, int, _Slot, int]] = {}  # ref -> (start, end, slot, attempt)

        def send(start: int, end: int, attempt: int, avoid: _Slot | None = None) -> None:
            with self._lock:
                choices = [s for s in self.slots if s is not avoid] or list(self.slots)
                if not choices:  # closed meanwhile (the server is stopping)
                    out[start:end] = [RuntimeError("the Ray pool is closed")] * (end - start)
                    return
                slot = min(choices, key=lambda s: s.outstanding)
                slot.outstanding += end - start
            ref = slot.handle.verify_batch.remote(kind, list(completions[start:end]),
                                                  list(references[start:end]))
            sent[ref] = (start, end, slot, attempt)

        for start in range(0, n, size):
            send(start, min(n, start + size), 0)
        until = time.monotonic() + self.call_timeout_s
        while sent:
            ready, _ = ray.wait(list(sent), num_returns=1, timeout=max(0.0, until - time.monotonic()))
            if not ready:
                break
            for ref in ready:
                start, end, slot, attempt = sent.pop(ref)
                with self._lock:
                    slot.outstanding -= end - start
                try:
                    results, restarts, pid = ray.get(ref)
                except ray.exceptions.RayTaskError as err:  # the actor method itself failed
                    failed = RuntimeError(f"the Ray actor's call failed: {str(err).splitlines()[0]}")
                    out[start:end] = [failed] * (end - start)
                    continue
                except ray.exceptions.RayError as err:  # the actor or its node is gone
                    with self._lock:
                        slot.deaths += 1
                    if attempt == 0:
                        send(start, end, 1, avoid=slot)
                        continue
                    detail = f"the Ray actor died twice with this item ({type(err).__name__})"
                    out[start:end] = [VerifyResult(0.0, False, Status.INTERNAL_ERROR, detail)] * (end - start)
                    continue
                with self._lock:
                    slot.restarts[(pid, kind)] = restarts
                    slot.pids.add(pid)
                    slot.pid = pid
                    slot.items += end - start
                out[start:end] = results
        for ref, (start, end, slot, _) in sent.items():  # no answer in time: a hung actor or node
            with self._lock:
                slot.outstanding -= end - start
            try:
                ray.cancel(ref)
            except Exception:  # noqa: BLE001 - cancelling is best effort
                pass
            detail = f"no verdict from Ray actor {slot.index} within {self.call_timeout_s:g} s"
            out[start:end] = [VerifyResult(0.0, False, Status.TIMEOUT, detail)] * (end - start)
        return [r if r is not None else VerifyResult(0.0, False, Status.INTERNAL_ERROR, "no result")
                for r in out]

    # ------------------------------------------------------------------ reporting

    def _seen(self, slot: _Slot, info: Mapping[str, Any]) -> None:
        with self._lock:
            slot.node, slot.host, slot.pid = str(info["node"]), str(info["host"]), int(info["pid"])
            slot.pids.add(slot.pid)

    def worker_restarts(self, kind: str) -> int:
        """Worker processes of `kind` replaced on any actor, plus actor processes replaced."""
        with self._lock:
            total = sum(n for slot in self.slots for (_, k), n in slot.restarts.items() if k == kind)
            return total + self.actor_restarts_locked()

    def actor_restarts_locked(self) -> int:
        """Actor processes Ray replaced (seen as new process ids), holding the lock."""
        return sum(max(0, len(slot.pids) - 1) for slot in self.slots)

    def summary(self) -> dict[str, Any]:
        """Actors and nodes, for /health."""
        with self._lock:
            return {"actors": len(self.slots), "nodes": len({s.node for s in self.slots if s.node}),
                    "ready": self.ready}

    def actors(self) -> list[dict[str, Any]]:
        """Each actor's index, node, host, last process id, restarts and outstanding items."""
        with self._lock:
            return [{"actor": s.index, "node": s.node, "host": s.host, "pid": s.pid,
                     "restarts": max(0, len(s.pids) - 1), "outstanding": s.outstanding,
                     "items": s.items}
                    for s in self.slots]


class RayKindVerifier:
    """One served kind as a verifier whose `verify_batch` runs on the Ray actors.

    References are read here, by a local instance of the kind (its pool never starts). An item
    that raised on its actor is that exception in the returned list, which the async bridge
    hands to the item's caller alone (as a local pool's raising item).
    """

    def __init__(self, pool: RayPool, kind: str, local: Any) -> None:
        self.pool = pool
        self.kind = getattr(local, "kind", kind)
        self._served_kind = kind
        self.local = local

    def reference_from_record(self, record: dict[str, Any]) -> Any:
        """The reference of a row, read by the kind's own parser in this process."""
        return self.local.reference_from_record(record)

    def verify_batch(self, completions: Sequence[Any], references: Sequence[Any],
                     ) -> list[VerifyResult | BaseException]:
        """Results from the actors, in input order (blocking: the bridge calls it from a lane)."""
        return self.pool.verify(self._served_kind, completions, references)

    def worker_restarts(self) -> int:
        """Workers and actors replaced for this kind across the cluster (for /metrics)."""
        return self.pool.worker_restarts(self._served_kind)

    def close(self) -> None:
        """Close the local parsing instance (the actors close with the pool)."""
        close = getattr(self.local, "close", None)
        if callable(close):
            close()

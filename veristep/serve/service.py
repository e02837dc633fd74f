"""What `veristep serve` does with a request, independent of the HTTP framework.

One `Service` per server process: a verifier per kind (built once, its pool shared by every
request through the async bridge, verifiers/core/aio.py), admission control (a bounded count
of accepted, unanswered items: beyond it a request is refused with a retry delay, never
queued without bound), per-request deadlines, and the three payload shapes:

* native: rows in the `veristep verify` JSONL row format -> the same output rows (input row
  plus a `veristep` result object) as that command writes;
* OpenRLHF `/get_reward`: {query, prompts, labels} -> {rewards, scores, extra_logs};
* slime: {prompt, response, label} -> a reward.

A row that cannot be judged is never a 500 and never a silent 0: it carries its status
(`bad_reference`, `input_error`, `timeout` ...), and the RL-stack shapes give it the value the
operator chose (`unjudged_reward`) with the status beside it.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import math
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from veristep import __version__
from veristep.common.jsonl_io import Record, parse_record
from veristep.verifiers.adapters import _BadReference
from veristep.verifiers.async_adapters import reference_from_label
from veristep.verifiers.cli.runner import RAISED_KEY, Item, close_verifier, make_item, output_line
from veristep.verifiers.core.aio import bridge_for, configure_async, lower_thread_priority
from veristep.verifiers.core.registry import get_verifier, verifier_class
from veristep.verifiers.core.result import UNJUDGED, Status, Verifier, VerifyResult
from veristep.verifiers.core.text import mark_truncated

#: The statuses OpenRLHF sees as one numeric `extra_logs` key each (it stacks every value into
#: a tensor, so strings cannot travel there).
UNJUDGED_LOG_KEYS = {s: f"veristep_unjudged_{s.value}" for s in sorted(UNJUDGED, key=lambda s: s.value)}
#: Index of each status in `veristep_status_code` (stable: the enum's order).
STATUS_CODES = {s: i for i, s in enumerate(Status)}
#: Verifier options a server uses unless its operator sets them. They decide where the work runs,
#: never a verdict, so they are not in `config_hash`. Math extracts answers in its pool's
#: workers: its in-process pass (0.2-0.4 ms a worked solution) would run in a lane of this
#: process and hold the GIL that every request's event-loop and lane work needs, so a 1 ms tools
#: item waited behind a math batch (docs/serve.md, load benchmark).
SERVE_DEFAULTS: dict[str, dict[str, Any]] = {"math": {"inline_chars": 0}}


def verifier_options(kind: str, configs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The options a server builds `kind` with: the operator's, then SERVE_DEFAULTS it accepts."""
    options = dict(configs.get(kind, {}))
    defaults = SERVE_DEFAULTS.get(kind, {})
    if defaults:
        accepted = inspect.signature(verifier_class(kind)).parameters
        for key, value in defaults.items():
            if key in accepted:
                options.setdefault(key, value)
    return options


class RequestError(Exception):
    """A request the server refuses: an HTTP status and a one-line reason."""

    def __init__(self, status: int, reason: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason.replace("\n", " ")[:500]
        self.headers = dict(headers or {})


@dataclass
class ServeConfig:
    """Everything that decides what a server answers (hashed into `config_hash`) and its limits."""

    kinds: list[str]
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 8000
    token: str | None = None
    max_queue: int = 4096
    deadline_s: float = 120.0
    max_body_bytes: int = 32 * 1024 * 1024
    unjudged_reward: float | None = 0.0
    completion_key: str = "completion"
    lanes: int = 4
    processes: int = 1
    max_connections: int = 1024
    #: Seconds a connection has to send a request's head (main.py); a body gets that plus one
    #: second per MiB of `max_body_bytes` (app.py). Half-sent requests hold connection slots.
    header_timeout_s: float = 10.0
    #: Ray cluster address (`auto`, `local`, `HOST:PORT`, `ray://...`): verdicts come from Ray
    #: actors there (ray_pool.py) instead of this process's pools. None: local pools.
    ray_address: str | None = None
    ray_actors: int | None = None  # None: one per alive node
    ray_cpus: float = 1.0  # CPUs each actor reserves in Ray's accounting (placement)
    ray_ready_timeout_s: float = 600.0  # for every actor to build its verifiers and warm up
    #: Nice increment per kind (`--nice`; 0 for a kind not in it; Linux, local pools): a kind's
    #: lanes, and what they start (pool workers, sandboxed programs), run that much below the
    #: server's CPU priority (a code sandbox's whole scheduling group too). Off by default: on a
    #: 2-core machine code at 10 brought tools' p99/p50 from 1.96 to 1.65 under a steady mix but
    #: answered 26 % fewer code requests, whose tests' wall-clock limits then get less CPU
    #: (docs/serve.md, "CPU priority"). Where the work runs: not in `config_hash`.
    nice: dict[str, int] = field(default_factory=dict)

    def nice_of(self, kind: str) -> int:
        """The nice increment the work of `kind` runs at (0 with Ray: its actors' own priority)."""
        if self.ray_address is not None:
            return 0
        return self.nice.get(kind, 0)

    def config_hash(self) -> str:
        """A short hash of what decides the rewards: version, kinds, their configs, unjudged value.

        Where the verdicts are computed (local pools or Ray actors) is not in it: it does not
        change them.
        """
        canonical = json.dumps(
            {"veristep": __version__, "kinds": self.kinds, "configs": self.configs,
             "unjudged_reward": self.unjudged_reward, "completion_key": self.completion_key},
            sort_keys=True, default=str,
        )
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


class Service:
    """The verifiers of one server process, its admission control and its payload handlers."""

    def __init__(self, config: ServeConfig, metrics: Any = None) -> None:
        if not config.kinds:
            raise ValueError("serve needs at least one verifier kind")
        self.config = config
        self.version = __version__
        self.config_hash = config.config_hash()
        self.metrics = metrics
        self.verifiers: dict[str, Verifier] = {}
        self.ray: Any = None  # the RayPool when verdicts come from a Ray cluster
        try:
            for kind in config.kinds:
                # with Ray this instance only reads references (its pool never starts): a bad
                # option fails here, before the cluster is reached
                self.verifiers[kind] = get_verifier(kind, **verifier_options(kind, config.configs))
            if config.ray_address is not None:
                from .ray_pool import RayKindVerifier, RayPool

                self.ray = RayPool(config)
                self.verifiers = {kind: RayKindVerifier(self.ray, kind, local)
                                  for kind, local in self.verifiers.items()}
            for kind, verifier in self.verifiers.items():
                configure_async(verifier, lanes=config.lanes, nice=config.nice_of(kind))  # checks it
        except BaseException:
            self.close()
            raise
        self.inflight = 0  # items accepted and not yet answered
        # items of requests that stopped waiting (deadline, client gone) that a verifier still
        # holds: they take verifier time like any other, so admission counts them
        self.abandoned = 0
        self.draining = False
        self.ready = False
        self._rate = _Rate()

    @property
    def default_kind(self) -> str:
        """The kind an endpoint without a kind in its path serves (the first one given)."""
        return self.config.kinds[0]

    def stamp(self) -> dict[str, str]:
        """The fields every reply carries."""
        return {"version": self.version, "config_hash": self.config_hash}

    def verifier(self, kind: str | None) -> tuple[str, Verifier]:
        """The verifier serving `kind` (the default kind for None); 404 for a kind not served."""
        kind = kind or self.default_kind
        verifier = self.verifiers.get(kind)
        if verifier is None:
            raise RequestError(404, f"unknown kind {kind!r}; this server serves {', '.join(self.config.kinds)}")
        return kind, verifier

    # --------------------------------------------------------------- admission

    @property
    def outstanding(self) -> int:
        """Items the verifiers owe: those of requests waiting, and those nobody waits for any more."""
        return self.inflight + self.abandoned

    def check_count(self, n: int | None, what: str = "items") -> None:
        """413 when one request holds more than the queue (n None: more than it, counting stopped)."""
        limit = self.config.max_queue
        if n is None or n > limit:
            many = f"more than {limit}" if n is None else str(n)
            raise RequestError(413, f"{many} {what} in one request exceed the server's queue of "
                               f"{limit}; split the batch")

    def admit(self, n: int) -> None:
        """Count `n` items in, or refuse the request (429 with Retry-After) when the queue is full."""
        if self.draining:
            raise RequestError(503, "the server is shutting down", {"Retry-After": "1"})
        self.check_count(n)
        held = self.outstanding
        if held + n > self.config.max_queue:
            wait = self._rate.seconds_for(held + n - self.config.max_queue)
            raise RequestError(429, f"queue full ({held} items waiting, limit "
                               f"{self.config.max_queue}); retry after {wait} s",
                               {"Retry-After": str(wait)})
        self.inflight += n

    def release(self, n: int) -> None:
        """Count `n` answered items out."""
        self.inflight -= n
        self._rate.add(n)

    # --------------------------------------------------------------- verifying

    async def verify(self, kind: str, items: Sequence[tuple[Any, Any] | VerifyResult],
                     deadline_s: float | None = None) -> list[VerifyResult]:
        """Results of (completion, reference) pairs; a pair may be a result already (a bad row).

        Items still running at the deadline are answered `timeout` (unjudged); those not yet
        started are not run (aio.AsyncBridge). Until the verifier is done with them they count
        as `abandoned`, so admission sees the work they still take; the same when the caller's
        task is cancelled (app.py cancels it when the client hangs up).
        """
        _, verifier = self.verifier(kind)
        todo = [i for i, item in enumerate(items) if not isinstance(item, VerifyResult)]
        out: list[VerifyResult | None] = [item if isinstance(item, VerifyResult) else None for item in items]
        limit = self.config.deadline_s if deadline_s is None else min(deadline_s, self.config.deadline_s)
        if todo:
            futures = bridge_for(verifier).submit(
                [items[i][0] for i in todo], [items[i][1] for i in todo],  # type: ignore[index]
                asyncio.get_running_loop(), gone=self._item_gone,
            )
            try:
                await asyncio.wait(futures, timeout=limit)
            finally:
                for fut in futures:
                    if fut.cancel():
                        self.abandoned += 1
            for i, fut in zip(todo, futures, strict=True):
                out[i] = _outcome(fut, limit)
        results = [r for r in out if r is not None]
        if self.metrics is not None:
            self.metrics.count_items(kind, results)
        return results

    def _item_gone(self, fut: asyncio.Future) -> None:
        """The bridge is done with an item; one cancelled here was counted as abandoned."""
        if fut.cancelled():
            self.abandoned -= 1

    # --------------------------------------------------------------- payloads

    def native_items(self, kind: str, rows: Sequence[Any], completion_key: str | None = None,
                     line_nos: Sequence[int] | None = None,
                     texts: Sequence[str | None] | None = None) -> list[Item]:
        """CLI rows (objects, or raw JSONL lines as bytes) as the CLI's items, bad rows included.

        `texts`: each object row's own JSON text where it can be written back as it is
        (`jsontext.loads_with_row_text`), so that its reply row is that text with the result
        spliced in, as `veristep verify` writes a line.
        """
        _, verifier = self.verifier(kind)
        key = completion_key or self.config.completion_key
        items = []
        numbers = line_nos if line_nos is not None else range(1, len(rows) + 1)
        row_texts = texts if texts is not None else [None] * len(rows)
        for line_no, row, text in zip(numbers, rows, row_texts, strict=True):
            if isinstance(row, (bytes, bytearray)):
                record = parse_record(line_no, bytes(row))
            elif isinstance(row, dict):
                record = Record(line_no, row, text=text)
            else:
                record = Record(line_no, error=f"expected a JSON object, got {type(row).__name__}")
            items.append(make_item(record, verifier, key))
        return items

    async def native_results(self, kind: str, items: Sequence[Item], deadline_s: float | None = None,
                             ) -> list[VerifyResult]:
        """The results of native items, in input order (a bad row's own result included)."""
        pairs = [item.result if item.result is not None else (item.completion, item.reference) for item in items]
        return await self.verify(kind, pairs, deadline_s)

    def native_json(self, kind: str, items: Sequence[Item], results: Sequence[VerifyResult]) -> bytes:
        """The JSON reply `{"kind", "rows", "version", "config_hash"}` of a native request.

        Each row is the CLI's output line (`output_line`): the row's own text with the
        `veristep` object spliced in where it has one (re-encoding every echoed row, a tools
        row's tool schemas, was the largest part of a request's JSON work), else re-encoded
        as the CLI does (NaN as null, a lone surrogate escaped).
        """
        rows = b",".join(output_line(kind, item, result)[:-1] for item, result in zip(items, results, strict=True))
        head = f'{{"kind":{json.dumps(kind)},"rows":['
        tail = f'],"version":{json.dumps(self.version)},"config_hash":{json.dumps(self.config_hash)}}}'
        return head.encode() + rows + tail.encode()

    def native_jsonl(self, kind: str, items: Sequence[Item], results: Sequence[VerifyResult]) -> bytes:
        """The JSONL reply of a JSONL request: line for line what `veristep verify` writes."""
        return b"".join(output_line(kind, item, result) for item, result in zip(items, results, strict=True))

    def label_items(self, kind: str, completions: Sequence[str], labels: Sequence[Any],
                    ) -> list[tuple[str, Any] | VerifyResult]:
        """(completion, reference) pairs from RL-stack labels; an unusable label is bad_reference.

        A label that stands for no reference (None) is "no label" for a kind that needs one; a
        kind whose reference is optional (format: a row without `format_spec`) judges the
        completion without one, as it does a native row.
        """
        _, verifier = self.verifier(kind)
        optional = reference_optional(verifier)
        out: list[tuple[str, Any] | VerifyResult] = []
        for completion, label in zip(completions, labels, strict=True):
            ref = reference_from_label(verifier, label)
            if isinstance(ref, _BadReference):
                out.append(VerifyResult(0.0, False, Status.BAD_REFERENCE, ref.detail[:300]))
            elif ref is None and not optional:
                out.append(VerifyResult(0.0, False, Status.BAD_REFERENCE, "no label"))
            else:
                out.append((completion, ref))
        return out

    def reward_value(self, result: VerifyResult, unjudged: float | None) -> float | None:
        """The number an RL stack gets: the reward, or the chosen value where unjudged."""
        return float(result.reward) if result.judged else unjudged

    def openrlhf_reply(self, results: Sequence[VerifyResult], unjudged: float | None) -> dict[str, Any]:
        """OpenRLHF's reply; every `extra_logs` value is numeric (OpenRLHF makes tensors of them)."""
        rewards = [self.reward_value(r, unjudged) for r in results]
        extra: dict[str, list[float]] = {
            "veristep_judged": [float(bool(r.judged)) for r in results],
            "veristep_correct": [float(bool(r.correct)) for r in results],
            "veristep_status_code": [float(STATUS_CODES[r.status]) for r in results],
        }
        for status, key in UNJUDGED_LOG_KEYS.items():
            extra[key] = [float(r.status is status and not r.judged) for r in results]
        return {"rewards": rewards, "scores": rewards, "extra_logs": extra,
                "statuses": [r.status.value for r in results], **self.stamp()}

    def warm_up(self) -> None:
        """Start every kind's pool (or wait for the Ray actors, which start theirs) before /ready."""
        if self.ray is not None:
            self.ray.wait_ready(self.config.ray_ready_timeout_s)
            return
        for kind, verifier in self.verifiers.items():
            # a thread of the kind's priority starts its pool, whose threads and processes inherit it
            thread = threading.Thread(target=_warm_up_at, args=(kind, verifier, self.config.nice_of(kind)),
                                      name=f"veristep-warm-up-{kind}", daemon=True)
            thread.start()
            thread.join()

    def close(self) -> None:
        """Close every verifier (worker pools, sandboxes) and the Ray actors."""
        close_verifiers(self.verifiers)
        if self.ray is not None:
            self.ray.close()


def reference_optional(verifier: Verifier) -> bool:
    """Whether the kind judges a row without a reference: its reader accepts an empty row."""
    try:
        return verifier.reference_from_record({}) is None
    except Exception:  # noqa: BLE001 - KeyError (no reference) and anything else: it needs one
        return False


def close_verifiers(verifiers: Mapping[str, Verifier]) -> None:
    """Close every verifier that has pools; one that fails to close does not stop the others."""
    for verifier in verifiers.values():
        try:
            close_verifier(verifier)
        except Exception:  # noqa: BLE001 - closing the others matters more
            pass


def warm_up(verifiers: Mapping[str, Verifier]) -> None:
    """Run one item per kind through its pool, so the first requests do not pay its start."""
    for kind, verifier in verifiers.items():
        sample = _WARM_UP.get(getattr(verifier, "kind", kind))
        if sample is not None:
            try:
                verifier.verify_batch([sample[0]], [verifier.reference_from_record(sample[1])])
            except Exception:  # noqa: BLE001 - a real request will meet and report the problem
                pass


def _warm_up_at(kind: str, verifier: Verifier, nice: int) -> None:
    lower_thread_priority(nice)
    warm_up({kind: verifier})


#: One item per kind that reaches the kind's pool (the math one needs sympy, so its workers and
#: their imports start now rather than under the first requests).
_WARM_UP: dict[str, tuple[str, dict[str, Any]]] = {
    "math": ("\\boxed{(x+1)^2}", {"answer": "x^2+2x+1"}),
    "code": ("```python\nprint(1)\n```", {"language": "python", "tests": [{"stdin": "", "stdout": "1\n"}]}),
    "tools": ('<tool_call>{"name": "f", "arguments": {}}</tool_call>', {"expected": [{"name": "f", "arguments": {}}]}),
    "format": ("<think>a</think>\n<answer>1</answer>", {}),
}


def cut_flag(value: Any, where: str) -> bool | None:
    """A request's cut-off flag: true, false, or null (no signal); 422 naming `where` otherwise."""
    if value is None or isinstance(value, bool):
        return value
    raise RequestError(422, f"{where} must be true, false or null, got {type(value).__name__}")


def unjudged_reward_of(value: Any) -> float | None:
    """An unjudged reward as given (null, or a finite number); ValueError saying why not."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"must be a finite number or null, got {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:  # an integer beyond the float range
        number = math.inf
    if not math.isfinite(number):
        # it goes into replies, and JSON has no NaN or Infinity: a 500 after the work otherwise
        raise ValueError(f"must be a finite number or null, got {value!r:.40}")
    return number


#: slime's `Sample.Status` values (`sample.to_dict()["status"]`) that say whether the rollout
#: engine cut the response off; the others (pending, aborted, failed) give no signal.
SLIME_CUT_STATUS = {"truncated": True, "completed": False}


def slime_cut(body: Mapping[str, Any]) -> bool | None:
    """Whether a slime payload says its response was cut off.

    An explicit `truncated` wins; else OpenAI's `finish_reason` ("length" cut, anything else not);
    else slime's sample `status` ("truncated" / "completed"); None when none is given.
    """
    if body.get("truncated") is not None:
        return cut_flag(body["truncated"], "slime request: field 'truncated'")
    reason = body.get("finish_reason")
    if reason is not None:
        if not isinstance(reason, str):
            raise RequestError(422, f"slime request: field 'finish_reason' must be str, got {type(reason).__name__}")
        return reason == "length"
    status = body.get("status")
    if status is not None and not isinstance(status, str):
        raise RequestError(422, f"slime request: field 'status' must be str, got {type(status).__name__}")
    return SLIME_CUT_STATUS.get(status.lower()) if isinstance(status, str) else None


def mark_cut(completions: Sequence[str], flags: Sequence[bool | None]) -> list[str]:
    """Completions marked as cut off where their flag is true (`core.text.mark_truncated`)."""
    return [mark_truncated(text, flag) for text, flag in zip(completions, flags, strict=True)]


def completion_of(query: str, prompt: Any) -> str:
    """OpenRLHF sends the decoded prompt+response as `query`: the response is what follows the prompt."""
    if isinstance(prompt, str) and prompt and query.startswith(prompt):
        return query[len(prompt):]
    return query


def _outcome(fut: asyncio.Future, limit: float) -> VerifyResult:
    """An item's result from its future: its verdict, a timeout, or the verifier's error for it."""
    if fut.cancelled():
        return VerifyResult(0.0, False, Status.TIMEOUT, f"no verdict within the request deadline of {limit:g} s")
    exc = fut.exception()
    if exc is None:
        return fut.result()
    if isinstance(exc, (ValueError, TypeError)):  # as `veristep verify`: the verifier refused the reference
        return VerifyResult(0.0, False, Status.BAD_REFERENCE, f"the verifier rejected it: {exc}"[:300])
    return VerifyResult(0.0, False, Status.INTERNAL_ERROR,
                        f"the verifier raised {type(exc).__name__}: {exc}"[:300], extra={RAISED_KEY: True})


class _Rate:
    """Items answered per second over the last few seconds, for Retry-After."""

    def __init__(self, window_s: float = 10.0) -> None:
        self.window_s = window_s
        self.events: list[tuple[float, int]] = []

    def add(self, n: int) -> None:
        now = time.monotonic()
        self.events.append((now, n))
        while self.events and self.events[0][0] < now - self.window_s:
            self.events.pop(0)

    def seconds_for(self, items: int) -> int:
        """Whole seconds until `items` more items are likely answered (1 to 60)."""
        now = time.monotonic()
        done = sum(n for t, n in self.events if t >= now - self.window_s)
        rate = done / self.window_s
        if rate <= 0:
            return 1
        return int(min(60, max(1, math.ceil(items / rate))))


def check_types(body: Any, fields: Mapping[str, tuple[type, ...]], what: str) -> dict[str, Any]:
    """The body as a dict whose listed fields have the listed types; 422 naming the first that does not."""
    if not isinstance(body, dict):
        raise RequestError(422, f"{what}: expected a JSON object, got {type(body).__name__}")
    for name, types in fields.items():
        if name not in body:
            raise RequestError(422, f"{what}: missing field {name!r}")
        if not isinstance(body[name], types):
            names = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            raise RequestError(422, f"{what}: field {name!r} must be {names}, got {type(body[name]).__name__}")
    return body


def check_list_of(values: list[Any], types: tuple[type, ...], name: str, what: str) -> None:
    """422 naming the first element of `values` that is not one of `types`."""
    for i, value in enumerate(values):
        if not isinstance(value, types):
            raise RequestError(422, f"{what}: {name}[{i}] must be {' or '.join(t.__name__ for t in types)}, "
                               f"got {type(value).__name__}")

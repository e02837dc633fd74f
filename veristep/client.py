"""A client for `veristep serve` (httpx): pooled connections, retries with backoff, deadlines.

    from veristep.client import VeristepClient
    with VeristepClient("http://127.0.0.1:8000") as client:
        results = client.verify(["\\\\boxed{4}"], ["4"], kind="math")   # list[VerifyResult]

`RemoteVerifier` wraps a client as a verifier (verify, verify_batch, averify_batch,
reference_from_record), so anything that takes a verifier (the TRL and verl adapters' `remote=`
mode, `combine`, the CLI's backends) can point at a server instead of starting pools in every
reward worker. The server parses the references with its own kind's parser, so a record travels
as it is.

What is retried: connection errors, 429 (after its Retry-After), 502, 503 and 504, with
exponential backoff and jitter, until the call's deadline. A request is a pure function of its
body, so a retry cannot change or duplicate a result. Any other 4xx is the caller's mistake and
raises `ServeError` at once with the server's one-line reason.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from veristep.verifiers.core.result import Status, VerifyResult
from veristep.verifiers.core.text import is_truncated

RETRY_STATUSES = frozenset({429, 502, 503, 504})
#: Rows per request: several requests of a big batch run at once and each stays under the
#: server's queue limit.
DEFAULT_CHUNK = 256


class ServeError(RuntimeError):
    """The server refused a request, or gave no answer before the deadline."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


#: Record keys by which the server's row reader marks a completion as cut off.
_CUT_KEYS = ("truncated", "finish_reason")


def row_of(completion: Any, reference: Any) -> dict[str, Any]:
    """A native row for one item: a record-shaped reference travels whole, any other as "answer".

    A text completion's cut-off mark (`core.text.mark_truncated`) travels as `"truncated": true`;
    an unmarked one is sent without the record's own cut-off keys, so the server judges exactly
    the text a local verifier would.
    """
    if isinstance(reference, Mapping):
        row = {**reference, "completion": completion}
    else:
        row = {"completion": completion, "answer": reference}
    if isinstance(completion, str):
        for key in _CUT_KEYS:
            row.pop(key, None)
        if is_truncated(completion):
            row["truncated"] = True
    return row


def result_of(row: Mapping[str, Any]) -> VerifyResult:
    """The VerifyResult an output row's `veristep` object holds."""
    fields = dict(row["veristep"])
    fields.pop("kind", None)
    fields.pop("line", None)
    try:
        status = Status(fields.pop("status"))
    except ValueError:
        status = Status.INTERNAL_ERROR
    return VerifyResult(
        reward=float(fields.pop("reward", 0.0)),
        correct=bool(fields.pop("correct", False)),
        status=status,
        detail=str(fields.pop("detail", "") or ""),
        extracted=fields.pop("extracted", None),
        judged=bool(fields.pop("judged", False)),
        extra=fields,
    )


class _Policy:
    """Retry, backoff and deadline settings shared by the sync and async clients."""

    def __init__(self, url: str, token: str | None, timeout: float, deadline: float, retries: int,
                 backoff: float, max_backoff: float, chunk: int, expect_config: str | None = None) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"server URL must start with http:// or https://, got {url!r}")
        if timeout <= 0 or deadline <= 0 or retries < 0 or backoff < 0 or chunk < 1:
            raise ValueError("timeout and deadline must be > 0, retries and backoff >= 0, chunk >= 1")
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout, self.deadline, self.retries = timeout, deadline, retries
        self.backoff, self.max_backoff, self.chunk = backoff, max_backoff, chunk
        #: The server configuration every reply must come from: the one given, else the first seen.
        self.config_hash = expect_config

    def path(self, endpoint: str, kind: str | None) -> str:
        return f"{self.url}{endpoint}/{kind}" if kind else f"{self.url}{endpoint}"

    def wait_s(self, attempt: int, response: httpx.Response | None, remaining: float) -> float | None:
        """Seconds to wait before the next attempt, or None when no retry fits."""
        if attempt >= self.retries:
            return None
        delay = min(self.max_backoff, self.backoff * (2 ** attempt)) * (0.5 + random.random())
        if response is not None and "retry-after" in response.headers:
            try:
                delay = max(delay, float(response.headers["retry-after"]))
            except ValueError:
                pass
        return delay if delay < remaining else None

    def call(self, endpoint: str, body: Any, kind: str | None, deadline: float | None) -> _Call:
        """The retry state of one POST of `body` to `endpoint` (`kind`'s), to end by `deadline` s."""
        return _Call(self, self.path(endpoint, kind), _json_body(body),
                     time.monotonic() + (deadline or self.deadline))

    def chunks(self, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Native request bodies of at most `chunk` rows each, in order."""
        return [{"rows": list(rows[lo:lo + self.chunk])} for lo in range(0, len(rows), self.chunk)]

    def check(self, response: httpx.Response) -> Any:
        """The JSON body of a 200, or ServeError with the server's reason.

        A reply from another verifier configuration than the first (or the expected) one is a
        ServeError too: rewards of one run must not mix configurations.
        """
        if response.status_code == 200:
            seen = response.headers.get("x-veristep-config")
            if seen:
                if self.config_hash is None:
                    self.config_hash = seen
                elif seen != self.config_hash:
                    raise ServeError(f"{self.url} answers with verifier configuration {seen}, not "
                                     f"{self.config_hash}: the server changed under this client")
            return response.json()
        try:
            reason = response.json().get("error", response.text[:300])
        except Exception:  # noqa: BLE001 - not JSON: a proxy's page
            reason = response.text[:300]
        raise ServeError(f"HTTP {response.status_code}: {reason}", response.status_code)


class _Call:
    """One POST's attempts: what the sync and async clients share, all but the I/O and the sleep.

    Each attempt asks `timeout()` for its read timeout, then hands its outcome to `settle`,
    which returns the reply's JSON (done), or the seconds to wait before the next attempt, or
    raises `ServeError` (a 4xx, or no retry fits before the deadline).
    """

    def __init__(self, policy: _Policy, url: str, content: bytes, end: float) -> None:
        self.policy, self.url, self.content, self.end = policy, url, content, end
        self.attempt = 0

    def timeout(self) -> float:
        """This attempt's HTTP timeout: the policy's, cut to the time left (at least 0.1 s)."""
        return max(0.1, min(self.policy.timeout, self.end - time.monotonic()))

    def settle(self, response: httpx.Response | None, error: Exception | None) -> tuple[bool, Any]:
        """(True, reply JSON) when done; (False, seconds to wait) for another attempt."""
        if response is not None and response.status_code not in RETRY_STATUSES:
            return True, self.policy.check(response)
        wait = self.policy.wait_s(self.attempt, response, self.end - time.monotonic())
        if wait is None:
            what = f"HTTP {response.status_code}" if response is not None else repr(error)
            raise ServeError(f"no answer from {self.policy.url} after {self.attempt + 1} attempts: {what}",
                             response.status_code if response is not None else None)
        self.attempt += 1
        return False, wait


def _json_body(body: Any) -> bytes:
    """`body` as JSON the server reads back: NaN and Infinity as Python's, lone surrogates escaped."""
    # httpx's `json=` refuses both (allow_nan=False, strict UTF-8): one such item in a batch
    # raised for the whole batch, and a trainer lost every reward of its step
    return json.dumps(body, ensure_ascii=True, separators=(",", ":")).encode("ascii")


#: The headers of every POST, whose body is `_json_body`'s.
_JSON_HEADERS = {"Content-Type": "application/json"}


def _pairs_as_rows(completions: Sequence[Any], references: Sequence[Any]) -> list[dict[str, Any]]:
    """Native rows of (completion, reference) pairs; ValueError when the counts differ."""
    if len(completions) != len(references):
        raise ValueError(f"got {len(completions)} completions but {len(references)} references")
    return [row_of(c, r) for c, r in zip(completions, references, strict=True)]


def _get_reward_body(queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any],
                     truncated: Sequence[bool | None] | None) -> dict[str, Any]:
    """OpenRLHF's `/get_reward` body, with veristep's optional `truncated` column."""
    body: dict[str, Any] = {"query": list(queries), "prompts": list(prompts), "labels": list(labels)}
    if truncated is not None:
        body["truncated"] = list(truncated)
    return body


def _limits(max_connections: int) -> httpx.Limits:
    return httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)


class VeristepClient:
    """Blocking client: one pooled `httpx.Client`; safe to share between threads."""

    def __init__(self, url: str, *, token: str | None = None, timeout: float = 300.0,
                 deadline: float = 600.0, retries: int = 6, backoff: float = 0.5,
                 max_backoff: float = 30.0, chunk: int = DEFAULT_CHUNK, max_connections: int = 64,
                 expect_config: str | None = None) -> None:
        self.policy = _Policy(url, token, timeout, deadline, retries, backoff, max_backoff, chunk, expect_config)
        self._http = httpx.Client(limits=_limits(max_connections), headers=self.policy.headers)

    def post(self, endpoint: str, body: Any, kind: str | None = None, deadline: float | None = None) -> Any:
        """POST JSON with retries until `deadline` seconds have passed; the reply's JSON."""
        call = self.policy.call(endpoint, body, kind, deadline)
        while True:
            response, error = None, None
            try:
                response = self._http.post(call.url, content=call.content, headers=_JSON_HEADERS,
                                           timeout=call.timeout())
            except httpx.TransportError as err:
                error = err
            done, value = call.settle(response, error)
            if done:
                return value
            time.sleep(value)

    def verify_rows(self, rows: Sequence[Mapping[str, Any]], kind: str | None = None) -> list[dict[str, Any]]:
        """Rows in the CLI's JSONL format -> the output rows `veristep verify` would write."""
        return [row for body in self.policy.chunks(rows) for row in self.post("/v1/verify", body, kind)["rows"]]

    def verify(self, completions: Sequence[Any], references: Sequence[Any], kind: str | None = None,
               ) -> list[VerifyResult]:
        """VerifyResults of completions against references, as a local verifier would give."""
        return [result_of(row) for row in self.verify_rows(_pairs_as_rows(completions, references), kind)]

    def get_reward(self, queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any],
                   kind: str | None = None, truncated: Sequence[bool | None] | None = None) -> dict[str, Any]:
        """OpenRLHF's `/get_reward` call; `truncated` flags completions the generator cut off."""
        body = _get_reward_body(queries, prompts, labels, truncated)
        return self.post("/v1/get_reward" if kind else "/get_reward", body, kind)

    def get(self, endpoint: str) -> httpx.Response:
        """A GET on the server (no retries): /health, /ready, /metrics."""
        return self._http.get(self.policy.url + endpoint, timeout=self.policy.timeout)

    def close(self) -> None:
        """Close the pooled connections."""
        self._http.close()

    def __enter__(self) -> VeristepClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncVeristepClient:
    """Asyncio client: one pooled `httpx.AsyncClient` (use it from one event loop)."""

    def __init__(self, url: str, *, token: str | None = None, timeout: float = 300.0,
                 deadline: float = 600.0, retries: int = 6, backoff: float = 0.5,
                 max_backoff: float = 30.0, chunk: int = DEFAULT_CHUNK, max_connections: int = 64,
                 expect_config: str | None = None) -> None:
        self.policy = _Policy(url, token, timeout, deadline, retries, backoff, max_backoff, chunk, expect_config)
        self._http = httpx.AsyncClient(limits=_limits(max_connections), headers=self.policy.headers)

    async def post(self, endpoint: str, body: Any, kind: str | None = None, deadline: float | None = None) -> Any:
        """POST JSON with retries until `deadline` seconds have passed; the reply's JSON."""
        call = self.policy.call(endpoint, body, kind, deadline)
        while True:
            response, error = None, None
            try:
                response = await self._http.post(call.url, content=call.content, headers=_JSON_HEADERS,
                                                 timeout=call.timeout())
            except httpx.TransportError as err:
                error = err
            done, value = call.settle(response, error)
            if done:
                return value
            await asyncio.sleep(value)

    async def verify_rows(self, rows: Sequence[Mapping[str, Any]], kind: str | None = None) -> list[dict[str, Any]]:
        """Rows in the CLI's JSONL format -> output rows; chunks go concurrently."""
        parts = await asyncio.gather(*(self.post("/v1/verify", body, kind) for body in self.policy.chunks(rows)))
        return [row for part in parts for row in part["rows"]]

    async def verify(self, completions: Sequence[Any], references: Sequence[Any], kind: str | None = None,
                     ) -> list[VerifyResult]:
        """VerifyResults of completions against references, as a local verifier would give."""
        rows = await self.verify_rows(_pairs_as_rows(completions, references), kind)
        return [result_of(row) for row in rows]

    async def get_reward(self, queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any],
                         kind: str | None = None, truncated: Sequence[bool | None] | None = None,
                         ) -> dict[str, Any]:
        """OpenRLHF's `/get_reward` call; `truncated` flags completions the generator cut off."""
        body = _get_reward_body(queries, prompts, labels, truncated)
        return await self.post("/v1/get_reward" if kind else "/get_reward", body, kind)

    async def aclose(self) -> None:
        """Close the pooled connections."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncVeristepClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class RemoteVerifier:
    """A verifier whose verdicts come from a `veristep serve` server (kind `kind` there)."""

    def __init__(self, url: str, kind: str | None = None, **client_options: Any) -> None:
        self.url = url
        self.kind = kind or "remote"
        self._server_kind = kind
        self._options = client_options
        _Policy(url, client_options.get("token"), 1.0, 1.0, 0, 0.0, 0.0, 1)  # check the URL now
        self._lock = threading.Lock()
        self._client: VeristepClient | None = None
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncVeristepClient] = (
            weakref.WeakKeyDictionary())

    def reference_from_record(self, record: dict[str, Any]) -> dict[str, Any]:
        """The record itself: the server reads the reference with its own kind's parser.

        Fields that cannot travel as JSON (an image, a tensor) stay behind; NaN and lone
        surrogates travel (`_json_body`).
        """
        out = {}
        for key, value in record.items():
            if key == "completion":
                continue
            try:
                _json_body(value)
            except (TypeError, ValueError):
                continue
            out[key] = value
        return out

    @property
    def client(self) -> VeristepClient:
        """The blocking client, made on first use."""
        with self._lock:
            if self._client is None:
                self._client = VeristepClient(self.url, **self._options)
            return self._client

    def verify(self, completion: Any, reference: Any) -> VerifyResult:
        """One completion's result from the server."""
        return self.verify_batch([completion], [reference])[0]

    def verify_batch(self, completions: Sequence[Any], references: Sequence[Any]) -> list[VerifyResult]:
        """Many completions' results from the server, in input order."""
        return self.client.verify(completions, references, self._server_kind)

    async def averify(self, completion: Any, reference: Any) -> VerifyResult:
        """One completion's result, awaited."""
        return (await self.averify_batch([completion], [reference]))[0]

    async def averify_batch(self, completions: Sequence[Any], references: Sequence[Any]) -> list[VerifyResult]:
        """Many completions' results, awaited; one pooled async client per event loop."""
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._async.get(loop)
            if client is None:
                client = self._async[loop] = AsyncVeristepClient(self.url, **self._options)
        return await client.verify(completions, references, self._server_kind)

    def close(self) -> None:
        """Close the blocking client's connections (async ones close with their loops)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "kind": self.kind, "_server_kind": self._server_kind, "_options": self._options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._client = None
        self._async = weakref.WeakKeyDictionary()


__all__ = ["AsyncVeristepClient", "RemoteVerifier", "ServeError", "VeristepClient", "result_of", "row_of"]

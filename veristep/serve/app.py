"""The HTTP face of `veristep serve` (Starlette on uvicorn): routes, auth, body limits, replies.

Endpoints (KIND optional: the first kind served when left out):

* `POST /v1/verify[/KIND]`: native rows. A JSON body `{"rows": [...]}` gets `{"rows": [...]}`
  back; an `application/x-ndjson` body (a JSONL file as is) gets JSONL back, line for line
  what `veristep verify` writes.
* `POST /get_reward`, `POST /v1/get_reward/KIND`: OpenRLHF's remote reward model protocol.
* `POST /slime`, `POST /v1/slime/KIND`: slime's `{prompt, response, label}` -> a reward (a bare
  number; `?detail=1` answers the whole result object).
* `GET /health` (alive), `GET /ready` (verifiers built, not draining), `GET /metrics`.

Every reply carries `X-Veristep-Version` and `X-Veristep-Config` headers (and the same in
`version` / `config_hash` of a JSON object body). With a token, every endpoint but /health and
/ready needs `Authorization: Bearer TOKEN`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hmac
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .jsontext import TooMany, loads_with_row_text, ndjson_lines, plain_reason
from .metrics import CONTENT_TYPE, Metrics
from .service import (
    RequestError,
    ServeConfig,
    Service,
    check_list_of,
    check_types,
    completion_of,
    cut_flag,
    mark_cut,
    slime_cut,
    unjudged_reward_of,
)

NDJSON = "application/x-ndjson"
#: Bodies larger than this are decoded off the event loop (json.loads holds it otherwise).
_OFFLOAD_BYTES = 1 << 20


def create_app(service: Service) -> Starlette:
    """The ASGI app of one service."""
    metrics = service.metrics
    if metrics is None:
        metrics = service.metrics = Metrics(lambda: service.verifiers, lambda: service.outstanding,
                                            service.ray.actors if service.ray is not None else None)
    stamp_headers = {"X-Veristep-Version": service.version, "X-Veristep-Config": service.config_hash}

    def reply(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
        if isinstance(body, dict):
            body = {**body, **service.stamp()}
        return JSONResponse(body, status, {**stamp_headers, **(headers or {})})

    def endpoint(name: str, auth: bool = True) -> Callable[[Callable[[Request], Awaitable[Response]]],
                                                             Callable[[Request], Awaitable[Response]]]:
        def wrap(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
            async def run(request: Request) -> Response:
                start = time.perf_counter()
                metrics.inflight_requests.inc()
                try:
                    if auth:
                        _check_token(request, service.config.token)
                    response = await handler(request)
                except RequestError as err:
                    response = reply({"error": err.reason}, err.status, err.headers)
                except Exception as err:  # noqa: BLE001 - a bug of ours: one line, never a traceback
                    response = reply({"error": f"internal error: {type(err).__name__}: {err}"}, 500)
                finally:
                    metrics.inflight_requests.dec()
                for key, value in stamp_headers.items():
                    response.headers.setdefault(key, value)
                metrics.observe(name, response.status_code, time.perf_counter() - start)
                return response
            return run
        return wrap

    @contextlib.asynccontextmanager
    async def admitted(n: int) -> AsyncIterator[None]:
        service.admit(n)
        try:
            yield
        finally:
            service.release(n)

    @endpoint("health", auth=False)
    async def health(request: Request) -> Response:
        body: dict[str, Any] = {"status": "ok", "kinds": service.config.kinds, "pid": os.getpid()}
        if service.ray is not None:
            body["ray"] = service.ray.summary()
        return reply(body)

    @endpoint("ready", auth=False)
    async def ready(request: Request) -> Response:
        if service.draining:
            return reply({"ready": False, "reason": "draining"}, 503)
        if not service.ready:
            return reply({"ready": False, "reason": "starting"}, 503)
        return reply({"ready": True, "queue": service.outstanding, "max_queue": service.config.max_queue})

    @endpoint("metrics")
    async def metrics_view(request: Request) -> Response:
        return Response(metrics.render(), 200, media_type=CONTENT_TYPE)

    @endpoint("verify")
    async def verify(request: Request) -> Response:
        kind, _ = service.verifier(request.path_params.get("kind"))
        raw = await _read_body(request, service.config)
        deadline = _deadline(request)
        key = request.query_params.get("completion_key")
        if _content_type(request) == NDJSON:
            # numbered as the CLI numbers them: blank lines count, but get no output line
            numbered = await _ndjson_lines(raw, service)
            items = service.native_items(kind, [line for _, line in numbered], key, [i for i, _ in numbered])
            async with admitted(len(items)):
                results = await _unless_gone(request, service.native_results(kind, items, deadline))
            return Response(service.native_jsonl(kind, items, results), 200, stamp_headers, media_type=NDJSON)
        body, texts = await _json_rows(raw, service)
        rows = check_types(body, {"rows": (list,)}, "native request")["rows"]
        service.check_count(len(rows), "rows")
        items = service.native_items(kind, rows, key, texts=texts)
        async with admitted(len(items)):
            results = await _unless_gone(request, service.native_results(kind, items, deadline))
        return Response(service.native_json(kind, items, results), 200, stamp_headers,
                        media_type="application/json")

    @endpoint("get_reward")
    async def get_reward(request: Request) -> Response:
        kind, _ = service.verifier(request.path_params.get("kind"))
        body = check_types(await _json_counted(await _read_body(request, service.config), "query", service),
                           {"query": (list,)}, "get_reward")
        queries = body["query"]
        service.check_count(len(queries), "queries")
        check_list_of(queries, (str,), "query", "get_reward")
        prompts = _column(body, "prompts", len(queries))
        labels = _column(body, "labels", len(queries))
        # OpenRLHF's own client sends no cut-off signal; a caller that has one sends `truncated`
        cut = _column(body, "truncated", len(queries))
        for i, flag in enumerate(cut):
            cut_flag(flag, f"get_reward: truncated[{i}]")  # a 422 for anything but a bool or null
        unjudged = _unjudged_value(body, service.config.unjudged_reward)
        completions = mark_cut([completion_of(q, p) for q, p in zip(queries, prompts, strict=True)], cut)
        pairs = service.label_items(kind, completions, labels)
        async with admitted(len(pairs)):
            results = await _unless_gone(request, service.verify(kind, pairs, _deadline(request)))
        return reply(service.openrlhf_reply(results, unjudged))

    @endpoint("slime")
    async def slime(request: Request) -> Response:
        kind, _ = service.verifier(request.path_params.get("kind"))
        body = check_types(await _json(await _read_body(request, service.config)),
                           {"response": (str,)}, "slime request")
        unjudged = _unjudged_value(body, service.config.unjudged_reward)
        response = mark_cut([body["response"]], [slime_cut(body)])
        pairs = service.label_items(kind, response, [body.get("label")])
        async with admitted(1):
            (result,) = await _unless_gone(request, service.verify(kind, pairs, _deadline(request)))
        value = service.reward_value(result, unjudged)
        headers = {"X-Veristep-Status": result.status.value, "X-Veristep-Judged": str(bool(result.judged)).lower()}
        if request.query_params.get("detail") in ("1", "true"):
            return reply({"reward": value, "judged": bool(result.judged), "status": result.status.value,
                          "correct": bool(result.correct), "detail": result.detail[:300]}, 200, headers)
        return reply(value, 200, headers)

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/ready", ready, methods=["GET"]),
        Route("/metrics", metrics_view, methods=["GET"]),
        Route("/v1/verify", verify, methods=["POST"]),
        Route("/v1/verify/{kind}", verify, methods=["POST"]),
        Route("/get_reward", get_reward, methods=["POST"]),
        Route("/v1/get_reward/{kind}", get_reward, methods=["POST"]),
        Route("/slime", slime, methods=["POST"]),
        Route("/v1/slime/{kind}", slime, methods=["POST"]),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await asyncio.to_thread(service.warm_up)
        # What exists now (modules, verifiers, pools: ~140,000 objects with sympy loaded) lives
        # as long as the server: frozen, a collection under load walks only newer objects, and
        # never pauses every request for a walk over all of it (the 54 ms full collections at
        # start-up; under the load benchmark, generation-1 pauses went from 8 to 2 ms at most).
        gc.collect()
        gc.freeze()
        service.ready = True
        try:
            yield
        finally:
            service.ready = False
            await asyncio.to_thread(service.close)

    app = Starlette(routes=routes, lifespan=lifespan)
    # no 307 to the path without its trailing slash: a bare redirect, without our headers, that
    # a client posting a body would have to follow; such a path is a 404 like any other
    app.router.redirect_slashes = False

    async def not_found(request: Request, exc: Exception) -> Response:
        code = getattr(exc, "status_code", 404)
        what = "method not allowed" if code == 405 else "no such endpoint"
        return reply({"error": f"{what}: {request.method} {request.url.path}"}, code)

    app.add_exception_handler(404, not_found)
    app.add_exception_handler(405, not_found)
    return app


def _check_token(request: Request, token: str | None) -> None:
    if not token:
        return
    given = request.headers.get("authorization", "")
    scheme, _, value = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token.encode()):
        raise RequestError(401, "missing or wrong bearer token (Authorization: Bearer TOKEN)",
                           {"WWW-Authenticate": "Bearer"})


def _content_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


async def _read_body(request: Request, config: ServeConfig) -> bytes:
    """The body: 413 once past the size limit (declared or streamed), 408 if it comes too slowly."""
    limit = config.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise RequestError(413, f"body of {declared} bytes exceeds the limit of {limit} bytes")
        except ValueError:
            raise RequestError(400, f"bad Content-Length {declared!r}") from None
    chunks: list[bytes] = []

    async def read() -> None:
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise RequestError(413, f"body exceeds the limit of {limit} bytes")
            chunks.append(chunk)

    # a client that stops sending mid-body would hold its connection (and a slot of
    # --max-connections) for ever; one that sends 1 MB/s has time for the largest body
    seconds = config.header_timeout_s + limit / (1 << 20)
    try:
        await asyncio.wait_for(read(), seconds)
    except asyncio.TimeoutError:
        raise RequestError(408, f"body not received within {seconds:g} s",
                           {"Connection": "close"}) from None
    return b"".join(chunks)


async def _json(raw: bytes) -> Any:
    """The body as JSON; 400 with the parser's one-line reason otherwise."""
    if not raw.strip():
        raise RequestError(400, "empty body; expected a JSON object")

    def parse() -> Any:
        try:
            return json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as err:
            raise RequestError(400, f"body is not UTF-8 text ({err.reason})") from None
        except json.JSONDecodeError as err:
            raise RequestError(400, f"malformed JSON: {err.msg} at line {err.lineno} column {err.colno}") from None
        except RecursionError:
            raise RequestError(400, "malformed JSON: nested too deeply") from None
        except ValueError as err:  # json.loads's other refusal: an integer past Python's digit limit
            raise RequestError(400, f"unreadable JSON: {plain_reason(err)}") from None

    return await asyncio.to_thread(parse) if len(raw) > _OFFLOAD_BYTES else parse()


async def _json_rows(raw: bytes, service: Service, field: str = "rows") -> tuple[Any, list[str | None] | None]:
    """A body as JSON and each `field` element's own text (jsontext); a bad body gets `_json`'s 400s.

    413 as soon as an array of the body (its `field` above all) has more elements than the
    queue holds, before any of the rest is decoded.
    """

    def parse() -> tuple[dict[str, Any], list[str | None]] | None:
        try:
            return loads_with_row_text(raw.decode("utf-8"), field, service.config.max_queue)
        except UnicodeDecodeError:
            return None
        except TooMany as err:
            named = {"rows": "rows", "query": "queries"}
            what = named.get(err.key or "", f"elements of {err.key!r}" if err.key else "array elements")
            service.check_count(None, what)
            raise

    found = await asyncio.to_thread(parse) if len(raw) > _OFFLOAD_BYTES else parse()
    if found is not None:
        return found
    return await _json(raw), None


async def _json_counted(raw: bytes, field: str, service: Service) -> Any:
    """The body as JSON (`_json_rows` without the texts): 413 for an array longer than the queue."""
    body, _ = await _json_rows(raw, service, field)
    return body


async def _ndjson_lines(raw: bytes, service: Service) -> list[tuple[int, bytes]]:
    """(line number, bytes) of each line `veristep verify` would read; 413 past the queue's size."""

    def split() -> list[tuple[int, bytes]]:
        try:
            lines = ndjson_lines(raw.decode("utf-8", "surrogateescape"), service.config.max_queue)
        except TooMany:
            service.check_count(None, "rows")
            raise
        return [(n, line.encode("utf-8", "surrogateescape")) for n, line in lines]

    return await asyncio.to_thread(split) if len(raw) > _OFFLOAD_BYTES else split()


async def _unless_gone(request: Request, work: Awaitable[Any]) -> Any:
    """`await work`, cancelled if the client hangs up first (its items not yet started are not run)."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_hung_up(request))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        raise RequestError(499, "the client closed the connection before the reply")
    return task.result()


async def _hung_up(request: Request) -> None:
    """Return once the client has disconnected (the body has been read: nothing else comes)."""
    message = await request.receive()
    if message.get("type") != "http.disconnect":
        # uvicorn says nothing else once the body is in; a server that does cannot be watched
        await asyncio.Event().wait()


def _column(body: dict[str, Any], name: str, n: int) -> list[Any]:
    values = body.get(name)
    if values is None:
        return [None] * n
    if not isinstance(values, list):
        raise RequestError(422, f"get_reward: field {name!r} must be a list, got {type(values).__name__}")
    if len(values) != n:
        raise RequestError(422, f"get_reward: {len(values)} {name} for {n} queries; give one each")
    return values


def _unjudged_value(body: dict[str, Any], default: float | None) -> float | None:
    if "unjudged_reward" not in body:
        return default
    try:
        return unjudged_reward_of(body["unjudged_reward"])
    except ValueError as err:
        raise RequestError(422, f"unjudged_reward {err}") from None


def _deadline(request: Request) -> float | None:
    raw = request.headers.get("x-veristep-deadline")
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise RequestError(400, f"X-Veristep-Deadline must be seconds, got {raw!r}") from None
    if not value > 0:
        raise RequestError(400, f"X-Veristep-Deadline must be > 0, got {raw!r}")
    return value

"""Run `veristep serve`: bind, start uvicorn (one process or several on one port), drain on SIGTERM.

Several processes share one port with SO_REUSEPORT: the parent binds the port first (so `--port
0` works and a port already taken fails before anything starts), then forks the servers, each
listening on its own socket bound to that port; the kernel spreads connections over them. Each
process has its own verifiers and pools (`--workers` each). SIGTERM or SIGINT to the parent
goes to every server; each stops accepting, finishes the requests it has, and exits.
"""

from __future__ import annotations

import asyncio
import ctypes
import ipaddress
import json
import os
import signal
import socket
import sys
import time
from typing import Any

from veristep.verifiers.core.workers import PROCESSES_ENV

from .service import ServeConfig, Service

#: Most bytes a connection may send before its request head is complete (request line and
#: headers). httptools has no such limit: a 61 MB header was taken in, held the event loop
#: for seconds, and answered.
MAX_HEAD_BYTES = 64 * 1024


def is_loopback(host: str) -> bool:
    """Whether every address `host` resolves to is a loopback one (False if it does not resolve).

    Decided on the addresses, as `bind` resolves the name: a name that only looks local
    ("127.x.example") may resolve to any address.
    """
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return False
    return bool(found) and all(_loopback_address(info[4][0]) for info in found)


def _loopback_address(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.partition("%")[0]).is_loopback
    except ValueError:
        return False


def check_exposure(sock: socket.socket, token: str | None) -> None:
    """OSError when a socket bound beyond loopback would serve without a token.

    Checked on the address bound, after `is_loopback` on the name: the name may resolve to
    another address by now.
    """
    address = sock.getsockname()[0]
    if not token and not _loopback_address(address):
        sock.close()
        raise OSError(f"the host resolved to {address}, beyond this machine: give a bearer token "
                      "(--token or VERISTEP_SERVE_TOKEN)")


def bind(host: str, port: int, reuse_port: bool) -> socket.socket:
    """A bound socket (IPv6 for a host with ':'), SO_REUSEPORT when several processes share it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def head_timeout_protocol(base: type[Any], seconds: float, headers: dict[str, str] | None = None,
                          max_head_bytes: int = MAX_HEAD_BYTES) -> type[Any]:
    """uvicorn's HTTP protocol `base`, closing a connection that sends no request head in `seconds`.

    uvicorn times out only a kept-alive connection idle between requests: one that sent nothing,
    or part of a head, held a `--max-connections` slot for ever, and as many as that made every
    other client's request a 503. The clock starts when the connection is made, and again at
    the first bytes after a response; a complete head is a new request cycle (`self.cycle`),
    in both of uvicorn's HTTP/1.1 protocols (httptools and h11). Past `max_head_bytes` without
    a complete head the connection gets a 431 and is closed.

    uvicorn's own replies carry `headers` too (the server's stamp), as JSON `{"error": ...}`:
    its 400 for a request it cannot parse, and its 503 beyond `limit_concurrency` (made here,
    at the moment the request would start, with uvicorn's own test for it).
    """

    stamp = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    fields = {"version": (headers or {}).get("X-Veristep-Version"), "config_hash": (headers or {}).get("X-Veristep-Config")}

    class HeadTimeout(base):  # type: ignore[misc, valid-type]
        _head_timer: asyncio.TimerHandle | None = None
        _head_cycle: Any = None
        _head_bytes = 0
        _refused = False

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            # uvicorn would answer a plain-text 503 of its own; this one carries the stamp
            self._limit, self.limit_concurrency = self.limit_concurrency, None
            self.app = self._limited(self.app)

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            if self._head_timer is None and (self.cycle is None or self.cycle.response_complete):
                self._arm()
            super().data_received(data)
            if self.cycle is not self._head_cycle:
                self._disarm()
            elif self._head_timer is not None:
                self._head_bytes += len(data)
                if self._head_bytes > max_head_bytes:
                    self._disarm()
                    self._refuse(431, f"request head over {max_head_bytes} bytes")

        def send_400_response(self, msg: str) -> None:
            """uvicorn's reply to a request it cannot parse, stamped, as JSON."""
            self._refuse(400, f"malformed HTTP request: {msg.rstrip('.')}")

        def _refuse(self, status: int, reason: str) -> None:
            self._refused = True
            body = json.dumps({"error": reason, **fields}).encode()
            phrase = {400: "Bad Request", 431: "Request Header Fields Too Large"}.get(status, "Error")
            head = [f"HTTP/1.1 {status} {phrase}".encode()] + [k + b": " + v for k, v in stamp] + [
                b"content-type: application/json", b"content-length: %d" % len(body), b"connection: close"]
            if not self.transport.is_closing():
                self.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
                self.transport.close()

        def _limited(self, app: Any) -> Any:
            async def limited(scope: Any, receive: Any, send: Any) -> None:
                # uvicorn's test, made before its task exists; this one runs in that task
                limit = self._limit
                if limit is not None and (len(self.connections) >= limit or len(self.tasks) - 1 >= limit):
                    body = json.dumps({"error": "too many connections; retry shortly", **fields}).encode()
                    await send({"type": "http.response.start", "status": 503, "headers": [
                        *stamp, (b"content-type", b"application/json"),
                        (b"content-length", b"%d" % len(body)), (b"connection", b"close"),
                        (b"retry-after", b"1")]})
                    await send({"type": "http.response.body", "body": body, "more_body": False})
                    return
                await app(scope, receive, send)
            return limited

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._head_cycle = self.cycle
            self._head_bytes = 0
            self._head_timer = self.loop.call_later(seconds, self._expired)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _expired(self) -> None:
            self._head_timer = None
            if self.cycle is self._head_cycle:
                self.transport.close()

    return HeadTimeout


def _run_one(config: ServeConfig, sock: socket.socket, service: Service | None = None) -> bool:
    """One server process on a listening socket, until SIGTERM/SIGINT has drained it.

    False when it never started serving (its start-up failed, e.g. Ray actors that could not
    be placed; uvicorn has logged why).
    """
    import uvicorn
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    from .app import create_app

    service = service or Service(config)
    app = create_app(service)

    class _Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            service.draining = True  # /ready says 503 and new work is refused while it drains
            super().handle_exit(sig, frame)

    uconfig = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="on", backlog=2048,
        # bodies are read before admission: this bounds the memory that many large ones can take
        limit_concurrency=config.max_connections,
        http=head_timeout_protocol(AutoHTTPProtocol, config.header_timeout_s,
                                   {"X-Veristep-Version": service.version,
                                    "X-Veristep-Config": service.config_hash}),
        ws="none",  # no WebSocket endpoints; a connection never leaves the head timer's protocol
        timeout_keep_alive=30, timeout_graceful_shutdown=config.deadline_s + 10,
    )
    sock.listen(2048)  # connections made while the pools warm up wait in the backlog, not refused
    server = _Server(uconfig)
    # uvicorn re-raises the signal that stopped it once it has drained, under the handlers it
    # found: a drained server is a clean exit (code 0), so those handlers do nothing
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    server.run(sockets=[sock])
    return bool(server.started)


def _drain_with_parent() -> None:
    """Ask the kernel for SIGTERM (drain, then exit) when the parent dies, even by SIGKILL (Linux)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def serve(config: ServeConfig, service: Service | None = None) -> int:
    """Serve until stopped; returns the exit code. `service` (one process only) is used as built."""
    shared = config.processes > 1
    sock = bind(config.host, config.port, reuse_port=shared)
    check_exposure(sock, config.token)
    port = sock.getsockname()[1]
    host = f"[{config.host}]" if ":" in config.host else config.host
    print(f"veristep serve: listening on http://{host}:{port} (kinds: {', '.join(config.kinds)}; "
          f"processes: {config.processes}; config {config.config_hash()})", flush=True)
    if not shared:
        return 0 if _run_one(config, sock, service) else 1
    # N servers each building pools: a pool left at workers=None takes a 1/N share of the CPUs
    os.environ.setdefault(PROCESSES_ENV, str(config.processes))
    children: list[int] = []
    for _ in range(config.processes):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _drain_with_parent()
                own = bind(config.host, port, reuse_port=True)
                code = 0 if _run_one(config, own) else 1
            except BaseException as err:  # noqa: BLE001 - say why, then exit non-zero
                print(f"veristep serve: server process failed: {err!r}", file=sys.stderr, flush=True)
                code = 1
            finally:
                os._exit(code)
        children.append(pid)
    # the parent holds the bound (never listening) socket so the port stays ours while it runs

    def forward(sig: int, frame: Any) -> None:
        for pid in children:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    worst = 0
    alive = set(children)
    while alive:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid in alive:
            alive.discard(pid)
            code = os.waitstatus_to_exitcode(status)
            worst = max(worst, abs(code))
            if code != 0 and alive:  # one server died: stop the rest rather than serve short-handed
                forward(signal.SIGTERM, None)
    time.sleep(0)
    sock.close()
    return 1 if worst else 0

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
import os
import signal
import socket
import sys
import time
from typing import Any

from veristep.verifiers.core.workers import PROCESSES_ENV

from .service import ServeConfig, Service

LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable from this machine only."""
    return host in LOOPBACK or host.startswith("127.")


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


def head_timeout_protocol(base: type[Any], seconds: float) -> type[Any]:
    """uvicorn's HTTP protocol `base`, closing a connection that sends no request head in `seconds`.

    uvicorn times out only a kept-alive connection idle between requests: one that sent nothing,
    or part of a head, held a `--max-connections` slot for ever, and as many as that made every
    other client's request a 503. The clock starts when the connection is made, and again at
    the first bytes after a response; a complete head is a new request cycle (`self.cycle`),
    in both of uvicorn's HTTP/1.1 protocols (httptools and h11).
    """

    class HeadTimeout(base):  # type: ignore[misc, valid-type]
        _head_timer: asyncio.TimerHandle | None = None
        _head_cycle: Any = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._head_timer is None and (self.cycle is None or self.cycle.response_complete):
                self._arm()
            super().data_received(data)
            if self.cycle is not self._head_cycle:
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._head_cycle = self.cycle
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
        http=head_timeout_protocol(AutoHTTPProtocol, config.header_timeout_s),
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

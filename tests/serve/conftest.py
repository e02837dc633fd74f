"""Real `veristep serve` processes on free ports, for the HTTP tests."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

STARTUP_S = 180.0  # a loaded 2-core machine imports torch-free veristep in a few seconds; be generous


@dataclass
class Server:
    """A running server: its process, base URL and stderr log."""

    proc: subprocess.Popen
    url: str
    log: Path

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        """Signal the server and wait for it to exit; its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


def _start_server(tmp_path: Path, *args: str, env: dict[str, str] | None = None, ready: bool = True) -> Server:
    """Start `veristep serve ARGS --port 0` (unless ARGS set a port); wait until /ready says 200."""
    import httpx

    log = tmp_path / f"serve-{time.monotonic_ns()}.log"
    cmd = [sys.executable, "-m", "veristep", "serve", *args]
    if "--port" not in args:
        cmd += ["--port", "0"]
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log.open("wb"), env=full_env)
    deadline = time.monotonic() + STARTUP_S
    line = b""
    while time.monotonic() < deadline and b"\n" not in line:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {log.read_text()[-2000:]}")
        r, _, _ = select.select([proc.stdout], [], [], 0.5)
        if r:
            line += os.read(proc.stdout.fileno(), 4096)
    match = re.search(rb"http://[^\s]+:(\d+)", line)
    if not match:
        proc.kill()
        raise RuntimeError(f"no listening line: {line!r} {log.read_text()[-2000:]}")
    server = Server(proc, f"http://127.0.0.1:{int(match.group(1))}", log)
    if ready:
        while time.monotonic() < deadline:
            try:
                if httpx.get(server.url + "/ready", timeout=5).status_code == 200:
                    return server
            except httpx.TransportError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        server.stop(signal.SIGKILL)
        raise RuntimeError("server never became ready")
    return server


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    """math (default), code and tools, one worker each, a 1 MB body limit."""
    pytest.importorskip("uvicorn")
    srv = _start_server(tmp_path_factory.mktemp("serve"), "math", "code", "tools", "--workers", "1",
                       "--max-body-mb", "1", "--set", "code.timeout=10")
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def server_starter() -> Callable[..., Server]:
    """`_start_server` itself, for a test module's own module-scoped server fixture."""
    pytest.importorskip("uvicorn")
    return _start_server


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator:
    """A function that starts a server (`start_server(*args, env=...)`); all are killed at the end."""
    pytest.importorskip("uvicorn")
    started: list[Server] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Server:
        srv = _start_server(tmp_path, *args, env=env)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop(signal.SIGKILL)


def _forget_ray_address(address: str) -> None:
    """Remove the machine-wide 'latest cluster' note if it points at our test cluster.

    Ray's test Cluster writes it so that a bare `ray.init()` anywhere on this machine would join
    this cluster; other jobs on a shared machine must not. The server is given the address.
    """
    try:
        from ray._private.utils import get_ray_address_file

        path = Path(get_ray_address_file(None))
        if path.read_text().strip() == address:
            path.unlink()
    except (ImportError, AttributeError, OSError):  # another Ray layout, or no note written
        pass


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    """A local two-node Ray cluster (1 CPU each, as two machines would be); its GCS address."""
    if os.environ.get("VERISTEP_REQUIRE_RAY"):
        import ray  # noqa: F401 - `make test` installs the ray extra: this must not skip
    else:
        pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, connect=False,
                      head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        _forget_ray_address(cluster.address)
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        yield cluster.address
    finally:
        cluster.shutdown()


@pytest.fixture(scope="module")
def ray_server(ray_cluster: str, tmp_path_factory) -> Iterator[Server]:
    """`veristep serve math code --ray` on the two-node cluster (one actor per node), with a token."""
    pytest.importorskip("uvicorn")
    srv = _start_server(tmp_path_factory.mktemp("serve-ray"), "math", "code", "--workers", "1",
                        "--ray", ray_cluster, "--token", "s3cret", "--max-queue", "256",
                        "--set", "code.timeout=20")
    yield srv
    srv.stop()

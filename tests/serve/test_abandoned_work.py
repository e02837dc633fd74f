"""Work nobody waits for (a passed deadline, a client that hung up) is dropped, and admission counts
what the verifiers still hold; requests are counted before their rows are built (red team, serve)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from urllib.parse import urlparse

import pytest
from veristep.verifiers.core import aio
from veristep.verifiers.core.aio import AsyncBridge
from veristep.verifiers.core.result import Status, VerifyResult

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

SLEEPY = "```python\nimport time\ntime.sleep({s})\nprint({i})\n```"


class _Slow:
    """A verifier with `verify_batch_as_ready` on one thread, like code's sandbox threads."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.ran: list[str] = []
        self.pool = ThreadPoolExecutor(1)

    def _one(self, completion: str) -> VerifyResult:
        self.ran.append(completion)
        time.sleep(self.seconds)
        return VerifyResult(1.0, True, Status.CORRECT)

    def verify_batch(self, completions: list[str], references: list[object]) -> list[VerifyResult]:
        return [self._one(c) for c in completions]

    def verify_batch_as_ready(self, completions: list[str], references: list[object]):
        futures = {self.pool.submit(self._one, c): i for i, c in enumerate(completions)}
        running = set(futures)
        try:
            while running:
                done, running = wait_futures(running, return_when=FIRST_COMPLETED)
                yield [(futures[f], f.result()) for f in done]
        finally:
            for f in running:
                f.cancel()


@pytest.fixture
def short_lived_lanes(monkeypatch):
    """Lanes that exit 0.2 s after their last batch, and are gone when the test ends (test_aio counts them)."""
    monkeypatch.setattr(aio, "_IDLE_EXIT_S", 0.2)
    bridges: list[AsyncBridge] = []
    yield bridges.append
    for bridge in bridges:
        for thread in list(bridge._threads):
            thread.join(10)


def test_a_batch_whose_caller_stopped_waiting_is_not_run_and_each_item_is_reported_gone(short_lived_lanes):
    verifier = _Slow(0.3)
    bridge = AsyncBridge(verifier, lanes=1)
    short_lived_lanes(bridge)
    gone: list[bool] = []

    async def main() -> VerifyResult:
        loop = asyncio.get_running_loop()
        dropped = bridge.submit([f"a{i}" for i in range(10)], [None] * 10, loop, gone=lambda f: gone.append(f.cancelled()))
        await asyncio.sleep(0.1)  # the lane handed all ten over; the first runs
        kept = bridge.submit(["b"], [None], loop, gone=lambda f: gone.append(f.cancelled()))
        for fut in dropped:
            fut.cancel()
        (result,) = await asyncio.gather(*kept)
        for _ in range(100):  # the lane's last `gone` calls come on their own hop
            if len(gone) == 11:
                break
            await asyncio.sleep(0.05)
        return result

    assert asyncio.run(main()).status is Status.CORRECT
    # the item running when its caller left may finish, and one more may start with it
    assert len([c for c in verifier.ran if c.startswith("a")]) <= 2 and "b" in verifier.ran
    assert sorted(gone) == [False] + [True] * 10


def test_a_mixed_batch_drops_the_gone_callers_items_and_answers_the_others(short_lived_lanes):
    verifier = _Slow(0.2)
    bridge = AsyncBridge(verifier, lanes=1, linger_s=0)
    short_lived_lanes(bridge)

    async def main() -> list[VerifyResult]:
        loop = asyncio.get_running_loop()
        first = bridge.submit(["x"], [None], loop)  # keeps the lane busy while the next two queue
        await asyncio.sleep(0.05)
        dropped = bridge.submit([f"a{i}" for i in range(6)], [None] * 6, loop)
        kept = bridge.submit(["b", "c"], [None] * 2, loop)
        await asyncio.gather(*first)
        await asyncio.sleep(0.1)  # the lane took a{i}, b, c in one batch; a0 runs
        for fut in dropped:
            fut.cancel()
        return await asyncio.gather(*kept)

    assert [r.status for r in asyncio.run(main())] == [Status.CORRECT] * 2
    assert len([c for c in verifier.ran if c.startswith("a")]) <= 2


@pytest.fixture(scope="module")
def code_server(server_starter, tmp_path_factory):
    """code with one sandbox thread and a queue of 64 items."""
    srv = server_starter(tmp_path_factory.mktemp("serve-abandoned"), "code", "math", "format",
                         "--workers", "1", "--max-queue", "64", "--set", "code.timeout=20")
    yield srv
    srv.stop()


def _code_rows(n: int, seconds: float) -> list[dict]:
    return [{"completion": SLEEPY.format(s=seconds, i=i), "language": "python",
             "tests": [{"stdin": "", "stdout": f"{i}\n"}]} for i in range(n)]


def _answered(url: str, rows: list[dict], within: float) -> httpx.Response:
    """A request retried as its 429s say, until answered or `within` seconds have passed."""
    end = time.monotonic() + within
    while True:
        r = httpx.post(url, json={"rows": rows}, headers={"X-Veristep-Deadline": "20"}, timeout=60)
        if r.status_code != 429 or time.monotonic() > end:
            return r
        time.sleep(float(r.headers["retry-after"]))


def test_after_a_burst_of_short_deadline_requests_a_normal_request_is_answered(code_server):
    url = code_server.url + "/v1/verify/code"
    body = json.dumps({"rows": _code_rows(64, 0.5)}).encode()
    codes: dict[int, int] = {}

    def flood() -> None:
        with httpx.Client(timeout=60) as client:
            end = time.monotonic() + 4
            while time.monotonic() < end:
                r = client.post(url, content=body, headers={"X-Veristep-Deadline": "0.02"})
                codes[r.status_code] = codes.get(r.status_code, 0) + 1

    threads = [threading.Thread(target=flood) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(codes) <= {200, 429} and codes.get(429), codes  # the queue held: backpressure
    start = time.monotonic()
    r = _answered(url, _code_rows(1, 0), within=60)
    assert r.status_code == 200, r.text
    assert r.json()["rows"][0]["veristep"]["status"] == "correct"
    # the flood's items that never started were dropped: it took 1-2 s, not the minutes of
    # 0.5 s programs the flood asked for (generous: a loaded 2-core machine)
    assert time.monotonic() - start < 30


def test_the_queue_depth_counts_the_items_of_requests_that_gave_up(code_server):
    url = code_server.url + "/v1/verify/code"
    r = httpx.post(url, json={"rows": _code_rows(2, 3)}, headers={"X-Veristep-Deadline": "0.5"}, timeout=60)
    assert [row["veristep"]["status"] for row in r.json()["rows"]] == ["timeout"] * 2
    # the first program still runs: what the server holds is not 0, and admission knows it
    ready = httpx.get(code_server.url + "/ready", timeout=30).json()
    assert ready["queue"] >= 1
    assert _answered(url, _code_rows(1, 0), within=60).json()["rows"][0]["veristep"]["status"] == "correct"


def test_a_client_that_hangs_up_has_its_items_dropped(code_server):
    url = urlparse(code_server.url)
    body = json.dumps({"rows": _code_rows(16, 1)}).encode()
    for _ in range(2):
        with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
            sock.sendall(b"POST /v1/verify/code HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(body) + body)
            time.sleep(0.3)
    start = time.monotonic()
    r = _answered(code_server.url + "/v1/verify/code", _code_rows(1, 0), within=60)
    assert r.json()["rows"][0]["veristep"]["status"] == "correct"
    assert time.monotonic() - start < 15  # not the 32 s of every hung-up program run


@pytest.mark.parametrize("path,body,what", [
    ("/v1/verify/math", b'{"rows":[' + b",".join([b"{}"] * 200_000) + b"]}", "more than 64 rows"),
    ("/v1/get_reward/math", b'{"query":[' + b",".join([b'""'] * 200_000) + b"]}", "more than 64 queries"),
    ("/v1/get_reward/math", b'{"query":[""],"labels":[' + b",".join([b"1"] * 200_000) + b"]}",
     "more than 64 elements of 'labels'"),
    ("/v1/verify/math", b'[' + b",".join([b"{}"] * 200_000) + b"]", "more than 64 array elements"),
])
def test_more_rows_than_the_queue_are_refused_before_they_are_built(code_server, path, body, what):
    start = time.monotonic()
    r = httpx.post(code_server.url + path, content=body, timeout=60, headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"].startswith(what), r.text
    assert "split the batch" in r.json()["error"]
    assert time.monotonic() - start < 10


def test_ndjson_lines_are_counted_before_they_are_split(code_server):
    url = code_server.url + "/v1/verify/math"
    many = b'{"completion": "1", "answer": "1"}\n' * 65
    r = httpx.post(url, content=many, headers={"Content-Type": "application/x-ndjson"}, timeout=60)
    assert r.status_code == 413 and r.json()["error"].startswith("more than 64 rows")
    # blank lines are no rows: 8 MB of them and 64 rows are one request the queue holds
    blank = b"\n" * (8 << 20) + b'{"completion": "\\\\boxed{1}", "answer": "1"}\n' * 64
    r = httpx.post(url, content=blank, headers={"Content-Type": "application/x-ndjson"}, timeout=60)
    assert r.status_code == 200 and r.text.count("\n") == 64


def test_format_is_judged_through_the_label_endpoints_without_a_label(code_server):
    good = "<think>a</think>\n<answer>1</answer>"
    r = httpx.post(code_server.url + "/v1/get_reward/format", json={"query": [good, "no tags"]}, timeout=60)
    assert r.status_code == 200 and r.json()["statuses"] == ["correct", "format_error"]
    r = httpx.post(code_server.url + "/v1/get_reward/format", json={"query": [good], "labels": ["x"]}, timeout=60)
    assert r.json()["statuses"] == ["correct"]
    r = httpx.post(code_server.url + "/v1/slime/format?detail=1", json={"response": good}, timeout=60)
    assert r.json()["status"] == "correct" and r.json()["reward"] == 1.0
    # a kind that needs a reference still says so
    r = httpx.post(code_server.url + "/v1/get_reward/math", json={"query": ["\\boxed{1}"]}, timeout=60)
    assert r.json()["statuses"] == ["bad_reference"]

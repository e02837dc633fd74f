"""`veristep serve` against input Python's JSON reads oddly, and against clients that stall.

Real server processes, real sockets: an integer past Python's 4,300-digit limit, a non-finite
`unjudged_reward`, NaN and lone surrogates from the client, and half-sent requests.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlparse

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from veristep.client import AsyncVeristepClient, RemoteVerifier, VeristepClient  # noqa: E402

BIG = "1" * 5000  # json.loads refuses it with a plain ValueError, not a JSONDecodeError
HEADER_TIMEOUT = 2.0
TOKEN = "s3cret"
MAX_CONNECTIONS = 8
SLIME = json.dumps({"prompt": "p", "response": "\\boxed{4}", "label": "4"}).encode()


def _json_with(body: object, raw: str) -> bytes:
    """`body` as JSON, each string "RAW" replaced by `raw` (JSON text json.dumps would not write)."""
    return json.dumps(body).replace('"RAW"', raw).encode()


@pytest.mark.parametrize("path,body", [
    ("/v1/verify", {"rows": [{"completion": "\\boxed{4}", "answer": "RAW"}]}),
    ("/get_reward", {"query": ["\\boxed{4}"], "labels": ["RAW"]}),
    ("/slime", {"response": "\\boxed{4}", "label": "RAW"}),
    ("/slime?detail=1", {"response": "\\boxed{4}", "label": "4", "n": "RAW"}),
])
def test_an_integer_past_the_digit_limit_is_a_400(server, path, body):
    r = httpx.post(server.url + path, content=_json_with(body, BIG), timeout=60,
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    reason = r.json()["error"]
    assert "4300 digits" in reason and "\n" not in reason and "set_int_max_str_digits" not in reason


def test_an_ndjson_line_with_an_integer_past_the_digit_limit_is_its_own_input_error(server):
    rows = [{"completion": "\\boxed{4}", "answer": "4"}, {"completion": "x", "answer": "RAW"}]
    body = _json_with(rows[0], BIG) + b"\n\n" + _json_with(rows[1], BIG) + b"\n"
    r = httpx.post(server.url + "/v1/verify", content=body, timeout=60,
                   headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 200, r.text
    first, second = (json.loads(line)["veristep"] for line in r.text.splitlines())
    assert first["status"] == "correct"
    assert second["status"] == "input_error" and second["line"] == 3 and "4300 digits" in second["detail"]


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e999", "1" * 400])
@pytest.mark.parametrize("path,body", [
    ("/get_reward", {"query": ["\\boxed{4}"], "labels": [None], "unjudged_reward": "RAW"}),
    ("/slime", {"response": "\\boxed{4}", "label": None, "unjudged_reward": "RAW"}),
    ("/slime?detail=1", {"response": "\\boxed{4}", "label": None, "unjudged_reward": "RAW"}),
])
def test_a_non_finite_unjudged_reward_is_a_422(server, path, body, value):
    r = httpx.post(server.url + path, content=_json_with(body, value), timeout=60,
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    reason = r.json()["error"]
    assert reason.startswith("unjudged_reward must be a finite number or null") and "\n" not in reason


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e999", "1" * 400])
def test_a_non_finite_unjudged_reward_flag_is_a_usage_error(value, capsys):
    from veristep.cli import main

    # and a mistake checked after it: code that let the value through exits 2 too, not serve
    assert main(["serve", "math", f"--unjudged-reward={value}", "--nice", "20"]) == 2
    err = capsys.readouterr().err
    assert "--unjudged-reward must be a finite number or null" in err and err.count("\n") == 1


COMPLETIONS = ["\\boxed{4}", "\\boxed{5}", "\\boxed{6}\ud800"]
REFERENCES = [float("nan"), {"answer": "5", "score": float("inf")}, "6"]


def _one_result_each(results: list) -> None:
    assert len(results) == 3
    assert results[1].status.value == "correct"  # an infinite field of the record does not matter
    assert all(r.status.value != "internal_error" for r in results)


def test_client_sends_nan_and_lone_surrogates_and_gets_a_result_each(server):
    import asyncio

    with VeristepClient(server.url, retries=0, deadline=60) as client:
        _one_result_each(client.verify(COMPLETIONS, REFERENCES, kind="math"))

    async def run() -> list:
        async with AsyncVeristepClient(server.url, retries=0, deadline=60) as client:
            return await client.verify(COMPLETIONS, REFERENCES, kind="math")

    _one_result_each(asyncio.run(run()))
    remote = RemoteVerifier(server.url, kind="math", retries=0)
    try:
        record = remote.reference_from_record({"completion": "x", "answer": "5", "weight": float("nan"),
                                               "note": "\udfff", "image": object()})
        assert set(record) == {"answer", "weight", "note"}  # what JSON cannot hold stays behind
        _one_result_each(remote.verify_batch(COMPLETIONS, [REFERENCES[0], record, REFERENCES[2]]))
    finally:
        remote.close()


@pytest.fixture(scope="module")
def guarded_server(server_starter, tmp_path_factory) -> Iterator:
    """math with a token, few connections, a short header timeout and a 1 MB body limit."""
    srv = server_starter(tmp_path_factory.mktemp("serve-guarded"), "math", "--workers", "1",
                         "--token", TOKEN, "--max-connections", str(MAX_CONNECTIONS),
                         "--header-timeout", str(HEADER_TIMEOUT), "--max-body-mb", "1")
    yield srv
    srv.stop()


def _connect(srv) -> socket.socket:
    url = urlparse(srv.url)
    return socket.create_connection((url.hostname, url.port), timeout=30)


def _head(body: bytes, token: str = TOKEN) -> bytes:
    return (b"POST /slime HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer %s\r\nContent-Length: %d\r\n\r\n" % (token.encode(), len(body)))


def _reply(sock: socket.socket) -> tuple[int, bytes]:
    """The status and body of one HTTP/1.1 reply with a Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed after {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    length = next(int(line.split(b":")[1]) for line in lines if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed mid-body"
        body += chunk
    return int(lines[0].split()[1]), body


def _closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True


def test_half_sent_requests_are_closed_after_the_header_timeout(guarded_server):
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    held = [_connect(guarded_server) for _ in range(MAX_CONNECTIONS)]
    try:
        for sock in held[1:]:  # the first sends nothing at all
            sock.sendall(b"POST /slime HTTP/1.1\r\nHost: x\r\n")
        time.sleep(0.5)
        # every slot is taken: any request, even with the token, gets uvicorn's 503
        busy = httpx.post(guarded_server.url + "/slime", content=SLIME, headers=auth, timeout=30)
        assert busy.status_code == 503
        start = time.monotonic()
        for sock in held:
            sock.settimeout(HEADER_TIMEOUT + 30)
            assert _closed_by_server(sock)
        assert time.monotonic() - start < HEADER_TIMEOUT + 3
        ok = httpx.post(guarded_server.url + "/slime", content=SLIME, headers=auth, timeout=30)
        assert ok.status_code == 200 and ok.json() == 1.0
    finally:
        for sock in held:
            sock.close()


def test_a_body_that_stops_coming_is_a_408(guarded_server):
    with _connect(guarded_server) as sock:
        start = time.monotonic()
        sock.sendall(_head(SLIME) + SLIME[:10])
        status, body = _reply(sock)
        assert status == 408 and "body not received" in json.loads(body)["error"]
        # its deadline: the header timeout plus 1 s per MB of --max-body-mb
        assert HEADER_TIMEOUT + 1 - 0.5 < time.monotonic() - start < HEADER_TIMEOUT + 1 + 5
        assert _closed_by_server(sock)


def test_a_kept_alive_connection_outlives_the_header_timeout(guarded_server):
    with _connect(guarded_server) as sock:
        # a head that comes in two parts within the timeout, then an idle pause longer than it
        request = _head(SLIME) + SLIME
        sock.sendall(request[:20])
        time.sleep(HEADER_TIMEOUT / 2)
        sock.sendall(request[20:])
        assert _reply(sock) == (200, b"1.0")
        time.sleep(HEADER_TIMEOUT + 1)
        sock.sendall(request)
        assert _reply(sock) == (200, b"1.0")

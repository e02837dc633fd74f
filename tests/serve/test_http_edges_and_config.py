"""Replies uvicorn would make on its own, NDJSON blank lines as the CLI reads them, and start-up
checks (red team, serve): a 431 for a huge head, stamped 400s, no slash redirect, loopback decided
on addresses, a blank token refused, a wrong-typed cut-off flag an input error."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from urllib.parse import urlparse

import pytest
from veristep.common.jsonl_io import _blank as cli_blank

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")


def _raw(srv, data: bytes) -> tuple[list[bytes], bytes]:
    """Send bytes, read until the server closes or a whole reply is in: (head lines, body)."""
    url = urlparse(srv.url)
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused mid-send: the reply is still there to read
        out = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
            head, sep, body = out.partition(b"\r\n\r\n")
            length = [ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:")]
            if sep and length and len(body) >= int(length[0].split(b":")[1]):
                break
    head, _, body = out.partition(b"\r\n\r\n")
    return head.split(b"\r\n"), body


def _header(lines: list[bytes], name: bytes) -> bytes | None:
    return next((ln.split(b":", 1)[1].strip() for ln in lines if ln.lower().startswith(name + b":")), None)


def test_a_head_past_64_kib_is_a_431_with_the_stamp(server):
    huge = b"POST /v1/verify HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * (1 << 20) + b"\r\nContent-Length: 2\r\n\r\n{}"
    lines, body = _raw(server, huge)
    assert lines[0].split()[1] == b"431", lines[0]
    assert _header(lines, b"x-veristep-version") and "over 65536 bytes" in json.loads(body)["error"]
    # a head just under the limit is a request like any other
    ok = httpx.get(server.url + "/health", headers={"X-Pad": "a" * 60_000}, timeout=30)
    assert ok.status_code == 200


@pytest.mark.parametrize("length", [b"-5", b"abc"])
def test_a_bad_content_length_is_a_stamped_400(server, length):
    lines, body = _raw(server, b"POST /v1/verify HTTP/1.1\r\nHost: x\r\nContent-Length: " + length + b"\r\n\r\n{}")
    assert lines[0].split()[1] == b"400"
    assert _header(lines, b"x-veristep-version") and _header(lines, b"x-veristep-config")
    assert json.loads(body)["error"].startswith("malformed HTTP request")


def test_a_trailing_slash_is_a_404_not_a_redirect(server):
    r = httpx.post(server.url + "/v1/verify/", json={"rows": []}, timeout=30)
    assert r.status_code == 404 and r.headers["x-veristep-version"]
    assert "no such endpoint" in r.json()["error"]


def test_ndjson_blank_lines_are_the_clis_line_for_line():
    from veristep.serve.jsontext import TooMany, ndjson_lines

    # every character str.strip() drops, and some it keeps, alone and mixed, ASCII or not
    spaces = [chr(c) for c in range(0x110000) if chr(c).isspace() and chr(c) != "\n"]
    pieces = [*spaces, "x", "\u200b", "\ufeff", "{}", "\x00", "\udcff"]
    lines = [*pieces, *(a + b for a in pieces[:40] for b in pieces[-8:]), "", " \t\r", "\x1c\x1d\x1e\x1f"]
    raw = "\n".join(lines).encode("utf-8", "surrogateescape") + b"\n\xff\xfe\n\xc2\n"
    kept = ndjson_lines(raw.decode("utf-8", "surrogateescape"))
    expected = [(n, line) for n, line in enumerate(raw.split(b"\n"), start=1) if line and not cli_blank(line)]
    assert [(n, line.encode("utf-8", "surrogateescape")) for n, line in kept] == expected
    with pytest.raises(TooMany):
        ndjson_lines("a\n\n b\nc\n", max_lines=2)


def test_ndjson_blank_lines_over_http_match_the_cli(server, tmp_path):
    data = b'{"completion": "\\\\boxed{1}", "answer": "1"}\n\xc2\xa0\n\x1c\n\xe3\x80\x80\n{"completion": "\\\\boxed{2}", "answer": "2"}\n'
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_bytes(data)
    subprocess.run([sys.executable, "-m", "veristep", "verify", "math", str(src), "-o", str(out), "--workers", "1"],
                   check=True, capture_output=True, timeout=300)
    r = httpx.post(server.url + "/v1/verify/math", content=data, headers={"Content-Type": "application/x-ndjson"},
                   timeout=60)
    assert [json.loads(x)["veristep"] for x in r.text.splitlines()] == \
        [json.loads(x)["veristep"] for x in out.read_text().splitlines()]
    assert len(r.text.splitlines()) == 2


@pytest.mark.parametrize("row,status", [
    ({"completion": "\\boxed{4}", "answer": "4", "truncated": "true"}, "input_error"),
    ({"completion": "\\boxed{4}", "answer": "4", "truncated": 1}, "input_error"),
    ({"completion": "\\boxed{4}", "answer": "4", "finish_reason": 5}, "input_error"),
    ({"completion": "\\boxed{4}", "answer": "4", "truncated": None}, "correct"),
    ({"completion": "\\boxed{4}", "answer": "4", "truncated": False}, "correct"),
])
def test_a_native_rows_cut_off_flag_of_the_wrong_type_is_an_input_error(server, row, status):
    r = httpx.post(server.url + "/v1/verify/math", json={"rows": [row]}, timeout=60)
    result = r.json()["rows"][0]["veristep"]
    assert result["status"] == status
    if status == "input_error":
        assert "must be" in result["detail"]


def test_loopback_is_decided_on_the_resolved_addresses(monkeypatch):
    from veristep.serve import main

    assert main.is_loopback("127.0.0.1") and main.is_loopback("localhost") and main.is_loopback("::1")
    assert not main.is_loopback("0.0.0.0") and not main.is_loopback("no-such-host.invalid")

    def fake(host, *args, **kwargs):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", 0))]

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    assert not main.is_loopback("127.0.0.1.example")  # looks local, resolves elsewhere


def test_a_socket_bound_beyond_loopback_without_a_token_is_refused():
    from veristep.serve.main import check_exposure

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        check_exposure(sock, None)  # loopback: fine
    sock = socket.socket()
    sock.bind(("0.0.0.0", 0))
    with pytest.raises(OSError, match="bearer token"):
        check_exposure(sock, None)
    assert sock.fileno() == -1  # closed


@pytest.mark.parametrize("args,env,message", [
    (["--token", " "], {}, "--token is blank"),
    (["--token", ""], {}, "--token is blank"),
    ([], {"VERISTEP_SERVE_TOKEN": " \t"}, "VERISTEP_SERVE_TOKEN is blank"),
])
def test_a_blank_token_is_refused_at_start_up(args, env, message, capsys, monkeypatch):
    from veristep.cli import main

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert main(["serve", "math", "--host", "203.0.113.1", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_token_is_stripped_as_http_strips_a_header_value():
    from veristep.serve.cli import server_token

    assert server_token(" s3cret\n", None) == "s3cret"
    assert server_token(None, "abc\n") == "abc"
    assert server_token(None, "") is None and server_token(None, None) is None

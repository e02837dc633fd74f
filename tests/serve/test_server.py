"""`veristep serve` over real HTTP: a server process on a free port, real clients."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")


MATH_ROWS = [
    {"id": 1, "completion": "so the answer is \\boxed{42}", "answer": "42"},
    {"id": 2, "completion": "\\boxed{\\frac{1}{2}}", "answer": "0.5"},
    {"id": 3, "completion": "\\boxed{7}", "answer": 8},
    {"id": 4, "completion": "nothing here", "answer": "3"},
    {"id": 5, "completion": "\\boxed{5}"},  # no reference at all
    {"id": 6, "completion": "\\boxed{5}", "answer": None},  # an unusable reference
    {"id": 7, "completion": ["not", "text"], "answer": "1"},  # not a completion
    {"id": 8, "completion": [{"role": "assistant", "content": "\\boxed{2}"}], "answer": "2"},
]


def _stamped(response: httpx.Response) -> None:
    assert response.headers["x-veristep-version"]
    assert len(response.headers["x-veristep-config"]) == 16


def _cli_rows(tmp_path: Path, kind: str, rows: list, *extra: str) -> list[dict]:
    src, out = tmp_path / f"{kind}-in.jsonl", tmp_path / f"{kind}-out.jsonl"
    src.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    subprocess.run([sys.executable, "-m", "veristep", "verify", kind, str(src), "-o", str(out), *extra],
                   check=False, capture_output=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_native_rows_are_what_veristep_verify_writes(server, tmp_path: Path):
    expected = _cli_rows(tmp_path, "math", MATH_ROWS, "--workers", "1")
    r = httpx.post(server.url + "/v1/verify", json={"rows": MATH_ROWS}, timeout=120)
    assert r.status_code == 200, r.text
    _stamped(r)
    body = r.json()
    assert body["kind"] == "math" and body["config_hash"] == r.headers["x-veristep-config"]
    assert body["rows"] == expected
    statuses = [row["veristep"]["status"] for row in body["rows"]]
    assert statuses == ["correct", "correct", "wrong", "no_answer", "bad_reference", "bad_reference",
                        "input_error", "correct"]
    # the JSONL form: a file's lines as they are, bad lines included, answered line for line
    lines = [json.dumps(row) for row in MATH_ROWS[:3]] + ["", "{not json", json.dumps(MATH_ROWS[3])]
    expected = _cli_rows(tmp_path, "math", lines, "--workers", "1")
    r = httpx.post(server.url + "/v1/verify/math", content="\n".join(lines) + "\n",
                   headers={"content-type": "application/x-ndjson"}, timeout=120)
    assert r.status_code == 200, r.text
    _stamped(r)
    assert [json.loads(line) for line in r.text.splitlines()] == expected
    bad = json.loads(r.text.splitlines()[3])["veristep"]
    assert bad["status"] == "input_error" and bad["line"] == 5  # numbered as the CLI numbers lines


def test_native_json_rows_spliced_or_encoded_as_the_cli_does(server, tmp_path: Path):
    """A reply row is its request text with `veristep` spliced in, or (NaN, an old `veristep`
    key) re-encoded as the CLI does; either way the rows equal `veristep verify`'s."""
    lines = [
        '{ "id" : 1 ,\t"completion": "\\\\boxed{4}", "answer": "4" }',  # odd spacing, kept as sent
        '{"id": 2, "completion": "\\\\boxed{2}", "answer": "2", "veristep": {"old": true}}',
        '{"id": 3, "completion": "\\\\boxed{3}", "answer": "3", "score": NaN}',  # null in the reply
        '{"id": 4, "completion": "\\ud800", "answer": "1"}',  # a lone surrogate: input_error
        '{"id": 5, "id": 6, "completion": "\\\\boxed{5}", "answer": "5", "note": "é\\u00e9"}',
        "{}",
    ]
    expected = _cli_rows(tmp_path, "math", lines, "--workers", "1")
    body = '{"rows" :[' + " ,\n".join(lines) + ', 7, [1]], "extra": {"rows": 1}}'
    r = httpx.post(server.url + "/v1/verify", content=body.encode(), timeout=120)
    assert r.status_code == 200, r.text
    _stamped(r)
    reply = r.json()
    assert set(reply) == {"kind", "rows", "version", "config_hash"}
    assert reply["rows"][:6] == expected
    assert reply["rows"][0]["veristep"]["status"] == "correct" and reply["rows"][2]["score"] is None
    assert reply["rows"][1]["veristep"]["status"] == "correct" and "old" not in reply["rows"][1]["veristep"]
    assert [row["veristep"]["status"] for row in reply["rows"][6:]] == ["input_error", "input_error"]
    assert '{ "id" : 1 ,\t"completion"' in r.text  # the first row's own text


def test_code_and_tools_kinds(server, test_data_dir: Path):
    for kind, name in (("code", "code_sample.jsonl"), ("tools", "tools_sample.jsonl")):
        rows = [json.loads(line) for line in (test_data_dir / name).open()]
        rows = [r for r in rows if r.get("expected_status") != "timeout"][:8]
        r = httpx.post(f"{server.url}/v1/verify/{kind}", json={"rows": rows}, timeout=300)
        assert r.status_code == 200, r.text
        for row, out in zip(rows, r.json()["rows"], strict=True):
            assert out["veristep"]["kind"] == kind
            if "expected_status" in row:
                assert out["veristep"]["status"] == row["expected_status"], (kind, row.get("id"), out)


def test_openrlhf_get_reward_with_openrlhfs_own_client(server):
    if os.environ.get("VERISTEP_REQUIRE_OPENRLHF") != "1":
        pytest.importorskip("openrlhf")
    import torch
    from openrlhf.utils.agent import SingleTurnAgentExecutor

    executor = SingleTurnAgentExecutor(remote_rm_url=server.url + "/get_reward")
    prompt = "<|im_start|>user\nWhat is 6*7?<|im_end|>\n<|im_start|>assistant\n"
    cases = [("so \\boxed{42}<|im_end|>", "42"), ("\\boxed{41}<|im_end|>", "42"), ("\\boxed{1}", None)]

    async def fetch():
        return [await executor._fetch_rewards_via_http([prompt + resp], [prompt], [label])
                for resp, label in cases]

    replies = [r[0] for r in asyncio.run(fetch())]
    assert [r["rewards"] for r in replies] == [[1.0], [0.0], [0.0]]
    assert [r["statuses"] for r in replies] == [["correct"], ["wrong"], ["bad_reference"]]
    unjudged = replies[2]["extra_logs"]
    assert unjudged["veristep_judged"] == [0.0] and unjudged["veristep_unjudged_bad_reference"] == [1.0]
    for reply in replies:  # what OpenRLHF's samples generator does with each extra_logs value
        for value in reply["extra_logs"].values():
            torch.tensor([value])
    # the caller chooses the unjudged value, per request
    r = httpx.post(server.url + "/get_reward", json={"query": ["x \\boxed{1}"], "prompts": ["x"],
                                                     "labels": [None], "unjudged_reward": -1}, timeout=60)
    assert r.json()["rewards"] == [-1.0] and r.json()["extra_logs"]["veristep_judged"] == [0.0]
    # labels of other kinds: a tools label is the expected calls (JSON text), a number is an answer
    call = '<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>'
    r = httpx.post(server.url + "/v1/get_reward/tools", timeout=60, json={
        "query": ["p" + call, "p" + call], "prompts": ["p", "p"],
        "labels": ['[{"name": "f", "arguments": {"x": 1}}]', '{"expected": "not a list"}']})
    assert r.json()["statuses"] == ["correct", "bad_reference"]
    r = httpx.post(server.url + "/get_reward", json={"query": ["\\boxed{8}"], "labels": [8]}, timeout=60)
    assert r.json()["rewards"] == [1.0]


def test_slime_request_shape(server):
    """slime's remote_rm posts {prompt, response, label} and takes the JSON reply as the reward."""
    if os.environ.get("VERISTEP_REQUIRE_OPENRLHF") != "1":
        pytest.importorskip("aiohttp")
    import aiohttp

    async def remote_rm(url: str, payload: dict):
        connector = aiohttp.TCPConnector(limit=64)
        async with aiohttp.ClientSession(connector=connector) as session:
            async with session.post(url, json=payload) as resp:
                resp.raise_for_status()
                return await resp.json(), resp.headers

    reward, headers = asyncio.run(remote_rm(server.url + "/slime",
                                            {"prompt": "Q", "response": "\\boxed{12}", "label": "12"}))
    assert reward == 1.0 and headers["X-Veristep-Status"] == "correct"
    reward, headers = asyncio.run(remote_rm(server.url + "/slime", {"prompt": "Q", "response": "\\boxed{1}", "label": None}))
    assert reward == 0.0 and headers["X-Veristep-Status"] == "bad_reference"
    assert headers["X-Veristep-Judged"] == "false"
    label = json.dumps({"language": "python", "tests": [{"stdin": "3\n", "stdout": "9\n"}]})
    r = httpx.post(server.url + "/v1/slime/code?detail=1", timeout=120, json={
        "prompt": "square it", "response": "```python\nn=int(input())\nprint(n*n)\n```", "label": label})
    assert r.json()["reward"] == 1.0 and r.json()["status"] == "correct"
    _stamped(r)


@pytest.mark.parametrize("method,path,kwargs,code,reason", [
    ("post", "/v1/verify", {"content": b"{\"rows\": [1,"}, 400, "malformed JSON"),
    ("post", "/v1/verify", {"content": b""}, 400, "empty body"),
    ("post", "/v1/verify", {"content": b"\xff\xfe"}, 400, "not UTF-8"),
    ("post", "/v1/verify", {"json": {"rows": "x"}}, 422, "'rows' must be list"),
    ("post", "/v1/verify", {"json": [1, 2]}, 422, "expected a JSON object"),
    ("post", "/get_reward", {"json": {"query": "x"}}, 422, "'query' must be list"),
    ("post", "/get_reward", {"json": {"query": [1]}}, 422, "query[0] must be str"),
    ("post", "/get_reward", {"json": {"query": ["a", "b"], "labels": ["1"]}}, 422, "1 labels for 2 queries"),
    ("post", "/get_reward", {"json": {"query": ["a"], "unjudged_reward": "x"}}, 422, "unjudged_reward"),
    ("post", "/slime", {"json": {"prompt": "p"}}, 422, "missing field 'response'"),
    ("post", "/v1/slime/format", {"json": {"response": "x"}}, 404, "unknown kind 'format'"),
    ("post", "/v1/verify/nope", {"json": {"rows": []}}, 404, "unknown kind 'nope'"),
    ("get", "/nowhere", {}, 404, "no such endpoint"),
    ("get", "/get_reward", {}, 405, "method not allowed"),
    ("post", "/v1/verify", {"content": b" " * (2 * 1024 * 1024)}, 413, "exceeds the limit"),
    ("post", "/v1/verify", {"json": {"rows": []}, "headers": {"x-veristep-deadline": "soon"}}, 400, "Deadline"),
])
def test_bad_requests_get_a_4xx_with_one_line(server, method, path, kwargs, code, reason):
    r = getattr(httpx, method)(server.url + path, timeout=60, **kwargs)
    assert r.status_code == code, r.text
    _stamped(r)
    body = r.json()
    assert reason in body["error"] and "\n" not in body["error"]
    assert body["config_hash"] == r.headers["x-veristep-config"]


def test_health_ready_metrics(server):
    httpx.post(server.url + "/v1/verify", json={"rows": MATH_ROWS[:2]}, timeout=60)
    assert httpx.get(server.url + "/health").json()["status"] == "ok"
    assert httpx.get(server.url + "/ready").json()["ready"] is True
    text = httpx.get(server.url + "/metrics").text
    assert 'veristep_items_total{kind="math",status="correct"}' in text
    assert 'veristep_requests_total{code="200",endpoint="verify"}' in text
    assert "veristep_request_seconds_bucket" in text
    assert "veristep_queue_depth 0.0" in text
    assert 'veristep_worker_restarts{kind="math"}' in text


def test_token_required_beyond_loopback_and_checked(start_server):
    bare = subprocess.run([sys.executable, "-m", "veristep", "serve", "math", "--host", "0.0.0.0", "--port", "0"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "VERISTEP_SERVE_TOKEN": ""})
    assert bare.returncode == 2 and "bearer token" in bare.stderr
    srv = start_server("math", "--workers", "1", env={"VERISTEP_SERVE_TOKEN": "s3cret"})
    try:
        payload = {"prompt": "p", "response": "\\boxed{1}", "label": "1"}
        assert httpx.post(srv.url + "/slime", json=payload).status_code == 401
        wrong = httpx.post(srv.url + "/slime", json=payload, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and "bearer token" in wrong.json()["error"]
        assert httpx.get(srv.url + "/metrics").status_code == 401
        ok = httpx.post(srv.url + "/slime", json=payload, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and ok.json() == 1.0
        assert httpx.get(srv.url + "/health").status_code == 200  # for load balancers
    finally:
        assert srv.stop() == 0


SLEEPY = "```python\nimport time\ntime.sleep({s})\nprint(int(input())+1)\n```"


def _sleepy_rows(n: int, seconds: float) -> list[dict]:
    return [{"completion": SLEEPY.format(s=seconds), "language": "python",
             "tests": [{"stdin": f"{i}\n", "stdout": f"{i + 1}\n"}]} for i in range(n)]


def _wait_for_queue(srv, items: int) -> None:
    """Wait until the server has accepted `items` items (its queue depth), at most a minute."""
    for _ in range(600):
        if f"veristep_queue_depth {float(items)}" in httpx.get(srv.url + "/metrics").text:
            return
        time.sleep(0.1)
    raise AssertionError(f"the server never held {items} items")


def test_backpressure_deadline_and_graceful_shutdown(start_server):
    srv = start_server("code", "--workers", "2", "--max-queue", "4", "--set", "timeout=20")
    try:
        # more items than the queue holds in one request: 413, split it
        r = httpx.post(srv.url + "/v1/verify", json={"rows": _sleepy_rows(5, 0)}, timeout=60)
        assert r.status_code == 413 and "split the batch" in r.json()["error"]
        # a full queue: 429 with Retry-After, the accepted request still answered in full
        replies: dict[str, httpx.Response] = {}

        def slow() -> None:
            replies["slow"] = httpx.post(srv.url + "/v1/verify", json={"rows": _sleepy_rows(4, 2)}, timeout=120)

        t = threading.Thread(target=slow)
        t.start()
        _wait_for_queue(srv, 4)
        busy = httpx.post(srv.url + "/v1/verify", json={"rows": _sleepy_rows(1, 0)}, timeout=60)
        assert busy.status_code == 429 and int(busy.headers["retry-after"]) >= 1
        assert "queue full" in busy.json()["error"]
        t.join(120)
        assert [row["veristep"]["status"] for row in replies["slow"].json()["rows"]] == ["correct"] * 4
        # a per-request deadline: what has no verdict by then is `timeout`, unjudged
        start = time.monotonic()
        r = httpx.post(srv.url + "/v1/verify", json={"rows": _sleepy_rows(2, 12)},
                       headers={"X-Veristep-Deadline": "1.5"}, timeout=60)
        assert time.monotonic() - start < 10  # the programs sleep 12 s
        for row in r.json()["rows"]:
            assert row["veristep"]["status"] == "timeout" and row["veristep"]["judged"] is False
            assert "deadline" in row["veristep"]["detail"]
        # the two programs it started still hold both sandboxes, and the queue counts them until done
        _wait_for_queue(srv, 0)
        # SIGTERM while a request runs: it is answered in full, then the server exits 0
        t = threading.Thread(target=slow)
        t.start()
        _wait_for_queue(srv, 4)
        srv.proc.send_signal(signal.SIGTERM)
        t.join(120)
        assert [row["veristep"]["status"] for row in replies["slow"].json()["rows"]] == ["correct"] * 4
        assert srv.proc.wait(60) == 0
    finally:
        srv.stop(signal.SIGKILL)


def test_processes_share_one_port(start_server):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = start_server("math", "--workers", "1", "--processes", "2", "--port", str(port))
    try:
        pids = set()
        for _ in range(60):
            with httpx.Client() as client:  # a new connection each time: the kernel spreads them
                pids.add(client.get(srv.url + "/health").json()["pid"])
            if len(pids) == 2:
                break
        assert len(pids) == 2
        r = httpx.post(srv.url + "/get_reward", json={"query": ["\\boxed{3}"], "labels": ["3"]}, timeout=60)
        assert r.json()["rewards"] == [1.0]
    finally:
        assert srv.stop() == 0
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def _gone(pid: int) -> bool:
    """Whether a process has exited (gone, or a zombie nobody has reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_server_processes_exit_when_their_parent_is_killed(start_server):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = start_server("math", "--workers", "1", "--processes", "2", "--port", str(port))
    pids = set()
    for _ in range(60):
        with httpx.Client() as client:
            pids.add(client.get(srv.url + "/health").json()["pid"])
        if len(pids) == 2:
            break
    srv.proc.kill()  # SIGKILL: the parent cannot forward anything
    srv.proc.wait(30)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(_gone(pid) for pid in pids):
        time.sleep(0.2)
    assert all(_gone(pid) for pid in pids), "orphaned server processes"


@pytest.mark.parametrize("args,message", [
    (["nope"], "unknown verifier kind 'nope'"),
    (["math", "--set", "math.nosuch=1"], "has no option 'nosuch'"),
    (["math", "--set", "code.timeout=1"], "not one of the served kinds"),
    (["math", "--unjudged-reward", "abc"], "--unjudged-reward must be a finite number or null"),
    (["math", "--header-timeout", "0"], "--header-timeout must be > 0"),
    (["math", "--processes", "2", "--port", "0"], "needs a fixed --port"),
    (["math", "--set", "timeout=-1"], "bad verifier configuration"),
])
def test_usage_errors_exit_2_before_serving(args, message, capsys):
    from veristep.cli import main

    assert main(["serve", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_taken_port_is_a_usage_error(capsys):
    import socket

    from veristep.cli import main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert main(["serve", "math", "--port", str(s.getsockname()[1])]) == 2
    assert "cannot listen" in capsys.readouterr().err

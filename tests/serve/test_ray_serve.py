"""`veristep serve --ray`: the same HTTP API, verdicts from Ray actors on a two-node local cluster."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")

AUTH = {"Authorization": "Bearer s3cret"}
MATH_ROWS = [
    {"id": 1, "completion": "so the answer is \\boxed{42}", "answer": "42"},
    {"id": 2, "completion": "\\boxed{\\frac{1}{2}}", "answer": "0.5"},
    {"id": 3, "completion": "\\boxed{7}", "answer": 8},
    {"id": 4, "completion": "nothing here", "answer": "3"},
    {"id": 5, "completion": "\\boxed{5}"},  # no reference at all
    {"id": 6, "completion": ["not", "text"], "answer": "1"},  # not a completion
]
SLEEPY = "```python\nimport time\ntime.sleep({s})\nprint(int(input())+1)\n```"


def _sleepy_rows(n: int, seconds: float) -> list[dict]:
    return [{"completion": SLEEPY.format(s=seconds), "language": "python",
             "tests": [{"stdin": f"{i}\n", "stdout": f"{i + 1}\n"}]} for i in range(n)]


def _cli_rows(tmp_path: Path, kind: str, rows: list, *extra: str) -> list[dict]:
    src, out = tmp_path / f"{kind}-in.jsonl", tmp_path / f"{kind}-out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    subprocess.run([sys.executable, "-m", "veristep", "verify", kind, str(src), "-o", str(out), *extra],
                   check=False, capture_output=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return [json.loads(line) for line in out.read_text().splitlines()]


def _actors(url: str) -> list[dict]:
    """Each actor's labels and numbers, read from /metrics."""
    text = httpx.get(url + "/metrics", headers=AUTH, timeout=30).text
    out: dict[str, dict] = {}
    for labels, value in re.findall(r'^veristep_ray_actor_outstanding\{(.*)\} (\S+)$', text, re.M):
        info = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        out[info["actor"]] = {**info, "outstanding": float(value)}
    for name in ("restarts", "items"):
        for actor, value in re.findall(rf'^veristep_ray_actor_{name}\{{actor="(\d+)"\}} (\S+)$', text, re.M):
            out[actor][name] = float(value)
    return [out[k] for k in sorted(out)]


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_same_answers_auth_and_config_hash_as_a_local_server(ray_server, tmp_path: Path):
    from veristep.serve import ServeConfig

    r = httpx.post(ray_server.url + "/v1/verify/math", json={"rows": MATH_ROWS}, timeout=120)
    assert r.status_code == 401  # the same token rule as a local server
    r = httpx.post(ray_server.url + "/v1/verify/math", json={"rows": MATH_ROWS}, headers=AUTH, timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["rows"] == _cli_rows(tmp_path, "math", MATH_ROWS, "--workers", "1")
    # where the verdicts are computed does not change them, so not the hash either
    local = ServeConfig(kinds=["math", "code"], configs={"math": {"workers": 1},
                                                         "code": {"workers": 1, "timeout": 20}})
    assert r.headers["x-veristep-config"] == r.json()["config_hash"] == local.config_hash()
    # OpenRLHF and slime payloads, an unusable label kept apart from a wrong answer
    r = httpx.post(ray_server.url + "/get_reward", headers=AUTH, timeout=120,
                   json={"query": ["Q: 6*7? A: \\boxed{42}", "Q: 1+1? A: \\boxed{3}", "Q: ? A: \\boxed{1}"],
                         "prompts": ["Q: 6*7? A: ", "Q: 1+1? A: ", "Q: ? A: "], "labels": ["42", "2", None]})
    assert r.status_code == 200, r.text
    assert r.json()["rewards"] == [1.0, 0.0, 0.0]
    assert r.json()["statuses"] == ["correct", "wrong", "bad_reference"]
    r = httpx.post(ray_server.url + "/slime?detail=1", headers=AUTH, timeout=120,
                   json={"prompt": "p", "response": "\\boxed{x^2+2x+1}", "label": "(x+1)^2"})
    assert r.json()["reward"] == 1.0 and r.json()["status"] == "correct"
    rows = _sleepy_rows(2, 0)
    rows[1]["tests"][0]["stdout"] = "nope\n"
    r = httpx.post(ray_server.url + "/v1/verify/code", json={"rows": rows}, headers=AUTH, timeout=120)
    assert [row["veristep"]["status"] for row in r.json()["rows"]] == ["correct", "wrong"]


def test_actors_on_both_nodes_share_the_work(ray_server):
    health = httpx.get(ray_server.url + "/health", timeout=30).json()
    assert health["ray"] == {"actors": 2, "nodes": 2, "ready": True}  # one actor per node
    before = {a["actor"]: a["items"] for a in _actors(ray_server.url)}
    rows = [{"id": i, "completion": f"\\boxed{{{i}}}", "answer": str(i if i % 3 else i + 1)} for i in range(64)]
    r = httpx.post(ray_server.url + "/v1/verify/math", json={"rows": rows}, headers=AUTH, timeout=120)
    statuses = [row["veristep"]["status"] for row in r.json()["rows"]]
    assert statuses == ["wrong" if i % 3 == 0 else "correct" for i in range(64)]
    actors = _actors(ray_server.url)
    assert len({a["node"] for a in actors}) == 2
    assert all(a["items"] > before[a["actor"]] for a in actors), actors  # both did part of it
    assert sum(a["items"] - before[a["actor"]] for a in actors) == 64


def test_actors_that_cannot_be_placed_stop_the_server_with_the_reason(ray_cluster, tmp_path: Path):
    # each node has 1 CPU: an actor asking for 4 can never be placed
    proc = subprocess.run([sys.executable, "-m", "veristep", "serve", "math", "--port", "0", "--workers", "1",
                           "--ray", ray_cluster, "--ray-actors", "1", "--ray-cpus", "4",
                           "--ray-ready-timeout", "3"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode != 0, proc.stderr[-2000:]  # uvicorn: 3, start-up failed
    assert "1 of 1 Ray actors not ready after 3 s (each reserves 4 CPU" in proc.stderr


def test_queue_limit_and_deadline_as_a_local_server(ray_server):
    rows = [{"completion": "\\boxed{1}", "answer": "1"}] * 257
    r = httpx.post(ray_server.url + "/v1/verify/math", json={"rows": rows}, headers=AUTH, timeout=60)
    assert r.status_code == 413 and "split the batch" in r.json()["error"]
    start = time.monotonic()
    r = httpx.post(ray_server.url + "/v1/verify/code", json={"rows": _sleepy_rows(2, 10)},
                   headers={**AUTH, "X-Veristep-Deadline": "1"}, timeout=60)
    assert r.status_code == 200 and time.monotonic() - start < 8
    for row in r.json()["rows"]:
        assert row["veristep"]["status"] == "timeout" and row["veristep"]["judged"] is False


def test_an_actor_killed_mid_request_loses_nothing_then_sigterm_stops_all(ray_server):
    reply: dict[str, httpx.Response] = {}

    def slow() -> None:
        reply["r"] = httpx.post(ray_server.url + "/v1/verify/code", json={"rows": _sleepy_rows(2, 2)},
                                headers=AUTH, timeout=180)

    before = {a["actor"]: a["items"] for a in _actors(ray_server.url)}
    t = threading.Thread(target=slow)
    t.start()
    victim = None
    for _ in range(300):  # the actor holding the chunk
        busy = [a for a in _actors(ray_server.url) if a["outstanding"] > 0]
        if busy:
            victim = busy[0]
            break
        time.sleep(0.1)
    assert victim is not None, "no actor ever held the request's items"
    time.sleep(1.0)  # its first program is sleeping in the sandbox
    os.kill(int(victim["pid"]), signal.SIGKILL)
    t.join(180)
    rows = reply["r"].json()["rows"]
    # the chunk went again to the other actor: every item judged, none lost, none a silent 0
    assert [row["veristep"]["status"] for row in rows] == ["correct", "correct"]
    after = {a["actor"]: a["items"] for a in _actors(ray_server.url)}
    survivor = next(k for k in after if k != victim["actor"])
    assert after[survivor] - before[survivor] == 2 and after[victim["actor"]] == before[victim["actor"]]
    # Ray restarts the killed actor; once it answers again its new process is counted
    rows = [{"completion": f"\\boxed{{{i}}}", "answer": str(i)} for i in range(32)]
    for _ in range(20):
        r = httpx.post(ray_server.url + "/v1/verify/math", json={"rows": rows}, headers=AUTH, timeout=180)
        assert [row["veristep"]["status"] for row in r.json()["rows"]] == ["correct"] * 32
        actors = _actors(ray_server.url)
        if any(a["restarts"] >= 1 for a in actors):
            break
    assert {a["actor"]: a["restarts"] for a in actors}[victim["actor"]] == 1
    metrics = httpx.get(ray_server.url + "/metrics", headers=AUTH).text
    assert 'veristep_worker_restarts{kind="code"} 1.0' in metrics  # the actor's pools were replaced
    # SIGTERM: the front drains, stops its actors and exits 0
    pids = [int(a["pid"]) for a in actors]
    assert ray_server.stop() == 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(_gone(pid) for pid in pids):
        time.sleep(0.5)
    assert all(_gone(pid) for pid in pids), "Ray actors outlived the server"


@pytest.mark.parametrize("args,message", [
    (["math", "--ray-actors", "2"], "--ray-actors, --ray-cpus and --ray-ready-timeout need --ray"),
    (["math", "--ray", "--processes", "2", "--port", "8123"], "--ray and --processes > 1 do not combine"),
    (["math", "--ray", "--ray-actors", "0"], "--ray-actors must be >= 1"),
])
def test_ray_usage_errors_exit_2_before_serving(args, message, capsys):
    from veristep.cli import main

    assert main(["serve", *args]) == 2
    assert message in capsys.readouterr().err


def test_ray_missing_is_a_usage_error_with_the_install_command(monkeypatch, capsys):
    from veristep.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)  # what Python does for a missing package
    assert main(["serve", "math", "--ray", "local"]) == 2
    assert "--ray needs ray: pip install 'veristep[ray]'" in capsys.readouterr().err

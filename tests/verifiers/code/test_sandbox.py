"""The sandbox layer: isolation levels, the unsandboxed opt-in, limits, sessions."""

from __future__ import annotations

import os

import pytest
from veristep.verifiers.code import CodeVerifier
from veristep.verifiers.code.sandbox import (
    Isolation,
    Limits,
    Sandbox,
    SandboxUnavailable,
)

WHOAMI = "import os\nprint(os.getuid(), os.getcwd(), sorted(os.environ))\n"


def test_limits_validate_and_serialise():
    with pytest.raises(ValueError):
        Limits(wall_s=0)
    with pytest.raises(ValueError):
        Limits(memory_mb=-1)
    with pytest.raises(ValueError):
        Limits(cpu_s=0)
    assert Limits(wall_s=2.5).to_wire()["cpu_s"] == 4  # wall + 1 s, rounded up
    assert Limits(wall_s=2.5, cpu_s=1.2).to_wire()["cpu_s"] == 2


def test_unsandboxed_execution_needs_an_explicit_opt_in():
    with pytest.raises(SandboxUnavailable, match="allow_unsandboxed=True"):
        Sandbox("rlimits-only")
    with pytest.raises(SandboxUnavailable, match="allow_unsandboxed=True"):
        CodeVerifier(isolation="rlimits-only")
    with pytest.raises(ValueError):
        Sandbox("chroot")


def test_rlimits_only_runs_with_opt_in_and_reports_it():
    verifier = CodeVerifier(isolation="rlimits-only", allow_unsandboxed=True, timeout=2.0)
    assert verifier.isolation is Isolation.RLIMITS_ONLY and not verifier.isolation.isolated
    result = verifier.verify("print(int(input()) * 2)", {"tests": [{"stdin": "21", "stdout": "42"}]})
    assert result.correct and result.extra["isolation"] == "rlimits-only"
    with verifier.sandbox.session() as session:
        step = session.run({"main.py": WHOAMI}, Limits(), python_main="main.py")
        hostdir = session._hostdir
    uid, cwd, env = step.stdout.split(" ", 2)
    assert int(uid) != 0  # root callers drop to uid 65534
    assert cwd.startswith(hostdir) and "SECRET" not in env and "PYTHONPATH" not in env
    assert not os.path.exists(hostdir)  # the private folder is removed on close


def test_namespaces_level_without_bubblewrap():
    try:
        sandbox = Sandbox("namespaces")
    except SandboxUnavailable as err:
        pytest.skip(f"unprivileged user namespaces unavailable: {err}")
    probe = (
        "import os, socket\n"
        "checks = [os.getuid() == 65534, not os.path.exists('/root'), not os.listdir('/tmp')]\n"
        "for path in ('/x', '/usr/x'):\n"
        "    try:\n"
        "        open(path, 'w')\n"
        "        checks.append(False)\n"
        "    except OSError:\n"
        "        checks.append(True)\n"
        "try:\n"
        "    socket.create_connection(('127.0.0.1', int(input())), timeout=0.5)\n"
        "    checks.append(False)\n"
        "except OSError:\n"
        "    checks.append(True)\n"
        "with open('/proc/self/status') as fh:\n"
        "    checks.append(all(int(l.split()[1], 16) == 0 for l in fh if l.startswith('CapEff')))\n"
        "print(checks, len([p for p in os.listdir('/proc') if p.isdigit()]))\n"
    )
    server = __import__("socket").create_server(("127.0.0.1", 0))
    try:
        with sandbox.session() as session:
            step = session.run({"main.py": probe}, Limits(wall_s=5), python_main="main.py",
                               stdin=str(server.getsockname()[1]))
    finally:
        server.close()
    assert step.ok, step.stderr
    checks, processes = step.stdout.rsplit(" ", 1)
    assert checks == str([True] * 7) and int(processes) == 2  # the supervisor and the program


def test_auto_detection_picks_bubblewrap(code_verifier):
    if code_verifier.isolation is not Isolation.BWRAP:
        pytest.skip("attack suite running at another isolation level")
    assert Sandbox().isolation is Isolation.BWRAP
    assert Sandbox(allow_unsandboxed=True).isolation is Isolation.BWRAP


def test_session_steps_are_fresh_but_compile_outputs_persist(code_verifier):
    sandbox = code_verifier.sandbox
    with sandbox.session() as session:
        assert session.isolation is sandbox.isolation and session.start_s > 0
        first = session.run({"main.py": WHOAMI}, Limits(), python_main="main.py")
        uid, cwd, env = first.stdout.split(" ", 2)
        assert int(uid) == 65534 and env.strip() == str(
            sorted(["HOME", "LANG", "LC_ALL", "PATH", "TMPDIR"])
        )
        built = session.compile(
            {"build.sh": "echo built > artifact; echo scratch > other"},
            ["/bin/sh", "build.sh"],
            ["artifact"],
            Limits(),
        )
        assert built.ok
        look = "import os\nprint(sorted(os.listdir('.')), open('artifact').read().strip())\n"
        step = session.run({"look.py": look}, Limits(), python_main="look.py")
        assert step.stdout.strip() == "['artifact', 'look.py'] built"
        step = session.run({}, Limits(), argv=["/bin/sh", "-c", "cat artifact; exit 3"])
        assert step.stdout == "built\n" and step.exit_code == 3 and not step.ok
        with pytest.raises(ValueError):
            session.run({}, Limits())


def test_step_result_flags(code_verifier):
    with code_verifier.sandbox.session() as session:
        slow = session.run({}, Limits(wall_s=0.5), argv=["/bin/sh", "-c", "sleep 5"])
        assert slow.timed_out and slow.wall_s < 3
        loud = session.run(
            {}, Limits(output_bytes=1000), argv=["/bin/sh", "-c", "yes | head -c 100000"]
        )
        assert loud.output_limited and len(loud.stdout) <= 1000
        killed = session.run({}, Limits(), argv=["/bin/sh", "-c", "kill -9 $$"])
        assert killed.signal == 9 and killed.exit_code is None


def test_reused_sandboxes_are_reset_between_completions(make_code_verifier, sandbox_processes):
    before = set(_all_sandbox_pids())
    verifier = make_code_verifier(timeout=2.0, workers=1)
    leave = "import os\nopen('/tmp/left', 'w').write('x')\nos.fork() or __import__('time').sleep(60)\n"
    look = (
        "import os\n"
        "print(sorted(os.listdir('.')), os.path.exists('/tmp/left'),"
        " len([p for p in os.listdir('/proc') if p.isdigit()]))\n"
    )
    cpp = "#include <cstdio>\nint main() { std::puts(\"built\"); }"
    with verifier:
        verifier.verify(leave, {"tests": [{"stdout": ""}]})
        assert verifier.verify(cpp, {"language": "cpp", "tests": [{"stdout": "built"}]}).correct
        first = verifier._sandboxes._local.session
        result = verifier.verify(look, {"tests": [{"stdout": "['main.py'] False 2"}]})
        assert result.correct, result.extra["tests"]
        assert verifier._sandboxes._local.session is first  # the same sandbox, reused
        # A failed build must not run the previous completion's binary.
        broken = verifier.verify("int main( {", {"language": "cpp", "tests": [{"stdout": "built"}]})
        assert broken.status.value == "compile_error"
        results = verifier.verify_batch([look] * 4, [{"tests": [{"stdout": "['main.py'] False 2"}]}] * 4)
        assert all(r.correct for r in results)
    assert sandbox_processes() == []
    assert set(_all_sandbox_pids()) <= before  # close() stopped this verifier's sandboxes


def test_sandbox_reuse_one_starts_a_sandbox_per_completion(make_code_verifier):
    verifier = make_code_verifier(timeout=2.0, sandbox_reuse=1)
    for _ in range(2):
        assert verifier.verify("print(1)", {"tests": [{"stdout": "1"}]}).correct
        assert getattr(verifier._sandboxes._local, "session", None) is None
    with pytest.raises(ValueError):
        make_code_verifier(sandbox_reuse=0)


def _all_sandbox_pids() -> list[int]:
    from veristep.verifiers.code.sandbox import _SUPERVISOR_SOURCE

    marker = _SUPERVISOR_SOURCE.encode()[:200]
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as fh:
                    if marker in fh.read():
                        with open(f"/proc/{name}/stat") as st:
                            if st.read().rsplit(")", 1)[1].split()[0] != "Z":
                                pids.append(int(name))
            except OSError:
                continue
    return pids

"""`veristep verify`: one output line per input line, errors that lose nothing, re-verifiable
output, unjudged references counted, usage checked before work, the Ray backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from veristep.common.jsonl_io import iter_jsonl
from veristep.verifiers import Status, VerifyResult
from veristep.verifiers.cli.verify import parse_config
from veristep.verifiers.core.registry import register_verifier
from veristep.verifiers.core.text import completion_text

from veristep.cli import main


def _write(path: Path, lines: list) -> Path:
    path.write_text(
        "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines),
        encoding="utf-8",
    )
    return path


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _cli(*args: str, timeout: int = 280, **kw) -> subprocess.CompletedProcess:
    """The installed console command, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "veristep", *args], capture_output=True,
                          text=True, timeout=timeout, **kw)


ROWS = [
    {"id": 1, "completion": "so Answer: 4", "answer": "4"},
    {"id": 2, "completion": "Answer: 5", "answer": "4"},
    {"id": 3, "completion": "I give up", "answer": "4"},
    {"id": 4, "completion": "Answer: 0.333", "answer": "0.3333"},
    {"id": 5, "completion": [{"role": "assistant", "content": "Answer: 7"}], "answer": "7"},
]


def test_verify_writes_each_input_line_unchanged_plus_one_result_key(tmp_path, capsys):
    src, out = _write(tmp_path / "in.jsonl", ROWS), tmp_path / "out.jsonl"
    assert main(["verify", "exact", str(src), "-o", str(out), "--batch-size", "2"]) == 0
    rows = _read(out)
    assert [{k: v for k, v in r.items() if k != "veristep"} for r in rows] == ROWS
    results = [r["veristep"] for r in rows]
    assert [r["status"] for r in results] == ["correct", "wrong", "no_answer", "wrong", "correct"]
    assert [r["reward"] for r in results] == [1.0, 0.0, 0.0, 0.0, 1.0]
    assert all(r["kind"] == "exact" and r["judged"] is True for r in results)
    assert results[3]["numeric_close"] is True and results[3]["extracted"] == "0.333"
    err = capsys.readouterr().err
    assert "5 items" in err and "judged 5, mean reward 0.4000" in err and "items/s" in err
    assert "unjudged 0" in err and "no_answer" in err


def test_limit_and_stdout(tmp_path, capsys):
    src = _write(tmp_path / "in.jsonl", ROWS)
    assert main(["verify", "exact", str(src), "--limit", "2"]) == 0
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in captured.out.splitlines()]
    assert [r["id"] for r in lines] == [1, 2]
    assert "2 items" in captured.err


@pytest.mark.parametrize(
    ("bad_line", "expected"),
    [
        ('{"id": 4, "completion": "Answer: 4", "answer": ', ":4: bad JSON"),
        ('{"id": 4, "answer": "4"}', ":4: missing key 'completion'"),
        ('{"id": 4, "completion": 7, "answer": "4"}', ":4: key 'completion'"),
        ("[1, 2]", ":4: expected a JSON object"),
        (b"\xff\xfe{}", ":4: not UTF-8 text"),
        # Python refuses to read an integer of more than 4,300 digits (a ValueError, not a
        # JSONDecodeError): it ended the run with a traceback and lost every later line
        ('{"id": 4, "completion": "Answer: 4", "answer": ' + "1" * 5000 + "}", ":4: bad JSON"),
    ],
)
def test_a_bad_line_gets_an_error_line_and_every_other_line_is_verified(
    tmp_path, capsys, bad_line, expected
):
    src = tmp_path / "in.jsonl"
    good = [json.dumps(r).encode() for r in [*ROWS[:3], ROWS[0]]]
    bad = bad_line if isinstance(bad_line, bytes) else bad_line.encode()
    src.write_bytes(b"\n".join([*good[:3], bad, good[3]]) + b"\n")
    out = tmp_path / "out.jsonl"
    assert main(["verify", "exact", str(src), "-o", str(out), "--batch-size", "2"]) == 1
    rows = _read(out)
    assert len(rows) == 5  # one output line per input line, in order
    statuses = [r["veristep"]["status"] for r in rows]
    assert statuses == ["correct", "wrong", "no_answer", "input_error", "correct"]
    assert rows[3]["veristep"]["line"] == 4 and rows[3]["veristep"]["judged"] is False
    err = capsys.readouterr().err
    assert "Traceback" not in err
    warnings = [line for line in err.splitlines() if "warning:" in line]
    assert len(warnings) == 1 and expected in warnings[0]
    assert "error: 1 unreadable line(s)" in err and "input_error 1" in err


def test_missing_reference_is_bad_reference_unjudged_and_warned_once(tmp_path, capsys):
    rows = [ROWS[0], {"id": 2, "completion": "Answer: 1"}, ROWS[1], {"id": 4, "completion": "x"}]
    src, out = _write(tmp_path / "in.jsonl", rows), tmp_path / "out.jsonl"
    assert main(["verify", "exact", str(src), "-o", str(out)]) == 0  # a dataset fault, no crash
    results = [r["veristep"] for r in _read(out)]
    assert [r["status"] for r in results] == ["correct", "bad_reference", "wrong", "bad_reference"]
    assert results[1]["judged"] is False and "missing key 'answer'" in results[1]["detail"]
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "unusable reference" in line]
    assert len(warnings) == 1 and f"{src}:2:" in warnings[0]  # once, with the first line
    assert "judged 2, mean reward 0.5000" in err and "unjudged 2 (bad_reference 2)" in err


class _RefChecking:
    """A verifier that, like the domain verifiers, judges an unusable reference unjudged."""

    kind = "refcheck"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers

    def reference_from_record(self, record):
        if isinstance(record.get("answer"), list):
            raise ValueError("a list is not an answer")
        return record["answer"]

    def verify(self, completion, reference):
        if reference in (None, ""):
            return VerifyResult(0.0, False, Status.BAD_REFERENCE, detail="empty reference")
        ok = completion.strip().endswith(str(reference))
        return VerifyResult(float(ok), ok, Status.CORRECT if ok else Status.WRONG)

    def verify_batch(self, completions, references):
        return [self.verify(c, r) for c, r in zip(completions, references, strict=True)]


def test_unusable_references_of_every_origin_are_counted_not_scored(tmp_path, capsys):
    register_verifier("refcheck", _RefChecking, replace=True)
    rows = [
        {"completion": "4", "answer": "4"},
        {"completion": "4", "answer": ""},  # the verifier says bad_reference
        {"completion": "4", "answer": [4]},  # reference_from_record raises ValueError
        {"completion": "4", "answer": None},
        {"completion": "5", "answer": "4"},
    ]
    src, out = _write(tmp_path / "in.jsonl", rows), tmp_path / "o.jsonl"
    assert main(["verify", "refcheck", str(src), "-o", str(out)]) == 0
    results = [r["veristep"] for r in _read(out)]
    assert [r["status"] for r in results] == ["correct", "bad_reference", "bad_reference",
                                              "bad_reference", "wrong"]
    assert results[2]["detail"] == "a list is not an answer"
    err = capsys.readouterr().err
    assert sum("unusable reference" in line for line in err.splitlines()) == 1
    assert f"{src}:2: unusable reference (empty reference)" in err
    assert "judged 2, mean reward 0.5000" in err and "unjudged 3 (bad_reference 3)" in err


def test_a_raising_verifier_costs_only_its_own_line(tmp_path, capsys, exact_cls):
    class Crashing(exact_cls):
        def verify_batch(self, completions, references):
            if any("boom" in c for c in completions):
                raise RuntimeError("bug in the checker")
            return super().verify_batch(completions, references)

    register_verifier("crashing", Crashing, replace=True)
    rows = [*ROWS[:2], {"id": 9, "completion": "boom", "answer": "1"}, ROWS[0]]
    src, out = _write(tmp_path / "in.jsonl", rows), tmp_path / "out.jsonl"
    assert main(["verify", "crashing", str(src), "-o", str(out), "--batch-size", "4"]) == 1
    results = [r["veristep"] for r in _read(out)]
    assert [r["status"] for r in results] == ["correct", "wrong", "internal_error", "correct"]
    assert "RuntimeError: bug in the checker" in results[2]["detail"]
    assert "verifier_raised" not in results[2]
    err = capsys.readouterr().err
    assert f"{src}:3: the verifier raised RuntimeError" in err and "Traceback" not in err


def test_a_reference_the_verifier_rejects_is_bad_reference_not_a_lost_batch(
    test_data_dir, tmp_path
):
    # The code verifier raises ValueError for these references inside verify_batch: the CLI
    # retries the batch item by item, so only those lines are unjudged and the rest verified.
    rows = _read(test_data_dir / "code_sample.jsonl")[:2] + [
        {"completion": "print(1)", "tests": [], "language": "python"},
        {"completion": "print(1)", "tests": [{"stdin": "", "stdout": "1"}], "language": "cobol"},
    ]
    src, out = _write(tmp_path / "in.jsonl", rows), tmp_path / "out.jsonl"
    proc = _cli("verify", "code", str(src), "-o", str(out), "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    results = [r["veristep"] for r in _read(out)]
    assert [r["status"] for r in results] == ["correct", "wrong", "bad_reference", "bad_reference"]
    assert "unknown language 'cobol'" in results[3]["detail"] and not results[3]["judged"]
    assert f"{src}:3: unusable reference" in proc.stderr and "bad_reference 2" in proc.stderr


def test_usage_errors_exit_2_before_any_work(tmp_path, capsys):
    src = _write(tmp_path / "in.jsonl", ROWS)
    out = tmp_path / "never.jsonl"
    cases = {
        ("no-such-kind",): "unknown verifier kind 'no-such-kind'",
        ("exact", "--set", "workers=0"): "workers must be >= 1",
        ("exact", "--set", "nonsense"): "--set expects key=value",
        ("exact", "--set", "colour=blue"): "ExactVerifier has no option 'colour'",
        ("exact", "--set", "rel_close=abc"): "--set rel_close: expects a number, got 'abc'",
        ("exact", "--batch-size", "0"): "--batch-size must be >= 1",
    }
    for (kind, *rest), message in cases.items():
        assert main(["verify", kind, str(src), "-o", str(out), *rest]) == 2, message
        assert message in capsys.readouterr().err
    assert not out.exists()
    assert main(["verify", "exact", str(src), "-o", str(src)]) == 2
    assert "is an input file" in capsys.readouterr().err
    assert _read(src) == ROWS  # the input was not touched


def test_set_timeout_abc_names_the_field_through_the_console():
    proc = _cli("verify", "math", "tests/data/audit_sample.jsonl", "--set", "timeout=abc",
                cwd=Path(__file__).resolve().parents[3])
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "veristep verify: error: --set timeout: expects a number, got 'abc'"
    )


def test_missing_input_and_output_folder_are_usage_errors(tmp_path, capsys, exact_cls):
    built = []

    class Counting(exact_cls):
        def __init__(self, **config):
            built.append(config)
            super().__init__(**config)

    register_verifier("counting", Counting, replace=True)
    assert main(["verify", "counting", str(tmp_path / "nope.jsonl")]) == 2
    assert f"error: {tmp_path / 'nope.jsonl'}: no such file" in capsys.readouterr().err
    src = _write(tmp_path / "in.jsonl", ROWS)
    assert main(["verify", "counting", str(src), "-o", str(tmp_path)]) == 2
    assert "is a folder; give a file name" in capsys.readouterr().err
    assert main(["verify", "counting", str(tmp_path)]) == 2
    assert built == []  # refused before the verifier was even built


def test_set_values_parse_as_json_or_text():
    config = parse_config(["timeout=2.5", "all_or_nothing=true", "format=hermes", "tags=[1,2]"])
    assert config == {"timeout": 2.5, "all_or_nothing": True, "format": "hermes", "tags": [1, 2]}


def test_set_reaches_the_verifier(tmp_path, exact_cls):
    seen = {}

    class Recording(exact_cls):
        def __init__(self, **config):
            seen.update(config)
            super().__init__(**config)

    register_verifier("recording", Recording, replace=True)
    src = _write(tmp_path / "in.jsonl", ROWS)
    args = ["verify", "recording", str(src), "-o", str(tmp_path / "o.jsonl"), "--workers", "3"]
    assert main([*args, "--set", "rel_close=0.5"]) == 0
    assert seen == {"workers": 3, "rel_close": 0.5}


def test_kind_as_module_path(tmp_path):
    # Any importable class works as KIND; here the weighted verifier over the registered "exact".
    src = _write(tmp_path / "in.jsonl", ROWS)
    out = tmp_path / "o.jsonl"
    code = main(["verify", "veristep.verifiers.core.combine:WeightedVerifier", str(src), "-o",
                 str(out), "--set", 'components={"exact": 2.0}'])
    assert code == 0
    assert [r["veristep"]["reward"] for r in _read(out)] == [2.0, 0.0, 0.0, 0.0, 2.0]


def test_a_tool_call_without_a_function_object_is_judged_not_fatal(tmp_path):
    # {"function": "f"} stopped the run ("verification stopped"): every row was lost.
    odd = {"completion": [{"role": "assistant", "content": "", "tool_calls": [{"function": "f"}]}],
           "expected": [{"name": "f", "arguments": {}}]}
    good = {"completion": '<tool_call>{"name": "f", "arguments": {}}</tool_call>',
            "expected": [{"name": "f", "arguments": {}}]}
    src, out = _write(tmp_path / "in.jsonl", [good, odd, good]), tmp_path / "out.jsonl"
    assert main(["verify", "tools", str(src), "-o", str(out), "--workers", "1"]) == 0
    statuses = [r["veristep"] for r in _read(out)]
    assert [s["status"] for s in statuses][::2] == ["correct", "correct"]
    assert statuses[1]["judged"] is True and statuses[1]["reward"] == 0.0


@pytest.mark.parametrize("arguments", ["[" * 100_000 + "]" * 100_000, "1" * 5_000])
def test_tool_call_arguments_json_cannot_read_are_kept_as_text(tmp_path, arguments):
    # Both raised out of the completion reader (RecursionError; ValueError past 4,300 digits)
    # and ended the run with a traceback.
    call = {"function": {"name": "f", "arguments": arguments}}
    rows = [ROWS[0], {"completion": [{"role": "assistant", "content": "Answer: 4", "tool_calls": [call]}],
                      "answer": "4"}, ROWS[1]]
    src, out = _write(tmp_path / "in.jsonl", rows), tmp_path / "out.jsonl"
    assert main(["verify", "exact", str(src), "-o", str(out)]) == 0
    assert [r["veristep"]["status"] for r in _read(out)] == ["correct", "correct", "wrong"]
    assert arguments[:100] in completion_text(rows[1]["completion"])


def test_jsonl_reader_reports_each_bad_line_and_goes_on(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a": 1}\n\n   \n{"a": 2}\n\xff\xfe\n{"a": 3\n7\n{"a": 4}\n')
    got = [(r.line_no, r.data.get("a"), r.error) for r in iter_jsonl(path)]
    assert got == [
        (1, 1, None),
        (4, 2, None),
        (5, None, "not UTF-8 text (invalid start byte)"),
        (6, None, "bad JSON (Expecting ',' delimiter at column 8)"),
        (7, None, "expected a JSON object, got int"),
        (8, 4, None),
    ]


def test_completion_text_accepts_plain_and_conversational():
    assert completion_text("x") == "x"
    assert completion_text([{"role": "assistant", "content": "a"}]) == "a"
    parts = [{"role": "assistant", "content": [{"type": "text", "text": "b"}, {"type": "image"}]}]
    assert completion_text(parts) == "b"
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    assert completion_text(msgs) == "a"
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}],
    }
    text = completion_text([call])
    assert "<tool_call>" in text and json.loads(text.split("\n")[2]) == {
        "name": "f",
        "arguments": {"x": 1},
    }
    with pytest.raises(TypeError):
        completion_text(42)


def test_lone_surrogates_never_lose_the_batch(tmp_path):
    # A lone surrogate is legal in a JSON escape and illegal in UTF-8: the row that holds one
    # in its completion gets input_error, one that holds one elsewhere is verified, and both
    # are written back with the escape they came with; the rest of the batch is kept.
    src = tmp_path / "in.jsonl"
    src.write_text(
        '{"id": 1, "completion": "so $\\\\boxed{4}$", "answer": "4"}\n'
        '{"id": 2, "completion": "\\ud800 so $\\\\boxed{4}$", "answer": "4"}\n'
        '{"id": 3, "completion": "so $\\\\boxed{4}$", "answer": "4", "note": "\\udfff"}\n'
        '{"id": 4, "completion": "so $\\\\boxed{5}$", "answer": "4"}\n',
        encoding="ascii",
    )
    out = tmp_path / "out.jsonl"
    proc = _cli("verify", "math", str(src), "-o", str(out), "--workers", "1", "--batch-size", "4")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"{src}:2: key 'completion': not valid Unicode text" in proc.stderr
    rows = [json.loads(line) for line in out.read_text(encoding="ascii").splitlines()]
    assert [r["veristep"]["status"] for r in rows] == ["correct", "input_error", "correct", "wrong"]
    assert rows[1]["completion"] == "\ud800 so $\\boxed{4}$" and rows[2]["note"] == "\udfff"


def test_non_json_values_in_results_are_written(tmp_path, exact_cls):
    class Odd(exact_cls):
        def verify(self, completion, reference):
            return VerifyResult(float("nan"), False, Status.WRONG, extra={"path": Path("/x")})

    register_verifier("odd", Odd, replace=True)
    src, out = _write(tmp_path / "in.jsonl", ROWS[:1]), tmp_path / "o.jsonl"
    assert main(["verify", "odd", str(src), "-o", str(out)]) == 0
    result = _read(out)[0]["veristep"]
    assert result["reward"] is None and result["path"] == "/x"


@pytest.mark.parametrize("kind", ["exact", "tools"])  # tools: the raw-line workers
def test_a_nan_deep_in_nesting_costs_that_field_not_the_run(tmp_path, kind):
    # NaN makes the line re-encoded, and the re-encoding recursed: "verification stopped", 0
    # lines written (the raw-line path retried it in the parent and failed again).
    deep = "[" * 900 + "]" * 900
    odd = '{"id": 2, "completion": "Answer: 4", "answer": "4", "x": NaN, "deep": ' + deep + "}"
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join([json.dumps(ROWS[0]), odd, json.dumps(ROWS[1])]) + "\n")
    out = tmp_path / "out.jsonl"
    main(["verify", kind, str(src), "-o", str(out), "--workers", "1"])
    rows = _read(out)
    assert [r.get("id") for r in rows] == [1, 2, 2]
    assert rows[1]["x"] is None and rows[1]["deep"] == "(not written: nested too deeply)"
    assert "status" in rows[1]["veristep"]


def test_math_kind_end_to_end_in_a_subprocess(tmp_path):
    rows = [
        {"completion": r"The answer is $\boxed{\frac{1}{2}}$.", "answer": "0.5"},
        {"completion": r"So $\boxed{3}$.", "answer": "4"},
        {"completion": "no idea", "answer": "4"},
    ]
    src, out = _write(tmp_path / "in.jsonl", rows), tmp_path / "out.jsonl"
    proc = _cli("verify", "math", str(src), "-o", str(out), "--workers", "1", timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert [r["veristep"]["status"] for r in _read(out)] == ["correct", "wrong", "no_answer"]
    assert "3 items" in proc.stderr


@pytest.mark.parametrize(
    ("kind", "sample"),
    [
        ("tools", "tools_sample.jsonl"),
        ("format", "format_sample.jsonl"),
        ("code", "code_sample.jsonl"),
        ("math", "audit_sample.jsonl"),
    ],
)
def test_output_verifies_again_with_the_same_verdicts(kind, sample, test_data_dir, tmp_path):
    src = test_data_dir / sample
    once, twice = tmp_path / "once.jsonl", tmp_path / "twice.jsonl"
    common = ["--workers", "2", "--batch-size", "5", "--no-progress"]
    first = _cli("verify", kind, str(src), "-o", str(once), *common)
    assert first.returncode == 0, first.stderr
    inputs = _read(src)
    rows = _read(once)
    # Input fields are never overwritten: the code sample's expected `tests`, the audit
    # sample's own (stale) top-level results, everything survives as it was.
    assert [{k: v for k, v in r.items() if k != "veristep"} for r in rows] == inputs
    if "expected_status" in inputs[0]:
        assert [r["veristep"]["status"] for r in rows] == [r["expected_status"] for r in inputs]
    second = _cli("verify", kind, str(once), "-o", str(twice), *common)
    assert second.returncode == 0, second.stderr
    again = _read(twice)

    def verdicts(rs):
        return [{k: r["veristep"].get(k) for k in ("status", "reward", "correct", "judged",
                                                   "extracted")} for r in rs]

    assert verdicts(again) == verdicts(rows)
    assert [{k: v for k, v in r.items() if k != "veristep"} for r in again] == inputs


def _ray_rows() -> list:
    rows: list = []
    for i in range(120):
        rows.append({"id": i, "completion": f"so $\\boxed{{{i % 7}}}$", "answer": str(i % 3)})
    rows[5] = {"id": 5, "completion": "no reference here"}  # bad_reference
    rows[17] = '{"id": 17, "completion": '  # input_error
    rows[40]["answer"] = r"\frac{14}{3}"
    rows[40]["completion"] = r"$\boxed{4.667}$"  # numeric_close
    return rows


def test_ray_backend_gives_the_local_backends_output_on_a_2_worker_cluster(tmp_path):
    if os.environ.get("VERISTEP_REQUIRE_RAY"):
        import ray  # noqa: F401 - `make test` installs the ray extra: this must not skip
    else:
        pytest.importorskip("ray")
    src = _write(tmp_path / "in.jsonl", _ray_rows())
    local, remote = tmp_path / "local.jsonl", tmp_path / "ray.jsonl"
    common = ["--batch-size", "16", "--no-progress"]
    proc = _cli("verify", "math", str(src), "-o", str(local), "--workers", "1", *common)
    assert proc.returncode == 1, proc.stderr  # the unreadable line 18
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a local instance
    start = time.perf_counter()
    proc = _cli("verify", "math", str(src), "-o", str(remote), "--backend", "ray",
                "--workers", "2", *common, env=env, timeout=240)
    seconds = time.perf_counter() - start
    assert proc.returncode == 1, proc.stderr
    assert remote.read_bytes() == local.read_bytes()  # same lines, same order, same bytes
    statuses = [r["veristep"]["status"] for r in _read(remote)]
    assert statuses[5] == "bad_reference" and statuses[17] == "input_error"
    assert "judged 118" in proc.stderr and "Traceback" not in proc.stderr
    print(f"ray backend, 2 actors, 120 lines: {seconds:.1f} s including Ray start-up")


def test_ray_backend_missing_is_a_usage_error_with_the_install_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # what Python does for a missing package
    src = _write(tmp_path / "in.jsonl", ROWS)
    assert main(["verify", "exact", str(src), "--backend", "ray"]) == 2
    assert "--backend ray needs ray: pip install 'veristep[ray]'" in capsys.readouterr().err


def test_progress_bar_only_on_a_terminal_for_inputs_longer_than_a_batch(tmp_path, monkeypatch):
    from veristep.common import jsonl_io
    from veristep.verifiers.cli.verify import _progress_bar

    src = _write(tmp_path / "in.jsonl", ROWS * 3)
    assert _progress_bar(str(src), None, batch_size=4) is None  # stderr is not a terminal here
    monkeypatch.setattr(jsonl_io, "is_terminal", lambda stream: True)
    assert _progress_bar(str(src), None, batch_size=20) is None
    bar = _progress_bar(str(src), None, batch_size=4)
    assert bar is not None and bar.total == 15
    bar.close()
    assert _progress_bar(str(src), 6, batch_size=4).total == 6
    assert _progress_bar("-", None, batch_size=4).total is None  # stdin: length unknown


def test_unwritable_output_is_a_one_line_error(tmp_path, capsys):
    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full")
    src = _write(tmp_path / "in.jsonl", ROWS)
    assert main(["verify", "exact", str(src), "-o", "/dev/full"]) == 1
    err = capsys.readouterr().err
    assert "error: cannot write /dev/full: No space left on device" in err


def test_closed_pipe_stops_quietly(tmp_path):
    # `veristep verify ... | head -1` must end with one error line, not a traceback.
    rows = [dict(ROWS[0], id=i) for i in range(3000)]
    src = _write(tmp_path / "in.jsonl", rows)
    proc = subprocess.Popen(
        [sys.executable, "-m", "veristep", "verify", "format", str(src), "--batch-size", "10"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.readline()
    proc.stdout.close()  # the reader goes away
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 1
    assert "reader closed the pipe" in err and "Traceback" not in err


def test_an_earlier_result_is_replaced_and_nothing_else_touched(tmp_path):
    stale = dict(ROWS[0], status="wrong", reward=0.0, keep=1,
                 veristep={"kind": "exact", "status": "wrong", "numeric_close": True})
    src, out = _write(tmp_path / "in.jsonl", [stale]), tmp_path / "out.jsonl"
    assert main(["verify", "exact", str(src), "-o", str(out)]) == 0
    (row,) = _read(out)
    assert row["veristep"]["status"] == "correct" and "numeric_close" not in row["veristep"]
    assert row["status"] == "wrong" and row["reward"] == 0.0 and row["keep"] == 1  # the input's

"""`veristep verify`: streaming runner, summary, errors that keep written results, backends."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from veristep.verifiers import Status, VerifyResult
from veristep.verifiers.cli.jsonl_io import InputError, iter_jsonl
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


ROWS = [
    {"id": 1, "completion": "so Answer: 4", "answer": "4"},
    {"id": 2, "completion": "Answer: 5", "answer": "4"},
    {"id": 3, "completion": "I give up", "answer": "4"},
    {"id": 4, "completion": "Answer: 0.333", "answer": "0.3333"},
    {"id": 5, "completion": [{"role": "assistant", "content": "Answer: 7"}], "answer": "7"},
]


def test_verify_writes_every_input_key_plus_result_and_summary(tmp_path, capsys):
    src, out = _write(tmp_path / "in.jsonl", ROWS), tmp_path / "out.jsonl"
    assert main(["verify", "exact", str(src), "-o", str(out), "--batch-size", "2"]) == 0
    rows = _read(out)
    assert [r["id"] for r in rows] == [1, 2, 3, 4, 5]
    assert [r["status"] for r in rows] == ["correct", "wrong", "no_answer", "wrong", "correct"]
    assert [r["reward"] for r in rows] == [1.0, 0.0, 0.0, 0.0, 1.0]
    assert rows[3]["numeric_close"] is True and rows[3]["extracted"] == "0.333"
    assert rows[4]["completion"] == ROWS[4]["completion"]  # input keys are copied unchanged
    err = capsys.readouterr().err
    assert "5 items" in err and "mean reward 0.4000" in err and "items/s" in err
    assert "correct" in err and "no_answer" in err


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
        ('{"id": 4, "completion": "Answer: 4"}', ":4: missing key 'answer'"),
        ('{"id": 4, "answer": "4"}', ":4: missing key 'completion'"),
        ("[1, 2]", ":4: expected a JSON object"),
    ],
)
def test_bad_line_stops_with_one_line_reason_and_keeps_results(
    tmp_path, capsys, bad_line, expected
):
    src = _write(tmp_path / "in.jsonl", [*ROWS[:3], bad_line, ROWS[0]])
    out = tmp_path / "out.jsonl"
    code = main(["verify", "exact", str(src), "-o", str(out), "--batch-size", "2"])
    assert code == 1
    assert [r["id"] for r in _read(out)] == [1, 2, 3]  # everything before the bad line
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and expected in errors[0] and "3 results" in errors[0]


def test_verifier_crash_keeps_earlier_batches(tmp_path, capsys, exact_cls):
    class Crashing(exact_cls):
        def verify_batch(self, completions, references):
            if any("boom" in c for c in completions):
                raise RuntimeError("bug in the checker")
            return super().verify_batch(completions, references)

    register_verifier("crashing", Crashing, replace=True)
    rows = [*ROWS[:2], {"id": 9, "completion": "boom", "answer": "1"}]
    src, out = _write(tmp_path / "in.jsonl", rows), tmp_path / "out.jsonl"
    assert main(["verify", "crashing", str(src), "-o", str(out), "--batch-size", "2"]) == 1
    assert [r["id"] for r in _read(out)] == [1, 2]
    assert "bug in the checker" in capsys.readouterr().err


def test_usage_errors_exit_2(tmp_path, capsys):
    src = _write(tmp_path / "in.jsonl", ROWS)
    assert main(["verify", "no-such-kind", str(src)]) == 2
    assert "unknown verifier kind 'no-such-kind'" in capsys.readouterr().err
    assert main(["verify", "exact", str(src), "--set", "workers=0"]) == 2
    assert main(["verify", "exact", str(src), "--set", "nonsense"]) == 2
    assert main(["verify", "exact", str(src), "--set", "colour=blue"]) == 2  # unknown keyword
    assert main(["verify", "exact", str(src), "-o", str(src)]) == 2
    assert _read(src) == ROWS  # the input was not touched


def test_missing_input_file_exits_1(tmp_path, capsys):
    assert main(["verify", "exact", str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "o")]) == 1
    assert "cannot open" in capsys.readouterr().err


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
    code = main(
        [
            "verify",
            "veristep.verifiers.core.combine:WeightedVerifier",
            str(src),
            "-o",
            str(out),
            "--set",
            'components={"exact": 2.0}',
        ]
    )
    assert code == 0
    assert [r["reward"] for r in _read(out)] == [2.0, 0.0, 0.0, 0.0, 2.0]


def test_jsonl_reader_skips_blank_lines_and_reports_bad_bytes(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a": 1}\n\n   \n{"a": 2}\n\xff\xfe\n')
    got = []
    with pytest.raises(InputError) as info:
        for record in iter_jsonl(path):
            got.append((record.line_no, record.data["a"]))
    assert got == [(1, 1), (4, 2)]
    assert str(info.value).endswith(":5: not UTF-8 text (invalid start byte)")


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


def test_unjudged_results_are_counted_in_summary(tmp_path, capsys):
    src = _write(tmp_path / "in.jsonl", [{"completion": "Answer: 1", "answer": None}, ROWS[0]])
    assert main(["verify", "exact", str(src), "-o", str(tmp_path / "o.jsonl")]) == 0
    err = capsys.readouterr().err
    assert "unjudged 1" in err and "internal_error" in err


def test_non_json_values_in_results_are_written(tmp_path, exact_cls):
    class Odd(exact_cls):
        def verify(self, completion, reference):
            return VerifyResult(float("nan"), False, Status.WRONG, extra={"path": Path("/x")})

    register_verifier("odd", Odd, replace=True)
    src, out = _write(tmp_path / "in.jsonl", ROWS[:1]), tmp_path / "o.jsonl"
    assert main(["verify", "odd", str(src), "-o", str(out)]) == 0
    assert _read(out)[0]["reward"] is None and _read(out)[0]["path"] == "/x"


def test_math_kind_end_to_end_in_a_subprocess(tmp_path):
    rows = [
        {"completion": r"The answer is $\boxed{\frac{1}{2}}$.", "answer": "0.5"},
        {"completion": r"So $\boxed{3}$.", "answer": "4"},
        {"completion": "no idea", "answer": "4"},
    ]
    src, out = _write(tmp_path / "in.jsonl", rows), tmp_path / "out.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "veristep",
            "verify",
            "math",
            str(src),
            "-o",
            str(out),
            "--workers",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    assert [r["status"] for r in _read(out)] == ["correct", "wrong", "no_answer"]
    assert "3 items" in proc.stderr


@pytest.mark.slow  # starting a local Ray instance takes 8-20 s on a loaded 2-core machine
def test_ray_backend_matches_local_in_order(tmp_path, exact_cls):
    ray = pytest.importorskip("ray")
    # The test verifier lives in a conftest module Ray workers cannot import: ship it by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[exact_cls.__module__])
    rows = [{"id": i, "completion": f"Answer: {i % 7}", "answer": str(i % 3)} for i in range(300)]
    src = _write(tmp_path / "in.jsonl", rows)
    local, remote = tmp_path / "local.jsonl", tmp_path / "ray.jsonl"
    assert main(["verify", "exact", str(src), "-o", str(local), "--batch-size", "16"]) == 0
    code = main(
        [
            "verify",
            "exact",
            str(src),
            "-o",
            str(remote),
            "--batch-size",
            "16",
            "--backend",
            "ray",
            "--workers",
            "2",
        ]
    )
    assert code == 0
    assert _read(remote) == _read(local)
    assert not ray.is_initialized()  # the backend shut down the instance it started


def test_progress_bar_only_on_a_terminal_for_inputs_longer_than_a_batch(tmp_path, monkeypatch):
    import veristep.verifiers.cli.verify as cli
    from veristep.verifiers.cli.verify import _progress_bar

    src = _write(tmp_path / "in.jsonl", ROWS * 3)
    assert _progress_bar(str(src), None, batch_size=4) is None  # stderr is not a terminal here
    monkeypatch.setattr(cli, "_is_terminal", lambda stream: True)
    assert _progress_bar(str(src), None, batch_size=20) is None
    bar = _progress_bar(str(src), None, batch_size=4)
    assert bar is not None and bar.total == 15
    bar.close()
    assert _progress_bar(str(src), 6, batch_size=4).total == 6
    assert _progress_bar("-", None, batch_size=4).total is None  # stdin: length unknown


def test_bad_reference_is_an_input_error(tmp_path, capsys, exact_cls):
    class Strict(exact_cls):
        def reference_from_record(self, record):
            if not isinstance(record["answer"], str):
                raise ValueError("answer must be a string")
            return record["answer"]

    register_verifier("strict", Strict, replace=True)
    src = _write(tmp_path / "in.jsonl", [ROWS[0], {"completion": "Answer: 1", "answer": [1]}])
    out = tmp_path / "o.jsonl"
    assert main(["verify", "strict", str(src), "-o", str(out)]) == 1
    assert ":2: bad reference: answer must be a string" in capsys.readouterr().err
    assert len(_read(out)) == 1


@pytest.mark.parametrize(
    ("kind", "sample"),
    [
        ("tools", "tools_sample.jsonl"),
        ("format", "format_sample.jsonl"),
        ("code", "code_sample.jsonl"),
    ],
)
def test_every_kind_runs_its_shipped_sample_from_the_console(kind, sample, test_data_dir, tmp_path):
    src = test_data_dir / sample
    assert src.is_file(), f"{sample} is shipped in tests/data"
    out = tmp_path / "out.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "veristep",
            "verify",
            kind,
            str(src),
            "-o",
            str(out),
            "--workers",
            "2",
            "--batch-size",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stderr
    rows = _read(out)
    assert len(rows) == len(_read(src)) and "items/s" in proc.stderr
    assert [r["status"] for r in rows] == [r["expected_status"] for r in rows]


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


def test_reverifying_replaces_earlier_result_fields(tmp_path):
    stale = dict(ROWS[0], status="wrong", reward=0.0, numeric_close=True, detail="old", keep=1)
    src, out = _write(tmp_path / "in.jsonl", [stale]), tmp_path / "out.jsonl"
    assert main(["verify", "exact", str(src), "-o", str(out)]) == 0
    (row,) = _read(out)
    assert row["status"] == "correct" and row["reward"] == 1.0 and row["keep"] == 1
    assert "numeric_close" not in row and "detail" not in row

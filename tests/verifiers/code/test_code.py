"""CodeVerifier: extraction, comparison, statuses, rewards, assertions, C++, batches, JSONL."""

from __future__ import annotations

import json

import pytest
from veristep.verifiers import Status, Verifier, get_verifier
from veristep.verifiers.code import (
    LANGUAGES,
    CodeVerifier,
    extract_code,
    outputs_match,
    parse_reference,
)

ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
ADD_TESTS = [
    {"stdin": "1 2\n", "stdout": "3\n"},
    {"stdin": "10 -4\n", "stdout": "6"},
    {"stdin": "0 0", "stdout": "0\n"},
]


def _ref(tests=ADD_TESTS, language="python"):
    return {"language": language, "tests": tests}


# ---- extraction ------------------------------------------------------------------------------
def test_extract_takes_the_last_block_of_the_language():
    text = "try:\n```python\nprint(1)\n```\nbetter:\n```py\nprint(2)\n```\n```text\nout\n```"
    assert extract_code(text, "python") == "print(2)\n"


def test_extract_prefers_tagged_then_untagged_then_whole_text():
    assert extract_code("```\nprint(3)\n```\nthen\n```cpp\nint main(){}\n```", "cpp") == (
        "int main(){}\n"
    )
    assert extract_code("see\n```\nprint(3)\n```", "python") == "print(3)\n"
    assert extract_code("print(4)", "python") == "print(4)"
    assert extract_code("```java\nclass A {}\n```", "python") is None
    assert extract_code("   \n", "python") is None
    assert extract_code("```python\n\n```", "python") is None
    assert extract_code(None, "python") is None  # type: ignore[arg-type]


def test_extract_handles_unclosed_and_tilde_fences():
    assert extract_code("text\n```python\nprint(5)\nprint(6)", "python") == "print(5)\nprint(6)\n"
    assert extract_code("~~~python\nprint(7)\n~~~\n", "python") == "print(7)\n"
    # A longer closing fence closes; a fence inside the body with other text does not.
    assert extract_code("````python\nx = '```'\n````", "python") == "x = '```'\n"


# ---- comparison ------------------------------------------------------------------------------
def test_outputs_match_is_whitespace_tolerant_but_exact():
    assert outputs_match("1 2\n3\n", "1  2\r\n3")
    assert outputs_match("\n1\n\n", "1")
    assert not outputs_match("1\n", "1\n2")  # stopping early is wrong, unlike zip-pairing
    assert not outputs_match("1\n2\n3", "1\n2")  # extra lines are wrong too
    assert not outputs_match("1 2", "12")
    assert not outputs_match("3.0", "3")


def test_outputs_match_with_float_tolerance():
    assert outputs_match("0.3333334 x", "0.333333 x", float_tolerance=1e-5)
    assert not outputs_match("0.34", "0.333333", float_tolerance=1e-5)
    assert not outputs_match("abc", "abd", float_tolerance=1.0)
    assert outputs_match("1e3", "1000.0000001", float_tolerance=1e-6)


# ---- references --------------------------------------------------------------------------------
def test_parse_reference_rejects_malformed_references():
    for bad in (
        [],
        {"tests": []},
        {"tests": [{"stdin": "1"}]},
        {"tests": [{"stdin": 1, "stdout": "1"}]},
        {"language": "cobol", "tests": [{"stdout": "1"}]},
        {"asserts": "assert True"},
        {"language": "cpp", "asserts": ["assert(1)"]},
        {"nothing": 1},
    ):
        with pytest.raises(ValueError):
            parse_reference(bad)
    parsed = parse_reference({"tests": [{"stdout": "1"}]})
    assert parsed.language == "python" and parsed.tests[0].stdin == ""


def test_reference_from_record(code_verifier):
    record = {"completion": "x", "language": "cpp", "tests": ADD_TESTS}
    assert code_verifier.reference_from_record(record) == {"language": "cpp", "tests": ADD_TESTS}
    record = {"completion": "x", "asserts": ["assert f() == 1"], "setup": "import math"}
    assert code_verifier.reference_from_record(record) == {
        "language": "python",
        "asserts": ["assert f() == 1"],
        "setup": "import math",
    }
    with pytest.raises(KeyError):
        code_verifier.reference_from_record({"completion": "x"})


def test_bad_configuration_raises():
    with pytest.raises(ValueError):
        CodeVerifier(workers=0)
    with pytest.raises(ValueError):
        CodeVerifier(timeout=0)
    with pytest.raises(ValueError):
        CodeVerifier(float_tolerance=-1)


# ---- verification: Python -----------------------------------------------------------------------
def test_correct_program_gets_full_reward(code_verifier):
    result = code_verifier.verify(f"Here you go:\n```python\n{ADD}```", _ref())
    assert result.correct and result.reward == 1.0 and result.status is Status.CORRECT
    assert result.extracted == ADD
    assert result.extra["passed"] == 3 and result.extra["total"] == 3
    assert result.extra["isolation"] == code_verifier.isolation.value
    assert [t["status"] for t in result.extra["tests"]] == ["correct"] * 3
    assert {"total_s", "run_s", "sandbox_start_s"} <= set(result.timings)
    record = result.to_record()
    assert {"reward", "correct", "status", "passed", "total", "isolation"} <= set(record)
    json.dumps(record)


def test_partial_credit_and_all_or_nothing(code_verifier, make_code_verifier):
    wrong_on_negatives = "a, b = map(int, input().split())\nprint(abs(a) + abs(b))\n"
    result = code_verifier.verify(wrong_on_negatives, _ref())
    assert result.reward == pytest.approx(2 / 3) and not result.correct
    assert result.status is Status.WRONG_ANSWER
    assert [t["status"] for t in result.extra["tests"]] == ["correct", "wrong_answer", "correct"]
    strict = make_code_verifier(timeout=1.0, all_or_nothing=True)
    result = strict.verify(wrong_on_negatives, _ref())
    assert result.reward == 0.0 and result.extra["passed"] == 1
    # All-or-nothing stops at the first failure: the third test never runs.
    assert len(result.extra["tests"]) == 2 and result.extra["total"] == 3
    assert strict.verify(ADD, _ref()).reward == 1.0


def test_runtime_errors_report_truncated_stderr(code_verifier):
    result = code_verifier.verify("raise ValueError('boom')\n", _ref())
    assert result.status is Status.RUNTIME_ERROR and result.reward == 0.0
    assert "ValueError: boom" in result.extra["tests"][0]["stderr"]
    result = code_verifier.verify("raise ValueError('boom ' * 1000)\n", _ref())
    stderr = result.extra["tests"][0]["stderr"]
    assert len(stderr) == 1000 and stderr.rstrip().endswith("boom")  # the tail is kept
    assert code_verifier.verify("def f(:\n", _ref()).status is Status.RUNTIME_ERROR
    assert code_verifier.verify("import sys\nsys.exit(2)", _ref()).status is Status.RUNTIME_ERROR
    assert code_verifier.verify("import os\nos.abort()", _ref()).extra["tests"][0][
        "detail"
    ] == "killed by signal SIGABRT"


def test_exit_zero_after_the_answer_is_fine(code_verifier):
    code = "import sys\na, b = map(int, input().split())\nprint(a + b)\nsys.exit(0)\nprint(1)"
    assert code_verifier.verify(code, _ref()).correct


def test_timeout_status_and_bound(code_verifier):
    result = code_verifier.verify("while True:\n    pass\n", _ref(ADD_TESTS[:1]))
    assert result.status is Status.TIMEOUT and result.reward == 0.0
    assert result.timings["total_s"] < code_verifier.test_limits.wall_s + 5
    # A program that runs out of time is a verdict on the program (reward 0 in RL adapters),
    # unlike a checker that runs out of time.
    assert result.judged is True


def test_cpu_limit_stops_busy_loops(make_code_verifier):
    verifier = make_code_verifier(timeout=5.0, cpu_timeout=1.0)
    result = verifier.verify("while True:\n    pass\n", _ref(ADD_TESTS[:1]))
    assert result.status is Status.TIMEOUT
    assert result.extra["tests"][0]["detail"] == "CPU-time limit exceeded"
    assert result.timings["total_s"] < 4.5


def test_no_code(code_verifier):
    result = code_verifier.verify("I cannot solve this.\n```text\nsorry\n```", _ref())
    assert result.status is Status.NO_CODE and result.reward == 0.0 and result.extracted is None


def test_python_process_semantics_match_a_fresh_interpreter(code_verifier):
    code = (
        "import atexit, sys, threading, time\n"
        "data = sys.stdin.read().split()\n"
        "assert __name__ == '__main__' and sys.argv[0].endswith('main.py')\n"
        "def late():\n"
        "    time.sleep(0.05)\n"
        "    print('thread', flush=True)\n"
        "threading.Thread(target=late).start()\n"
        "atexit.register(lambda: print('atexit'))\n"
        "sys.stdout.write(' '.join(reversed(data)) + '\\n')\n"
        "print('ünïcödé', end='')\n"
        "print()\n"
    )
    tests = [{"stdin": "a\nb c\n" * 2, "stdout": "c b a c b a\nünïcödé\nthread\natexit\n"}]
    result = code_verifier.verify(code, _ref(tests))
    assert result.correct, result.extra["tests"]


def test_large_stdin_and_stdout(code_verifier):
    n = 200_000
    tests = [{"stdin": "\n".join(map(str, range(n))), "stdout": str(n * (n - 1) // 2)}]
    code = "import sys\nprint(sum(map(int, sys.stdin.read().split())))\n"
    assert code_verifier.verify(code, _ref(tests)).correct
    tests = [{"stdin": "", "stdout": "\n".join(["7"] * n)}]
    assert code_verifier.verify("print('\\n'.join(['7'] * 200000))", _ref(tests)).correct


def test_tests_do_not_share_files_or_processes(code_verifier):
    code = (
        "import os\n"
        "seen = os.path.exists('state') or os.path.exists('/tmp/state')\n"
        "open('state', 'w').write('1')\n"
        "open('/tmp/state', 'w').write('1')\n"
        "print('fresh' if not seen else 'stale')\n"
    )
    tests = [{"stdin": "", "stdout": "fresh"}] * 3
    assert code_verifier.verify(code, _ref(tests)).extra["passed"] == 3


# ---- assertion tests ---------------------------------------------------------------------------
def test_assert_tests(code_verifier):
    reference = {
        "asserts": ["assert double(2) == 4", "assert double(-1) == -2", "assert triple(1) == 3"],
        "setup": "def triple(x):\n    return 3 * x\n",
    }
    result = code_verifier.verify("```python\ndef double(x):\n    return 2 * x\n```", reference)
    assert result.correct and result.extra["passed"] == 3
    result = code_verifier.verify("def double(x):\n    return x + 2\n", reference)
    assert result.extra["passed"] == 2 and result.reward == pytest.approx(2 / 3)
    assert result.extra["tests"][1]["detail"] == "assertion failed"
    assert result.status is Status.WRONG_ANSWER


def test_assert_tests_catch_early_exit_and_errors(code_verifier):
    reference = {"asserts": ["assert f() == 1"]}
    for code in ("import os\nos._exit(0)", "import sys\nsys.exit(0)", "raise SystemExit"):
        result = code_verifier.verify(code, reference)
        assert result.reward == 0.0 and result.status is Status.RUNTIME_ERROR, code
    result = code_verifier.verify("def f():\n    return 1 / 0\n", reference)
    assert result.status is Status.RUNTIME_ERROR and "ZeroDivisionError" in result.extra[
        "tests"
    ][0]["stderr"]
    # Printing is allowed; only the last line carries the sentinel.
    assert code_verifier.verify("print('hi')\ndef f():\n    return 1\n", reference).correct


# ---- C++ -----------------------------------------------------------------------------------------
CPP_ADD = """```cpp
#include <iostream>
int main() { long a, b; std::cin >> a >> b; std::cout << a + b << "\\n"; }
```"""


def test_cpp_compiles_once_and_runs_every_test(code_verifier):
    result = code_verifier.verify(CPP_ADD, _ref(language="cpp"))
    assert result.correct and result.extra["passed"] == 3, result.detail
    assert "compile_s" in result.timings and result.extra["language"] == "cpp"


def test_cpp_failures(code_verifier):
    result = code_verifier.verify("int main( { return 0; }", _ref(language="cpp"))
    assert result.status is Status.COMPILE_ERROR and "error" in result.detail
    assert result.extra["passed"] == 0 and result.extra["total"] == 3
    segfault = "int main() { volatile int *p = nullptr; *p = 1; }"
    result = code_verifier.verify(segfault, _ref(language="cpp"))
    assert result.status is Status.RUNTIME_ERROR
    assert result.extra["tests"][0]["detail"] == "killed by signal SIGSEGV"
    wrong = "#include <cstdio>\nint main() { std::puts(\"42\"); }"
    assert code_verifier.verify(wrong, _ref(language="cpp")).status is Status.WRONG_ANSWER
    # The compiler itself is sandboxed: including a host secret fails to compile.
    result = code_verifier.verify('#include "/etc/shadow"\nint main(){}', _ref(language="cpp"))
    assert result.status is Status.COMPILE_ERROR


def test_language_table_rows_are_complete():
    for name, language in LANGUAGES.items():
        assert language.name == name and language.run and language.fence_tags
        assert (language.compile is None) == (not language.artifacts)


# ---- protocol, batches, registry, sample data --------------------------------------------------------
def test_verify_batch_keeps_order_and_mixes_languages(code_verifier):
    completions = [ADD, "print(0)", CPP_ADD, "while True: pass", "no code here ```js\n1\n```"]
    references = [_ref(), _ref(), _ref(language="cpp"), _ref(ADD_TESTS[:1]), _ref()]
    results = code_verifier.verify_batch(completions, references)
    assert [r.status for r in results] == [
        Status.CORRECT,
        Status.WRONG_ANSWER,
        Status.CORRECT,
        Status.TIMEOUT,
        Status.NO_CODE,
    ]
    assert code_verifier.verify_batch([], []) == []
    with pytest.raises(ValueError):
        code_verifier.verify_batch([ADD], [])


def test_registry_and_protocol(code_verifier):
    assert isinstance(code_verifier, Verifier) and code_verifier.kind == "code"
    verifier = get_verifier("code", timeout=1.0, isolation=code_verifier.isolation.value,
                            allow_unsandboxed=code_verifier.sandbox.allow_unsandboxed)
    assert verifier.verify(ADD, _ref()).correct


def test_sample_jsonl_lines_verify_as_labelled(code_verifier, test_data_dir):
    lines = (test_data_dir / "code_sample.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    assert len(records) >= 8
    references = [code_verifier.reference_from_record(r) for r in records]
    results = code_verifier.verify_batch([r["completion"] for r in records], references)
    for record, result in zip(records, results, strict=True):
        assert result.status.value == record["expected_status"], (record, result.detail)


def test_site_builtins_exist_like_in_a_plain_interpreter(code_verifier):
    # exit() and quit() come from the `site` module; competitive solutions call them.
    code = "a, b = map(int, input().split())\nprint(a + b)\nexit(0)\nprint('unreachable')\n"
    assert code_verifier.verify(code, _ref()).correct

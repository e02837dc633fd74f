"""CodeVerifier: extraction, comparison, statuses, rewards, assertions, C++, batches, JSONL."""

from __future__ import annotations

import json
import os
import time

import pytest
from veristep.verifiers import Status, Verifier, get_verifier
from veristep.verifiers.code import (
    LANGUAGES,
    CodeVerifier,
    extract_code,
    looks_like_prose,
    outputs_match,
    parse_reference,
)
from veristep.verifiers.code.reference import BadReference

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
    # two integers compare exactly: a relative 1e-6 let answers near 10**9 be off by 1,000
    assert not outputs_match("1000000000", "1000000007", float_tolerance=1e-6)
    assert outputs_match("007 -0", "7 0", float_tolerance=1e-6)
    assert outputs_match("3.0000001", "3", float_tolerance=1e-6)  # a real number still may


# ---- references --------------------------------------------------------------------------------
def test_parse_reference_rejects_malformed_references():
    for bad in (
        [],
        None,
        "not json",
        "[1, 2]",
        {"tests": []},
        {"tests": [{"stdin": "1"}]},
        {"tests": [{"stdin": 1, "stdout": "1"}]},
        {"language": "cobol", "tests": [{"stdout": "1"}]},
        {"asserts": "assert True"},
        {"language": "cpp", "asserts": ["assert(1)"]},
        {"inputs": ["1"], "outputs": ["1", "2"]},
        {"inputs": [], "outputs": []},
        {"fn_name": "f", "inputs": ["1"], "outputs": [1]},
        {"fn_name": "not a name", "inputs": [[1]], "outputs": [1]},
        {"test_list": ["assert f(1) == 1"], "test_imports": "import math"},
        {"test": "assert True", "entry_point": "f"},
        {"input_output": "{broken"},
        {"nothing": 1},
    ):
        with pytest.raises(BadReference):
            parse_reference(bad)
    parsed = parse_reference({"tests": [{"stdout": "1"}]})
    assert parsed.language == "python" and parsed.tests[0].stdin == ""
    assert issubclass(BadReference, ValueError)


def test_reference_from_record(code_verifier):
    record = {"completion": "x", "language": "cpp", "tests": ADD_TESTS}
    assert code_verifier.reference_from_record(record) == {"language": "cpp", "tests": ADD_TESTS}
    record = {"completion": "x", "asserts": ["assert f() == 1"], "setup": "import math"}
    assert code_verifier.reference_from_record(record) == {
        "asserts": ["assert f() == 1"],
        "setup": "import math",
    }
    # A reference under a container key, as verl and TRL datasets keep it; JSON strings too.
    record = {"completion": "x", "ground_truth": '{"inputs": ["1"], "outputs": ["1"]}'}
    assert code_verifier.reference_from_record(record) == record["ground_truth"]
    for record in ({"completion": "x"}, {"completion": "x", "language": "cpp"}):
        with pytest.raises(KeyError):
            code_verifier.reference_from_record(record)
    # Unusable but present: judged at verify time, so that the row gets bad_reference.
    reference = code_verifier.reference_from_record({"completion": "x", "tests": []})
    result = code_verifier.verify("print(1)", reference)
    assert result.status is Status.BAD_REFERENCE and result.judged is False


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
    assert result.extra["isolation"] == code_verifier.sandbox.description
    assert result.extra["isolation"] == f"{code_verifier.isolation.value}+seccomp"
    assert [t["status"] for t in result.extra["tests"]] == ["correct"] * 3
    assert {"total_s", "run_s", "sandbox_start_s"} <= set(result.timings)
    record = result.to_record()
    assert {"reward", "correct", "status", "passed", "total", "isolation"} <= set(record)
    json.dumps(record)


def test_fail_fast_by_default_and_partial_credit_on_request(code_verifier, make_code_verifier):
    wrong_on_negatives = "a, b = map(int, input().split())\nprint(abs(a) + abs(b))\n"
    # By default the first failure ends the run: the third test never runs (counts as failed).
    result = code_verifier.verify(wrong_on_negatives, _ref())
    assert result.reward == pytest.approx(1 / 3) and not result.correct
    assert result.status is Status.WRONG
    assert [t["status"] for t in result.extra["tests"]] == ["correct", "wrong"]
    assert result.extra["total"] == 3
    every = make_code_verifier(timeout=1.0, stop_on_first_failure=False)
    result = every.verify(wrong_on_negatives, _ref())
    assert result.reward == pytest.approx(2 / 3)
    assert [t["status"] for t in result.extra["tests"]] == ["correct", "wrong", "correct"]
    # A program that loops pays the time limit once, not once per test.
    looping = code_verifier.verify("while True:\n    pass\n", _ref())
    assert len(looping.extra["tests"]) == 1 and looping.status is Status.TIMEOUT
    strict = make_code_verifier(timeout=1.0, all_or_nothing=True)
    result = strict.verify(wrong_on_negatives, _ref())
    assert result.reward == 0.0 and result.extra["passed"] == 1
    assert strict.verify(ADD, _ref()).reward == 1.0


def test_runtime_errors_report_truncated_stderr(code_verifier):
    result = code_verifier.verify("raise ValueError('boom')\n", _ref())
    assert result.status is Status.RUNTIME_ERROR and result.reward == 0.0
    assert "ValueError: boom" in result.extra["tests"][0]["stderr"]
    result = code_verifier.verify("raise ValueError('boom ' * 1000)\n", _ref())
    stderr = result.extra["tests"][0]["stderr"]
    assert len(stderr) == 1000 and stderr.rstrip().endswith("boom")  # the tail is kept
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
    for prose in ("I am not sure how to solve this problem, sorry.",
                  "The answer is to add the two numbers.\nThen print the sum.",
                  "Sure! Here's my approach:\n\nFirst read the input, then add."):
        result = code_verifier.verify(prose, _ref())
        assert result.status is Status.NO_CODE, (prose, result.detail)
        assert result.judged is True  # a verdict on the completion, reward 0


def test_prose_detection_keeps_unfenced_code():
    for code in ("print(4)", "a, b = map(int, input().split())\nprint(a + b)",
                 "def f(:\n    pass\n", "for i in range(3) print(i)"):
        assert not looks_like_prose(code, "python"), code
    assert not looks_like_prose("int main() { return 0; }", "cpp")
    assert looks_like_prose("I cannot write this in C++ today.", "cpp")


def test_python_syntax_errors_are_compile_errors_with_the_message(code_verifier):
    for code, message in (("def f(:\n    pass\n", "SyntaxError"),
                          ("if True:\nprint(1)\n", "IndentationError"),
                          ("x = 1\0\n", "null bytes")):
        result = code_verifier.verify(f"```python\n{code}```", _ref())
        assert result.status is Status.COMPILE_ERROR and result.reward == 0.0, result.detail
        assert message in result.detail and result.extra["tests"] == []
    # A SyntaxError the program raises itself while running is a runtime error.
    result = code_verifier.verify("exec('def f(:')\n", _ref())
    assert result.status is Status.RUNTIME_ERROR


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
def test_assert_tests(code_verifier, make_code_verifier):
    reference = {
        "asserts": ["assert double(2) == 4", "assert double(-1) == -2", "assert triple(1) == 3"],
        "setup": "def triple(x):\n    return 3 * x\n",
    }
    result = code_verifier.verify("```python\ndef double(x):\n    return 2 * x\n```", reference)
    assert result.correct and result.extra["passed"] == 3
    # triple() is the setup's, not the candidate: a program could swap it, so that test says so.
    assert result.extra["fakeable"] is True
    assert [t.get("fakeable", False) for t in result.extra["tests"]] == [False, False, True]
    every = make_code_verifier(timeout=1.0, stop_on_first_failure=False)
    result = every.verify("def double(x):\n    return x + 2\n", reference)
    assert result.extra["passed"] == 2 and result.reward == pytest.approx(2 / 3)
    assert result.extra["tests"][1]["detail"] == "double(-1) == -2: got 1"
    assert result.status is Status.WRONG


def test_assert_tests_catch_early_exit_and_errors(code_verifier):
    reference = {"asserts": ["assert f() == 1"]}
    for code in ("import os\nos._exit(0)", "import sys\nsys.exit(0)", "raise SystemExit"):
        result = code_verifier.verify(code, reference)
        assert result.reward == 0.0 and result.status is Status.RUNTIME_ERROR, code
        assert result.extra["tests"][0]["detail"] == "exited before f() == 1 returned"
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
    assert code_verifier.verify(wrong, _ref(language="cpp")).status is Status.WRONG
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
        Status.WRONG,
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


# ---- reference formats as datasets ship them (one parser on every surface) ---------------------
APPS_STDIN = {"inputs": ["1 2\n", ["10 -4"]], "outputs": ["3\n", ["6"]]}
APPS_CALL = {"fn_name": "twoSum", "inputs": [[[2, 7, 11, 15], 9], [[3, 2, 4], 6]],
             "outputs": [[[0, 1]], [[1, 2]]]}
TWO_SUM = """
class Solution:
    def twoSum(self, nums: List[int], target: int) -> List[int]:
        seen = {}
        for i, x in enumerate(nums):
            if target - x in seen:
                return (seen[target - x], i)
            seen[x] = i
"""
MBPP = {
    "test_list": ["assert remove_odd([1, 2, 3]) == [2]", "assert math.isclose(half(3), 1.5)",
                  "assert remove_odd([CONSTANT]) == []"],
    "test_setup_code": "CONSTANT = 7",
    "test_imports": ["import math"],
}
MBPP_SOLUTION = "def remove_odd(xs):\n    return [x for x in xs if x % 2 == 0]\n" \
                "def half(x):\n    return x / 2\n"
HUMANEVAL = {
    "entry_point": "add",
    "test": "METADATA = {}\n\n\ndef check(candidate):\n    assert candidate(2, 3) == 5\n"
            "    assert candidate(-1, 1) == 0, 'sign'\n    assert abs(candidate(0.1, 0.2) - 0.3) < 1e-9\n",
}


@pytest.mark.parametrize(
    ("reference", "good", "bad", "total"),
    [
        (APPS_STDIN, ADD, "print(0)", 2),
        ({"input_output": json.dumps(APPS_STDIN)}, ADD, "print(0)", 2),
        ({"input": ["1 2", "0 0"], "output": ["3", "0"]}, ADD, "print(1)", 2),
        (APPS_CALL, TWO_SUM, TWO_SUM.replace("(seen[target - x], i)", "(i, seen[target - x])"), 2),
        ({"input_output": json.dumps(APPS_CALL)}, TWO_SUM, "def twoSum(a, b):\n    return [0, 1]\n", 2),
        ({"fn_name": "count", "inputs": [["aab"]], "outputs": [[{"a": 2, "b": 1}]]},
         "def count(s):\n    return {c: s.count(c) for c in s}\n", "def count(s):\n    return {}\n", 1),
        (MBPP, MBPP_SOLUTION, MBPP_SOLUTION.replace("x / 2", "x // 2"), 3),
        (HUMANEVAL, "def add(a, b):\n    return a + b\n", "def add(a, b):\n    return a - b\n", 1),
        (json.dumps(MBPP), MBPP_SOLUTION, "def remove_odd(xs):\n    return xs\n", 3),
    ],
)
def test_reference_formats(make_code_verifier, reference, good, bad, total):
    verifier = make_code_verifier(timeout=2.0, stop_on_first_failure=False)
    parsed = parse_reference(reference)
    assert parsed.total == total
    # MBPP's last assertion takes an argument from the setup: not a literal, so fakeable.
    assert parsed.fakeable is (reference in (MBPP, json.dumps(MBPP)))
    record = dict(reference) if isinstance(reference, dict) else {"ground_truth": reference}
    from_record = verifier.reference_from_record({"completion": "x", **record})
    results = verifier.verify_batch([good, bad], [from_record, reference])
    assert results[0].correct and results[0].extra["passed"] == total, results[0].extra["tests"]
    assert not results[1].correct and results[1].status is Status.WRONG
    assert verifier.verify(good, reference).correct


def test_apps_call_based_items_compare_as_apps_does(code_verifier):
    # A tuple counts as a list; an expected value may be wrapped in a list; a plain
    # function works as well as a method of Solution; LeetCode names need no import.
    reference = {"fn_name": "pair", "inputs": [[1], [2]], "outputs": [[[1, 1]], [2, 2]]}
    code = "def pair(x: int) -> Tuple[int, int]:\n    return (x, x)\n"
    assert code_verifier.verify(code, reference).correct
    missing = code_verifier.verify("def other(x):\n    return x\n", reference)
    assert missing.status is Status.RUNTIME_ERROR and "pair" in missing.extra["tests"][0]["stderr"]
    # only a one-element list is a wrapper: APPS's own rule let the first element of [2, 4] pass
    evens = {"fn_name": "evens", "inputs": [[[1, 2, 3, 4]], [[6, 8, 9]]], "outputs": [[2, 4], [6, 8]]}
    first = "def evens(xs):\n    return [x for x in xs if x % 2 == 0][0]\n"
    assert code_verifier.verify(first, evens).status is Status.WRONG
    assert code_verifier.verify(first.replace("[0]", ""), evens).correct


def test_humaneval_check_functions_that_are_not_plain_asserts_run_as_code(code_verifier):
    reference = {"entry_point": "inc", "test": "def check(candidate):\n"
                 "    for x in range(3):\n        assert candidate(x) == x + 1\n"}
    parsed = parse_reference(reference)
    assert parsed.fakeable and parsed.total == 1
    result = code_verifier.verify("def inc(x):\n    return x + 1\n", reference)
    assert result.correct and result.extra["fakeable"] is True
    assert not code_verifier.verify("def inc(x):\n    return x\n", reference).correct


def test_assertion_forms_become_checks_judged_outside_the_program():
    from veristep.verifiers.code.reference import CallTest, StatementTest, assertion_test

    cases = {
        "assert f(1) == [1, 2]": ("eq", [1, 2]),
        "assert (1, 2) == f(1)": ("eq", (1, 2)),
        "assert f(1) != 3": ("ne", 3),
        "assert f(1) is None": ("is", None),
        "assert f(1)": ("truthy", None),
        "assert not f(1)": ("falsy", None),
        "assert math.isclose(f(1), 0.5, rel_tol=1e-3)": ("isclose", 0.5),
        "assert abs(f(1) - 2.5) <= 1e-6": ("abs_le", 2.5),
        "assert sorted(f(1)) == [1]": ("eq", [1]),
    }
    for source, (op, expected) in cases.items():
        test = assertion_test(source)
        assert isinstance(test, CallTest), source
        (check,) = test.checks
        assert (check.op, check.expected) == (op, expected), source
        assert "==" not in check.call["expr"] and "!=" not in check.call["expr"]
    for source in ("assert f(1) in (1, 2)", "assert isinstance(f(1), int)", "assert f(1) == g(1)",
                   "assert f(1) == 1 == g(2)", "x = f(1)\nassert x == 1", "assert (f(1) > 0) == True",
                   "assert f(1) == " + "-" * 5000 + "1", "assert f(1) == \0", "assert f(("):
        assert isinstance(assertion_test(source), StatementTest), source[:40]
    checks = {source: assertion_test(source).checks[0] for source in cases}
    first = checks["assert f(1) == [1, 2]"]
    assert first.passes([1, 2]) and not first.passes((1, 2))
    isclose = checks["assert math.isclose(f(1), 0.5, rel_tol=1e-3)"]
    assert isclose.passes(0.5002) and not isclose.passes("0.5")
    near = checks["assert abs(f(1) - 2.5) <= 1e-6"]
    assert near.passes(2.5) and not near.passes(None)
    assert checks["assert f(1)"].passes([0]) and checks["assert not f(1)"].passes(0)
    assert checks["assert f(1) is None"].passes(None) and not checks["assert f(1) is None"].passes(0)


def test_plain_values_survive_the_round_trip_and_nothing_else_crosses():
    from veristep.verifiers.code.plain_data import NotPlainData, decode_plain, encode_plain

    values = [None, True, 0, -(10 ** 40), 1.5, float("inf"), "é\ud800", b"\x00", [1, (2, 3)],
              {(1, 2): {"a": frozenset({1})}}, {1, 2}, 2 + 3j, ()]
    for value in values:
        back = decode_plain(encode_plain(value))
        assert back == value and type(back) is type(value), value
    nan = decode_plain(encode_plain(float("nan")))
    assert nan != nan

    class Liar:
        def __eq__(self, other):
            return True

    for value in (Liar(), [Liar()], object(), print, iter([])):
        with pytest.raises(NotPlainData):
            encode_plain(value)
    nested: list = []
    nested.append(nested)
    with pytest.raises(NotPlainData):
        encode_plain(nested)
    for text in ('{"$eval": "1"}', '{"a": 1}', '{"$float": "1e999"}', "[", '{"$set": [[1]]}'):
        with pytest.raises((ValueError, TypeError)):
            decode_plain(text)


# ---- the interpreter programs run with (issue 19) ------------------------------------------------
def test_python_option_mounts_a_virtual_environment(make_code_verifier):
    import shutil
    import subprocess
    import sys
    import tempfile
    import zipfile

    plain = make_code_verifier(timeout=5.0)
    base = tempfile.mkdtemp(prefix="veristep-venv-")  # readable by uid 65534, unlike pytest's
    os.chmod(base, 0o755)
    try:
        env_dir = os.path.join(base, "env")
        subprocess.run([plain.sandbox.python, "-m", "venv", "--without-pip", env_dir], check=True)
        wheel = os.path.join(base, "vstiny-1.0-py3-none-any.whl")
        files = {
            "vstiny/__init__.py": "def answer():\n    return 42\n",
            "vstiny-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: vstiny\nVersion: 1.0\n",
            "vstiny-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: veristep-test\n"
                                          "Root-Is-Purelib: true\nTag: py3-none-any\n",
        }
        files["vstiny-1.0.dist-info/RECORD"] = "".join(f"{name},,\n" for name in [*files, "x"])
        with zipfile.ZipFile(wheel, "w") as archive:
            for name, text in files.items():
                archive.writestr(name, text)
        subprocess.run([sys.executable, "-m", "pip", "--python", os.path.join(env_dir, "bin", "python"),
                        "install", "-q", "--no-index", "--no-deps", wheel], check=True)
        code = "import vstiny, sys\nprint(vstiny.answer(), sys.prefix)\n"
        reference = {"tests": [{"stdout": f"42 {env_dir}"}]}
        with_env = make_code_verifier(timeout=5.0, python=env_dir)
        result = with_env.verify(code, reference)
        assert result.correct, result.extra["tests"]
        assert with_env.sandbox.python == os.path.join(env_dir, "bin", "python3")
        missing = plain.verify(code, reference)  # the default: no such package
        assert missing.status is Status.RUNTIME_ERROR
        assert "ModuleNotFoundError" in missing.extra["tests"][0]["stderr"]
        # The environment is mounted read-only.
        write = f"open({os.path.join(env_dir, 'x.py')!r}, 'w')\n"
        assert with_env.verify(write, {"tests": [{"stdout": ""}]}).status is Status.RUNTIME_ERROR
        with_env.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_deep_recursion_is_a_runtime_error_at_once(make_code_verifier):
    verifier = make_code_verifier(timeout=30.0, memory_mb=2048)
    code = (
        "import sys, time\n"
        "sys.setrecursionlimit(250_000)\n"
        "def down(n):\n"
        "    return down(n + 1)\n"
        "try:\n"
        "    down(0)\n"
        "except RecursionError:\n"
        "    print(time.monotonic(), file=sys.stderr, flush=True)\n"
        "    raise\n"
    )
    started = time.monotonic()
    result = verifier.verify(code, _ref(ADD_TESTS[:1]))
    assert result.status is Status.RUNTIME_ERROR, result.detail
    stderr = result.extra["tests"][0]["stderr"]
    assert stderr.rstrip().endswith("RecursionError: maximum recursion depth exceeded")
    assert "[Previous line repeated" in stderr and "<string>" not in stderr
    assert time.monotonic() - started < 30

"""Code references as datasets ship them, parsed into one typed form; function-test checks.

One parser serves `verify`, `verify_batch` and `reference_from_record` on every surface. It
accepts (as a dict, or a JSON string of one):

==========================  ================================================================
veristep stdin/stdout       ``{"language": "python", "tests": [{"stdin": .., "stdout": ..}]}``
veristep assertions         ``{"asserts": ["assert f(1) == 2", ...], "setup": "..."}``
APPS / TACO standard input  ``{"inputs": [str | [lines]], "outputs": [...]}`` (or the same
                            inside ``"input_output"``, as an APPS row stores it)
APPS call-based             ``{"fn_name": "f", "inputs": [[args]], "outputs": [value]}``
CodeContests-style lists    ``{"input": [str], "output": [str]}``
MBPP                        ``{"test_list": [asserts], "test_setup_code": .., "test_imports": [..]}``
HumanEval                   ``{"test": "def check(candidate): ...", "entry_point": "f"}``
==========================  ================================================================

Assertions of the form ``assert E == literal`` (also ``!=``, ``is None/True/False``,
``assert E``, ``assert not E``, ``math.isclose(E, literal, ...)``, ``abs(E - literal) < tol``)
become function tests: E is evaluated in the sandbox, its value comes back as plain data
(verifiers/code/plain_data.py) and is compared here, outside the candidate's process. Such a check
is unfakeable only when E is a direct call of the candidate with literal arguments
(``f(1, [2, 3], k="x")``, where ``f`` is neither a builtin nor defined by the reference's own
setup): then the compared value is what the candidate returned. Any other E (``f(x) - y``,
``f(x).startswith("a")``, ``operator.eq(f(x), y)``, ``len(f(x))``, a setup helper) is computed
by code the program can patch or race, and the check is marked fakeable, as is any assertion
that runs as a statement in the sandbox.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core import pyast
from .plain_data import encode_plain

#: Languages that assertion and function tests exist for (they run in the sandbox's Python).
CALL_LANGUAGES = ("python",)

#: Record keys `reference_from_record` takes (any of them marks a code reference).
REFERENCE_KEYS = (
    "language", "tests", "asserts", "setup", "inputs", "outputs", "fn_name", "input_output",
    "input", "output", "test_list", "test_setup_code", "test_imports", "test", "entry_point",
)  # fmt: skip
_CONTAINER_KEYS = ("reference", "ground_truth")

# APPS call-based solutions (LeetCode style) use these names without importing them.
APPS_PRELUDE = (
    "import sys, math, heapq, bisect, itertools, functools, collections, string, re\n"
    "from typing import *\n"
    "from collections import Counter, OrderedDict, defaultdict, deque\n"
    "from functools import lru_cache, reduce\n"
    "from itertools import accumulate, combinations, permutations, product\n"
    "from heapq import heappush, heappop, heapify\n"
    "from math import sqrt, ceil, floor, gcd, inf, log, log2\n"
)
# Builtins whose result is a verdict about an object, which the object itself can forge.
_PREDICATES = frozenset({
    "isinstance", "issubclass", "callable", "hasattr", "all", "any", "bool", "type", "id",
    "eval", "exec", "getattr", "setattr", "vars", "dir", "globals", "locals", "compile",
    "__import__", "open",
})  # fmt: skip


_BUILTIN_NAMES = frozenset(dir(builtins))


class BadReference(ValueError):
    """A reference the code verifier cannot use (its result is `bad_reference`, unjudged)."""


@dataclass(frozen=True)
class IOTest:
    """One stdin/stdout test case."""

    stdin: str
    stdout: str


@dataclass(frozen=True)
class Check:
    """One call evaluated in the sandbox and judged here.

    `call` is sent as is: ``{"expr": source}`` or ``{"args": plain}`` (APPS `fn_name` calls).
    `op`: eq, ne, is, is_not, truthy, falsy, isclose, abs_lt, abs_le, apps.
    """

    call: dict[str, str]
    op: str
    expected: Any = None
    tolerance: tuple[tuple[str, float], ...] = ()
    text: str = ""
    #: The compared value is not a direct call of the candidate with literal arguments.
    fakeable: bool = False

    def passes(self, value: Any) -> bool:
        """Whether the returned value satisfies this check (never raises)."""
        try:
            return bool(_OPS[self.op](value, self.expected, dict(self.tolerance)))
        except (TypeError, ValueError, OverflowError, ArithmeticError):
            return False


@dataclass(frozen=True)
class CallTest:
    """Checks run in one process, in order: one assertion string, one APPS case, one check()."""

    checks: tuple[Check, ...]

    @property
    def fakeable(self) -> bool:
        """Whether some check's value comes from code other than a direct candidate call."""
        return any(check.fakeable for check in self.checks)


@dataclass(frozen=True)
class StatementTest:
    """Assertion code run as is inside the sandbox (fakeable by the program)."""

    source: str
    fakeable: bool = True


Test = IOTest | CallTest | StatementTest


@dataclass(frozen=True)
class CodeReference:
    """What a completion's program is checked against."""

    language: str
    tests: tuple[Test, ...]
    prelude: str = ""
    setup: str = ""
    fn_name: str | None = None

    @property
    def total(self) -> int:
        """Number of tests."""
        return len(self.tests)

    @property
    def fakeable(self) -> bool:
        """Whether some test could be passed by a program that does not compute the answer."""
        return any(getattr(t, "fakeable", False) for t in self.tests)


def reference_from_record(record: Mapping[str, Any]) -> dict[str, Any] | Any:
    """The code reference inside one input record (KeyError when it holds none).

    Top-level keys of any supported format, else a ``reference`` or ``ground_truth`` field
    (a dict or JSON string). Not validated here: `parse_reference` judges it at verify time,
    so that an unusable one becomes that row's `bad_reference`, not a lost batch.
    """
    picked = {key: record[key] for key in REFERENCE_KEYS if key in record}
    if set(picked) - {"language"}:
        return picked
    for key in _CONTAINER_KEYS:
        if key in record and record[key] is not None:
            inner = record[key]
            if "language" in picked and isinstance(inner, Mapping):
                return {"language": picked["language"], **inner}
            return inner
    raise KeyError("tests")


def parse_reference(reference: Any, languages: tuple[str, ...] = ("python", "cpp")) -> CodeReference:
    """Validate a reference in any supported format; raises BadReference when unusable."""
    if isinstance(reference, CodeReference):
        return reference
    ref = _as_mapping(reference, "code reference")
    language = ref.get("language", "python")
    if language not in languages:
        raise BadReference(f"unknown language {language!r}; choose one of {', '.join(languages)}")
    if "input_output" in ref:  # an APPS/TACO row keeps its tests in a JSON string
        ref = {**ref, **_as_mapping(ref["input_output"], "'input_output'")}
    call_based = ref.get("fn_name") not in (None, "")
    if call_based or any(k in ref for k in ("asserts", "test_list", "entry_point")):
        if language not in CALL_LANGUAGES:
            raise BadReference(f"function and assertion tests need Python, not {language!r}")
    if call_based and ("inputs" in ref or "outputs" in ref):
        return _apps_calls(ref, language)
    if "tests" in ref:
        return CodeReference(language, _io_tests(ref["tests"]))
    if "asserts" in ref:
        return _asserts(ref["asserts"], _text(ref.get("setup"), "setup"), language, "asserts")
    if "inputs" in ref or "outputs" in ref:
        return CodeReference(language, _io_pairs(ref, "inputs", "outputs"))
    if "input" in ref or "output" in ref:
        return CodeReference(language, _io_pairs(ref, "input", "output"))
    if "test_list" in ref:
        imports = ref.get("test_imports") or []
        if not isinstance(imports, list) or not all(isinstance(i, str) for i in imports):
            raise BadReference("'test_imports' must be a list of strings")
        setup = "\n".join([*imports, _text(ref.get("test_setup_code"), "test_setup_code")])
        return _asserts(ref["test_list"], setup, language, "test_list")
    if "test" in ref and "entry_point" in ref:
        return _humaneval(ref, language)
    raise BadReference(
        "code reference needs tests: 'tests', 'asserts', APPS 'inputs'/'outputs' (with "
        "'fn_name' for call-based), 'input'/'output', MBPP 'test_list' or HumanEval "
        f"'test' + 'entry_point' (got keys: {', '.join(sorted(map(str, ref))) or 'none'})"
    )


# ---- formats --------------------------------------------------------------------------------------
def _as_mapping(value: Any, what: str) -> Mapping[str, Any]:
    if isinstance(value, (str, bytes)):
        try:
            value = json.loads(value)
        except ValueError as err:
            raise BadReference(f"{what} is a string but not JSON ({err})") from None
    if not isinstance(value, Mapping):
        raise BadReference(f"{what} must be a dict (or its JSON), got {type(value).__name__}")
    return value


def _text(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadReference(f"{what!r} must be a string, got {type(value).__name__}")
    return value


def _io_tests(tests: Any) -> tuple[IOTest, ...]:
    if not isinstance(tests, list) or not tests:
        raise BadReference("'tests' must be a non-empty list")
    parsed = []
    for i, test in enumerate(tests):
        if not isinstance(test, Mapping) or not isinstance(test.get("stdout"), str):
            raise BadReference(f"test {i} must be a dict with a string 'stdout'")
        stdin = test.get("stdin", "")
        if not isinstance(stdin, str):
            raise BadReference(f"test {i}: 'stdin' must be a string")
        parsed.append(IOTest(stdin, test["stdout"]))
    return tuple(parsed)


def _lines(value: Any, what: str) -> str:
    """APPS and CodeContests store a test's text as a string or a list of lines."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(value)
    raise BadReference(f"{what} must be a string or a list of strings")


def _pairs(ref: Mapping[str, Any], ins: str, outs: str) -> list[tuple[Any, Any]]:
    inputs, outputs = ref.get(ins), ref.get(outs)
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise BadReference(f"{ins!r} and {outs!r} must both be lists")
    if not inputs or len(inputs) != len(outputs):
        raise BadReference(
            f"{ins!r} and {outs!r} must be non-empty and of equal length "
            f"(got {len(inputs)} and {len(outputs)})"
        )
    return list(zip(inputs, outputs, strict=True))


def _io_pairs(ref: Mapping[str, Any], ins: str, outs: str) -> tuple[IOTest, ...]:
    return tuple(
        IOTest(_lines(i, f"{ins}[{n}]"), _lines(o, f"{outs}[{n}]"))
        for n, (i, o) in enumerate(_pairs(ref, ins, outs))
    )


def _apps_calls(ref: Mapping[str, Any], language: str) -> CodeReference:
    fn_name = ref["fn_name"]
    if not isinstance(fn_name, str) or not fn_name.isidentifier():
        raise BadReference(f"'fn_name' must be a function name, got {fn_name!r}")
    tests = []
    for n, (args, expected) in enumerate(_pairs(ref, "inputs", "outputs")):
        if not isinstance(args, list):
            raise BadReference(f"inputs[{n}] must be the list of arguments for {fn_name}()")
        call = {"args": encode_plain(args)}
        tests.append(CallTest((Check(call, "apps", expected, text=f"{fn_name}(*inputs[{n}])"),)))
    return CodeReference(language, tuple(tests), prelude=APPS_PRELUDE, fn_name=fn_name)


def _asserts(items: Any, setup: str, language: str, what: str) -> CodeReference:
    if not isinstance(items, list) or not items or not all(isinstance(a, str) for a in items):
        raise BadReference(f"{what!r} must be a non-empty list of strings")
    defined = _defined_names(setup)
    return CodeReference(language, tuple(assertion_test(a, defined) for a in items), setup=setup)


def _humaneval(ref: Mapping[str, Any], language: str) -> CodeReference:
    test, entry = _text(ref["test"], "test"), ref["entry_point"]
    if not isinstance(entry, str) or not entry.isidentifier():
        raise BadReference(f"'entry_point' must be a function name, got {entry!r}")
    try:
        module = pyast.parse(test)
    except SyntaxError as err:
        raise BadReference(f"'test' is not valid Python ({err.msg}, line {err.lineno})") from None
    except (ValueError, RecursionError, MemoryError) as err:
        raise BadReference(f"'test' is not valid Python ({err})") from None
    check = next((n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "check"),
                 None)
    if check is None:
        raise BadReference("HumanEval 'test' defines no check(candidate) function")
    rest = ast.Module([n for n in module.body if n is not check], type_ignores=[])
    try:
        setup = ast.unparse(rest) + f"\ncandidate = {entry}\n"
        checks = _checks_from_statements(check.body, _defined_in(rest.body))
    except RecursionError:
        checks = None
    if checks is not None:
        return CodeReference(language, (CallTest(checks),), setup=setup)
    return CodeReference(language, (StatementTest(f"check({entry})"),), setup=test)


# ---- assertions -> checks -----------------------------------------------------------------------
def assertion_test(source: str, defined: frozenset[str] = frozenset()) -> CallTest | StatementTest:
    """A function test for assertions of a supported form, else the statement itself;
    `defined`: names the reference's setup binds (never the candidate)."""
    try:
        checks = _checks_from_statements(pyast.parse(source).body, defined)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        checks = None  # a syntax error fails in the sandbox too, and is reported there
    return CallTest(checks) if checks is not None else StatementTest(source)


def _defined_names(setup: str) -> frozenset[str]:
    """Top-level names a setup script binds (empty when it does not parse: it fails in the
    sandbox then, and every check of the item fails with it)."""
    try:
        return _defined_in(pyast.parse(setup).body)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset()


def _defined_in(body: list[ast.stmt]) -> frozenset[str]:
    names: set[str] = set()
    for node in body:
        for sub in ast.walk(node):
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(sub.name)
            elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                names.add(sub.id)
            elif isinstance(sub, ast.alias):
                names.add((sub.asname or sub.name).split(".")[0])
    return frozenset(names)


def _direct_call(node: ast.expr, defined: frozenset[str]) -> bool:
    """Whether `node` is ``f(literal, ..., k=literal)`` with `f` the candidate: a plain name
    that is no builtin and not bound by the reference's setup."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        return False
    name = node.func.id
    if name in _BUILTIN_NAMES or name in defined:
        return False
    if any(isinstance(arg, ast.Starred) or not _literal(arg)[0] for arg in node.args):
        return False
    return all(kw.arg is not None and _literal(kw.value)[0] for kw in node.keywords)


def _checks_from_statements(
    body: list[ast.stmt], defined: frozenset[str] = frozenset()
) -> tuple[Check, ...] | None:
    checks = []
    for node in body:
        if isinstance(node, ast.Pass) or (
            isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        ):
            continue  # docstrings, pass
        if not isinstance(node, ast.Assert):
            return None
        check = _check(node.test)
        if check is None:
            return None
        expr = pyast.parse(check.call["expr"], mode="eval").body
        if not _direct_call(expr, defined):
            check = dataclasses.replace(check, fakeable=True)
        checks.append(check)
    return tuple(checks) if checks else None


def _check(test: ast.expr) -> Check | None:
    text = ast.unparse(test)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, op, right = test.left, test.ops[0], test.comparators[0]
        if isinstance(op, (ast.Eq, ast.NotEq)):
            name = "eq" if isinstance(op, ast.Eq) else "ne"
            for expr, lit in ((left, right), (right, left)):
                found, expected = _literal(lit)
                if found and _value_expr(expr):
                    return Check({"expr": ast.unparse(expr)}, name, expected, text=text)
            return None
        if isinstance(op, (ast.Is, ast.IsNot)) and isinstance(right, ast.Constant) and (
            right.value is None or isinstance(right.value, bool)
        ) and _value_expr(left):
            name = "is" if isinstance(op, ast.Is) else "is_not"
            return Check({"expr": ast.unparse(left)}, name, right.value, text=text)
        if isinstance(op, (ast.Lt, ast.LtE)):
            return _abs_check(left, op, right, text)
        return None
    if isinstance(test, ast.Call):
        isclose = _isclose_check(test, text)
        if isclose is not None or _is_isclose(test.func):
            return isclose
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        if _value_expr(test.operand):
            return Check({"expr": ast.unparse(test.operand)}, "falsy", text=text)
        return None
    if _value_expr(test) and not isinstance(test, ast.Constant):
        return Check({"expr": ast.unparse(test)}, "truthy", text=text)
    return None


def _abs_check(left: ast.expr, op: ast.cmpop, right: ast.expr, text: str) -> Check | None:
    # abs(E - L) < T  or  abs(L - E) <= T
    found, bound = _literal(right)
    if not (found and isinstance(left, ast.Call) and isinstance(left.func, ast.Name)
            and left.func.id == "abs" and len(left.args) == 1 and not left.keywords):
        return None
    inner = left.args[0]
    if not (isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Sub)):
        return None
    for expr, lit in ((inner.left, inner.right), (inner.right, inner.left)):
        known, expected = _literal(lit)
        if known and _value_expr(expr):
            name = "abs_lt" if isinstance(op, ast.Lt) else "abs_le"
            return Check({"expr": ast.unparse(expr)}, name, expected, (("bound", bound),), text)
    return None


def _is_isclose(func: ast.expr) -> bool:
    return (isinstance(func, ast.Name) and func.id == "isclose") or (
        isinstance(func, ast.Attribute) and func.attr == "isclose"
        and isinstance(func.value, ast.Name) and func.value.id == "math"
    )


def _isclose_check(call: ast.Call, text: str) -> Check | None:
    if not _is_isclose(call.func) or len(call.args) != 2:
        return None
    tolerance = []
    for keyword in call.keywords:
        found, value = _literal(keyword.value)
        if keyword.arg not in ("rel_tol", "abs_tol") or not found:
            return None
        tolerance.append((keyword.arg, value))
    for expr, lit in ((call.args[0], call.args[1]), (call.args[1], call.args[0])):
        found, expected = _literal(lit)
        if found and _value_expr(expr):
            return Check({"expr": ast.unparse(expr)}, "isclose", expected, tuple(tolerance), text)
    return None


def _literal(node: ast.expr) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _value_expr(node: ast.expr) -> bool:
    """Whether evaluating `node` in the program's process yields a value the program chose,
    not a verdict: no comparisons and no predicate builtins (an object can answer those)."""
    for sub in ast.walk(node):
        if isinstance(sub, (ast.Compare, ast.BoolOp, ast.IfExp, ast.NamedExpr, ast.Lambda,
                            ast.Await, ast.Yield, ast.YieldFrom)):
            return False
        if isinstance(sub, ast.UnaryOp) and isinstance(sub.op, ast.Not):
            return False
        if isinstance(sub, ast.Name) and sub.id in _PREDICATES:
            return False
        if isinstance(sub, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            if any(cond for gen in sub.generators for cond in gen.ifs):
                return False  # a filter is a truth test
    return True


def _apps_match(value: Any, expected: Any, _tol: dict[str, float]) -> bool:
    # APPS's own rule: tuples count as lists, and an expected value may come wrapped in a list.
    # Only a one-element list is a wrapper: APPS also took [2, 4]'s first element, so a program
    # returning 2 passed a test that expects [2, 4].
    if isinstance(value, tuple):
        value = list(value)
    if value == expected:
        return True
    if isinstance(expected, list) and len(expected) == 1:
        if value == expected[0]:
            return True
        if isinstance(value, list) and value and isinstance(value[0], tuple):
            return [list(v) for v in value] == expected[0]
    return False


_OPS = {
    "eq": lambda v, e, t: v == e,
    "ne": lambda v, e, t: v != e,
    "is": lambda v, e, t: v is e,
    "is_not": lambda v, e, t: v is not e,
    "truthy": lambda v, e, t: bool(v),
    "falsy": lambda v, e, t: not v,
    "isclose": lambda v, e, t: math.isclose(v, e, **t),
    "abs_lt": lambda v, e, t: abs(v - e) < t["bound"],
    "abs_le": lambda v, e, t: abs(v - e) <= t["bound"],
    "apps": _apps_match,
}

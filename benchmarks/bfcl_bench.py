"""veristep's tool-call verifier side by side with BFCL's own AST checker, on BFCL's own data.

BFCL (`pip install bfcl-eval`) is not a dependency of veristep and pins packages that conflict
with ours (numpy, cohere ...), so it lives in its own virtual environment: pass its interpreter
with --bfcl-python (default: this interpreter). Its AST checker needs the model-handler SDKs it
imports but not torch: `pip install --no-deps bfcl-eval==2026.3.23`, then its requirements
except sentence-transformers and faiss-cpu, plus soundfile. This script runs itself there
twice, as a child process that exchanges JSON:
  1. `--bfcl-side load`: read BFCL's shipped questions, function docs and possible answers
     from the installed package (never copied into this repository);
  2. `--bfcl-side check`: decode and judge every synthesised case with BFCL's own model
     handlers (`QwenFCHandler.decode_ast` for hermes `<tool_call>` JSON, `QwenHandler` for
     pythonic `[f(a=1)]`) and `ast_checker`, timing decode + check in that process.
Cases are built here from each question's possible answer: correct calls (first allowed
values, last allowed values, every allowed value in between one parameter at a time, optional
parameters omitted or sent as "", parallel calls reversed) and wrong ones (a value outside the
allowed set, a wrong type, an integer sent as a float, a missing required parameter, an
optional parameter left out where the answer does not list "", a parameter the answer does not
name sent with its schema default, an extra parameter, a wrong function name, one call too many or too
few, no call).
The cases are ours, the data and the judge are BFCL's: agreement measures conformance with
BFCL's rules, not correctness of either.

Reading rule: a difference counts against veristep unless it falls
under a documented difference (docs/verifiers.md, "Side by side with BFCL's own checker");
veristep accepting a call that BFCL rejects is documented where BFCL's greedy pairing misses a
valid assignment (issue 31's target excuses only these). The timed pass and the whole-process
run use veristep's defaults, which follow BFCL's rules for defaults and integers. Two more
passes, untimed, show the opt-ins, each counted apart: schema_defaults=True (a parameter's
schema default stands in for it: left out where the answer expects the default, or sent with
the default where the answer does not name it) and integer_floats=True (2.0 is an integer).

Prints tables and writes JSON to benchmarks/results/bfcl_bench.json.
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: BFCL's AST categories: each case is one turn judged against a possible answer.
CATEGORIES = (
    "simple_python", "multiple", "parallel", "parallel_multiple", "simple_java",
    "simple_javascript", "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple",
)
FORMATS = ("hermes", "pythonic")
#: BFCL model names whose handlers decode each format; underscore_to_dot is False for both,
#: so dotted function names are compared as written.
BFCL_MODELS = {"hermes": "Qwen/Qwen3-0.6B-FC", "pythonic": "Qwen/Qwen3-0.6B"}

# ------------------------------------------------------------------------------- BFCL side


def _bfcl_load(categories: list[str]) -> list[dict[str, Any]]:
    """BFCL's questions with their function docs and possible answers, from the package."""
    from importlib import resources

    data = resources.files("bfcl_eval") / "data"
    version = next(p.name.split("_")[1] for p in data.iterdir() if p.name.startswith("BFCL_v"))
    out = []
    for cat in categories:
        name = f"BFCL_{version}_{cat}.json"
        questions = [json.loads(line) for line in (data / name).read_text().splitlines() if line]
        answers = {a["id"]: a["ground_truth"]
                   for a in map(json.loads, (data / "possible_answer" / name).read_text().splitlines())}
        for q in questions:
            out.append({"id": q["id"], "category": cat, "function": q["function"],
                        "answer": answers[q["id"]]})
    return out


def _bfcl_check(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """Judge every case with BFCL's decoders and ast_checker; verdicts plus the timing."""
    from bfcl_eval.constants.enums import Language, ReturnFormat
    from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
    from bfcl_eval.utils import is_function_calling_format_output

    handlers = {}
    for fmt, model in BFCL_MODELS.items():
        config = MODEL_CONFIG_MAPPING[model]
        handlers[fmt] = config.model_handler(model_name=config.model_name, temperature=0.0,
                                             registry_name=model, is_fc_model=config.is_fc_model)
    languages = {"java": (Language.JAVA, ReturnFormat.JAVA),
                 "javascript": (Language.JAVASCRIPT, ReturnFormat.JAVASCRIPT)}
    verdicts: list[dict[str, Any]] = []
    start, cpu = time.perf_counter(), time.process_time()
    for case in cases:
        lang, ret = languages.get(case["category"].rsplit("_", 1)[-1],
                                  (Language.PYTHON, ReturnFormat.PYTHON))
        model = BFCL_MODELS[case["format"]].replace("/", "_")
        try:
            decoded = handlers[case["format"]].decode_ast(case["bfcl_text"], ret, False)
        except Exception as err:  # noqa: BLE001 - BFCL scores a decode failure as wrong
            verdicts.append({"valid": False, "error_type": "ast_decoder:decoder_failed",
                             "error": str(err)[:200]})
            continue
        if not is_function_calling_format_output(decoded):
            verdicts.append({"valid": False, "error_type": "ast_decoder:decoder_wrong_output_format"})
            continue
        try:
            res = ast_checker(case["function"], decoded, case["answer"], lang, case["category"], model)
        except Exception as err:  # noqa: BLE001 - a checker crash: reported as such
            res = {"valid": False, "error_type": f"checker_crash:{type(err).__name__}",
                   "error": [str(err)[:200]]}
        verdicts.append({"valid": bool(res["valid"]), "error_type": res.get("error_type", ""),
                         "error": str(res.get("error", ""))[:300]})
    seconds = time.perf_counter() - start
    return {"verdicts": verdicts, "seconds": seconds, "cpu_seconds": time.process_time() - cpu}


def _bfcl_side(mode: str, path: str) -> None:
    payload = json.loads(Path(path).read_text())
    result = _bfcl_load(payload["categories"]) if mode == "load" else _bfcl_check(payload["cases"])
    Path(path).write_text(json.dumps(result))


def _run_bfcl(python: str, mode: str, payload: dict[str, Any], workdir: Path) -> Any:
    path = workdir / f"bfcl_{mode}.json"
    path.write_text(json.dumps(payload))
    proc = subprocess.run([python, os.path.abspath(__file__), "--bfcl-side", mode, str(path)],
                          capture_output=True, text=True, cwd=workdir)
    if proc.returncode != 0:
        raise SystemExit(f"BFCL side ({mode}) failed:\n{proc.stderr[-3000:]}")
    return json.loads(path.read_text())


# ------------------------------------------------------------------------------- case synthesis

_OMIT = ""


def _allowed(values: list[Any]) -> list[Any]:
    return [v for v in values if not (isinstance(v, str) and v == _OMIT)]


def _first_call(answer: dict[str, Any], pick: str) -> dict[str, Any] | None:
    """A concrete call from one possible answer: `pick` is first, last or omit."""
    ((name, params),) = answer.items()
    args: dict[str, Any] = {}
    for param, values in params.items():
        allowed = _allowed(values)
        optional = len(allowed) < len(values)
        if (pick == "omit" and optional) or not allowed:
            continue
        value = allowed[-1] if pick == "last" else allowed[0]
        args[param] = _concrete(value, pick)
    return {"name": name, "arguments": args}


def _concrete(value: Any, pick: str) -> Any:
    """Nested dict possible answers list allowed values per key; pick one of each."""
    if isinstance(value, dict):
        out = {}
        for key, sub in value.items():
            if isinstance(sub, list):
                allowed = _allowed(sub)
                if not allowed:
                    continue
                out[key] = _concrete(allowed[-1] if pick == "last" else allowed[0], pick)
            else:
                out[key] = sub
        return out
    if isinstance(value, list):
        return [_concrete(v, pick) if isinstance(v, dict) else v for v in value]
    return value


def _wrong_value(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 7
    if isinstance(value, float):
        return value * 3 + 1.5
    if isinstance(value, str):
        return value + " zq"
    if isinstance(value, list):
        return value + [value[0]] if value else ["zq"]
    if isinstance(value, dict):
        return {**value, "zq_key": 1}
    return "zq"


def _wrong_type(value: Any) -> Any:
    return 17 if isinstance(value, str) else "zq text"


def _param_types(function: list[dict[str, Any]], name: str) -> tuple[dict[str, Any], list[str]]:
    for fn in function:
        if fn["name"] == name:
            params = fn.get("parameters") or {}
            return params.get("properties") or {}, params.get("required") or []
    return {}, []


def build_cases(question: dict[str, Any], rng: random.Random) -> list[dict[str, Any]]:
    """Correct and wrong calls for one question, each with the verdict we intend."""
    answer, function = question["answer"], question["function"]
    variants: list[tuple[str, list[dict[str, Any]]]] = []
    first = [_first_call(a, "first") for a in answer]
    variants.append(("correct_first", first))
    last = [_first_call(a, "last") for a in answer]
    if last != first:
        variants.append(("correct_other_allowed", last))
    omit = [_first_call(a, "omit") for a in answer]
    if omit != first:
        variants.append(("correct_omit_optional", omit))
    explicit = copy.deepcopy(first)
    changed = False
    for call, a in zip(explicit, answer, strict=True):
        for param, values in next(iter(a.values())).items():
            if _OMIT in values and param not in call["arguments"]:
                continue
            if _OMIT in values and isinstance(call["arguments"].get(param), str):
                call["arguments"][param], changed = _OMIT, True
    if changed:
        variants.append(("correct_explicit_empty", explicit))
    if len(first) > 1:
        variants.append(("correct_reordered", list(reversed(first))))
    for index, a in enumerate(answer):  # every other allowed value, one parameter at a time
        for param, values in next(iter(a.values())).items():
            for value in _allowed(values)[1:-1]:
                middle = copy.deepcopy(first)
                middle[index]["arguments"][param] = _concrete(value, "first")
                variants.append(("correct_middle_allowed", middle))
    # An optional parameter whose possible answer does not list "" left out: wrong by BFCL's
    # rule. Its own generator, so the random picks of the variants below stay as they were.
    pick = random.Random(f"{question['id']}/omit")
    optional = [(i, p) for i, a in enumerate(answer) for p, values in next(iter(a.values())).items()
                if _OMIT not in values and p in first[i]["arguments"]
                and p not in _param_types(function, first[i]["name"])[1]]
    if optional:
        index, param = pick.choice(optional)
        bad = copy.deepcopy(first)
        del bad[index]["arguments"][param]
        variants.append(("wrong_omit_optional", bad))
    # An integer sent as a float (2 -> 2.0): BFCL's (and Python's) type error, JSON Schema's integer.
    integers = [(i, p) for i, call in enumerate(first) for p, v in call["arguments"].items()
                if type(v) is int and (_param_types(function, call["name"])[0].get(p) or {}).get("type")
                in ("integer", "int")] if not question["category"].endswith(("_java", "_javascript")) else []
    if integers:
        index, param = pick.choice(integers)
        bad = copy.deepcopy(first)
        bad[index]["arguments"][param] = float(bad[index]["arguments"][param])
        variants.append(("wrong_float_for_int", bad))
    # A parameter the answer does not name, sent with its schema default: BFCL's "unexpected".
    unnamed = [(i, p, spec["default"]) for i, (a, call) in enumerate(zip(answer, first, strict=True))
               for p, spec in _param_types(function, call["name"])[0].items()
               if p not in next(iter(a.values())) and isinstance(spec, dict) and "default" in spec]
    if unnamed:
        index, param, value = pick.choice(unnamed)
        bad = copy.deepcopy(first)
        bad[index]["arguments"][param] = value
        variants.append(("wrong_unnamed_default", bad))
    # wrong calls: one change to a random call of the first correct answer
    target = rng.randrange(len(first))
    call = first[target]
    props, required = _param_types(function, call["name"])
    present = [p for p in call["arguments"]]
    if present:
        p = rng.choice(present)
        bad = copy.deepcopy(first)
        bad[target]["arguments"][p] = _wrong_value(call["arguments"][p])
        variants.append(("wrong_value", bad))
        bad = copy.deepcopy(first)
        bad[target]["arguments"][p] = _wrong_type(call["arguments"][p])
        variants.append(("wrong_type", bad))
    req = [p for p in required if p in call["arguments"]]
    if req:
        bad = copy.deepcopy(first)
        del bad[target]["arguments"][rng.choice(req)]
        variants.append(("wrong_missing_required", bad))
    bad = copy.deepcopy(first)
    bad[target]["arguments"]["zq_extra"] = 1
    variants.append(("wrong_extra_param", bad))
    bad = copy.deepcopy(first)
    bad[target]["name"] = call["name"] + "_zq"
    variants.append(("wrong_function_name", bad))
    variants.append(("wrong_extra_call", first + [copy.deepcopy(first[0])]))
    if len(first) > 1:
        variants.append(("wrong_missing_call", first[:-1]))
    variants.append(("wrong_no_call", []))
    return [{"variant": v, "calls": calls} for v, calls in variants]


# ------------------------------------------------------------------------------- rendering


def render_hermes(calls: list[dict[str, Any]]) -> str:
    """Hermes / Qwen `<tool_call>` blocks, one JSON object each (what QwenFCHandler reads)."""
    if not calls:
        return "I cannot help with that."
    return "\n".join(f"<tool_call>\n{json.dumps(c)}\n</tool_call>" for c in calls)


def render_pythonic(calls: list[dict[str, Any]]) -> str | None:
    """`[f(a=1), g(b='x')]`; None when a value has no Python literal (NaN, infinity)."""
    if not calls:
        return "I cannot help with that."
    parts = []
    for c in calls:
        args = ", ".join(f"{k}={v!r}" for k, v in c["arguments"].items())
        parts.append(f"{c['name']}({args})")
    text = "[" + ", ".join(parts) + "]"
    return text if "nan" not in text and "inf" not in text else None


def _java_literal(value: Any, kind: str) -> Any:
    """BFCL's Java/JavaScript handlers read every value as its source text (typed literals)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"{value}{ {'long': 'L', 'float': 'f', 'Bigint': 'n'}.get(kind, '')}"
    if isinstance(value, str):
        return value
    return None  # collections need language-specific constructors; such cases are skipped


def bfcl_text(calls: list[dict[str, Any]], fmt: str, category: str,
              function: list[dict[str, Any]]) -> str | None:
    """The same calls as BFCL's handler for this format and language expects them."""
    if category.endswith(("_java", "_javascript")):
        if fmt != "hermes":
            return None
        converted = []
        for c in calls:
            props = _param_types(function, c["name"])[0]
            java = category.endswith("_java")
            args = {k: _java_literal(v, (props.get(k) or {}).get("type", "") if java else
                                     {"float": "", "Bigint": "Bigint"}.get((props.get(k) or {}).get("type", ""), ""))
                    for k, v in c["arguments"].items()}
            if any(v is None for v in args.values()):
                return None
            converted.append({"name": c["name"], "arguments": args})
        return render_hermes(converted)
    return render_hermes(calls) if fmt == "hermes" else render_pythonic(calls)


def make_cases(questions: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """Every question's variants in every format both sides can read."""
    rng = random.Random(seed)
    cases = []
    for q in questions:
        for variant in build_cases(q, rng):
            for fmt in FORMATS:
                ours = render_hermes(variant["calls"]) if fmt == "hermes" else render_pythonic(variant["calls"])
                theirs = bfcl_text(variant["calls"], fmt, q["category"], q["function"])
                if ours is None or theirs is None:
                    continue
                cases.append({"id": q["id"], "category": q["category"], "variant": variant["variant"],
                              "format": fmt, "text": ours, "bfcl_text": theirs,
                              "function": q["function"], "answer": q["answer"]})
    return cases


# ------------------------------------------------------------------------------- veristep side


def reference(case: dict[str, Any]) -> dict[str, Any]:
    """The veristep reference for a case: BFCL's function docs and possible answer as shipped."""
    ref = {"tools": case["function"], "expected": case["answer"], "format": case["format"]}
    language = case["category"].rsplit("_", 1)[-1]
    if language in ("java", "javascript"):  # arguments are that language's literals as text
        ref["language"] = language
    return ref


def veristep_loop(cases: list[dict[str, Any]], **options: Any) -> tuple[list[dict[str, Any]], float, float]:
    """verify() per case in this process (verdicts, seconds, CPU seconds); a reference veristep
    refuses is a verdict too. `options` go to the verifier."""
    from veristep.verifiers.tools import ToolCallVerifier

    verifier = ToolCallVerifier(workers=0, **options)
    out = []
    start, cpu = time.perf_counter(), time.process_time()
    for case in cases:
        r = verifier.verify(case["text"], reference(case))
        out.append({"valid": r.correct, "status": r.status.value, "detail": r.detail[:200]})
    return out, time.perf_counter() - start, time.process_time() - cpu


def veristep_cli(cases: list[dict[str, Any]], workers: int, workdir: Path) -> tuple[list[str], float, float]:
    """`veristep verify tools --workers N` on a JSONL of the cases, timed as a whole process
    (statuses, seconds, CPU seconds of the process and its workers)."""
    path = workdir / "cases.jsonl"
    with path.open("w") as fh:
        for case in cases:
            fh.write(json.dumps({"completion": case["text"], **reference(case)}) + "\n")
    out = workdir / "out.jsonl"
    cli = [sys.executable, "-m", "veristep.verifiers.cli"]
    exe = Path(sys.executable).with_name("veristep")
    if exe.exists():
        cli = [str(exe)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([*cli, "verify", "tools", str(path), "--workers", str(workers), "-o", str(out),
                           "--no-progress", "--batch-size", "1024"], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the workers are reaped by the CLI
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"veristep verify failed:\n{proc.stderr[-3000:]}")
    statuses = [json.loads(line).get("veristep", {}).get("status", "error")
                for line in out.read_text(encoding="utf-8").splitlines()]
    return statuses, seconds, cpu


# ------------------------------------------------------------------------------- report

#: Documented differences (docs/verifiers.md, "Differences from BFCL"), by the label we give them.
DOCUMENTED = {
    "schema": "veristep holds calls and expected values to the function's JSON Schema (enum, type, "
              "null); BFCL checks types loosely and enums not at all",
    "pairing": "parallel calls: veristep pairs calls with expected calls by a maximum matching; "
               "BFCL's greedy first-fit pairing misses valid assignments",
    "default": "an optional parameter left out whose expected value is the schema's default, or sent "
               "with its default where the answer does not name it: veristep accepts (the call does the "
               "same), BFCL rejects; only under the opt-in schema_defaults=True (by default veristep "
               "rejects too)",
    "float": "2.0 for an integer parameter: an integer to JSON Schema and to veristep under the "
             "opt-in integer_floats=True, a float to BFCL and to veristep by default",
}


#: The verifier's options that leave BFCL's rules, each judged in an untimed pass of its own.
OPT_INS = {"schema_defaults=True": {"schema_defaults": True}, "integer_floats=True": {"integer_floats": True}}


def classify(case: dict[str, Any], bfcl: dict[str, Any], ours: dict[str, Any]) -> str:
    """The documented difference a disagreement falls under, or "" (undocumented)."""
    if bfcl["valid"] and not ours["valid"] and ours["status"] in ("schema_violation", "bad_reference"):
        return "schema"
    if (ours["valid"] and not bfcl["valid"] and case["variant"] == "correct_reordered"
            and bfcl.get("error_type", "").endswith("cannot_find_match")):
        return "pairing"
    if ours["valid"] and not bfcl["valid"] and (
            (case["variant"] == "wrong_omit_optional"
             and "not provided and not marked as optional" in bfcl.get("error", ""))
            or (case["variant"] == "wrong_unnamed_default" and "Unexpected parameter" in bfcl.get("error", ""))):
        return "default"
    if (ours["valid"] and not bfcl["valid"] and case["variant"] == "wrong_float_for_int"
            and "got float" in bfcl.get("error", "")):
        return "float"
    return ""



def _table(title: str, rows: list[list[Any]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    line = lambda r: "  ".join(str(x).ljust(w) for x, w in zip(r, widths, strict=True))  # noqa: E731
    return "\n".join([title, line(header), line(["-" * w for w in widths]), *map(line, rows)])


def agreement(cases: list[dict[str, Any]], bfcl: list[dict[str, Any]], ours: list[dict[str, Any]],
              key: str) -> list[list[Any]]:
    """Per value of `key`: cases, BFCL accepts, veristep accepts, agreement, veristep-only accepts."""
    groups: dict[str, list[int]] = collections.defaultdict(list)
    for i, case in enumerate(cases):
        groups[case[key]].append(i)
    rows = []
    for name in sorted(groups):
        idx = groups[name]
        agree = sum(bfcl[i]["valid"] == ours[i]["valid"] for i in idx)
        rows.append([name, len(idx), sum(bfcl[i]["valid"] for i in idx), sum(ours[i]["valid"] for i in idx),
                     f"{100 * agree / len(idx):.1f}%",
                     sum(ours[i]["valid"] and not bfcl[i]["valid"] for i in idx)])
    return rows


def _command(argv: list[str]) -> str:
    """The command line as run, with the BFCL interpreter's path (machine-specific) left out."""
    out, skip = ["benchmarks/bfcl_bench.py"], False
    for arg in argv[1:]:
        if skip:
            out.append("BFCL_VENV/bin/python")
            skip = False
        elif arg == "--bfcl-python":
            out.append(arg)
            skip = True
        elif arg.startswith("--bfcl-python="):
            out.append("--bfcl-python=BFCL_VENV/bin/python")
        else:
            out.append(arg)
    return " ".join(out)


def main() -> None:
    """Run the comparison; print tables; write JSON."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bfcl-python", default=sys.executable,
                    help="interpreter of a virtual environment with bfcl-eval installed (default: this one)")
    ap.add_argument("--categories", nargs="+", default=list(CATEGORIES), choices=CATEGORIES)
    ap.add_argument("--limit", type=int, default=0, help="at most N questions per category (0: all)")
    ap.add_argument("--workers", type=int, default=2, help="workers for the whole-process run (default 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-cli", action="store_true", help="skip the whole-process `veristep verify` run")
    ap.add_argument("--repeats", type=int, default=3,
                    help="timed runs of each side, interleaved; medians and ranges are reported (default 3)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "bfcl_bench.json"))
    ap.add_argument("--bfcl-side", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.bfcl_side:
        _bfcl_side(*args.bfcl_side)
        return

    with tempfile.TemporaryDirectory(prefix="bfcl_bench_") as tmp:
        workdir = Path(tmp)
        questions = _run_bfcl(args.bfcl_python, "load", {"categories": args.categories}, workdir)
        if args.limit:
            per: dict[str, int] = collections.Counter()
            questions = [q for q in questions if (per.update([q["category"]]) or per[q["category"]] <= args.limit)]
        cases = make_cases(questions, args.seed)
        print(f"{len(questions)} BFCL questions, {len(cases)} cases", flush=True)
        seconds: dict[str, list[float]] = {"bfcl_in_process": [], "veristep_loop": [], "veristep_cli": []}
        cpu: dict[str, list[float]] = {key: [] for key in seconds}
        loads: list[float] = []
        cli_differs = 0
        for _ in range(max(1, args.repeats)):  # interleaved, so load changes hit every side alike
            bfcl = _run_bfcl(args.bfcl_python, "check", {"cases": cases}, workdir)
            seconds["bfcl_in_process"].append(bfcl["seconds"])
            cpu["bfcl_in_process"].append(bfcl["cpu_seconds"])
            ours, loop_s, loop_cpu = veristep_loop(cases)
            seconds["veristep_loop"].append(loop_s)
            cpu["veristep_loop"].append(loop_cpu)
            if not args.skip_cli:
                loads.append(os.getloadavg()[0])
                statuses, cli_s, cli_cpu = veristep_cli(cases, args.workers, workdir)
                seconds["veristep_cli"].append(cli_s)
                cpu["veristep_cli"].append(cli_cpu)
                differ = (len(cases) if len(statuses) != len(cases) else
                          sum(s != o["status"] for s, o in zip(statuses, ours, strict=True)))
                cli_differs = max(cli_differs, differ)
                if differ:
                    print(f"warning: the CLI's statuses differ from verify()'s on {differ} cases",
                          file=sys.stderr)
    verdicts = bfcl["verdicts"]
    n = len(cases)
    # the opt-ins that leave BFCL's rules, one untimed pass each
    opt_ins: dict[str, dict[str, Any]] = {}
    for name, options in OPT_INS.items():
        theirs = veristep_loop(cases, **options)[0]
        opt_ins[name] = {
            "agreement": sum(b["valid"] == o["valid"] for b, o in zip(verdicts, theirs, strict=True)) / n,
            "veristep_only_accepts_by_label": dict(collections.Counter(
                classify(c, b, o) or "undocumented" for c, b, o in zip(cases, verdicts, theirs, strict=True)
                if o["valid"] and not b["valid"])),
        }
    agree = sum(b["valid"] == o["valid"] for b, o in zip(verdicts, ours, strict=True))
    only_ours = sum(o["valid"] and not b["valid"] for b, o in zip(verdicts, ours, strict=True))
    labels = [classify(c, b, o) if b["valid"] != o["valid"] else "" for c, b, o in zip(cases, verdicts, ours, strict=True)]
    documented = collections.Counter(label for label in labels if label)
    outside = n - sum(documented.values())
    only_ours_undocumented = sum(o["valid"] and not b["valid"] and not label
                                 for b, o, label in zip(verdicts, ours, labels, strict=True))
    bad_refs = sorted({c["id"] for c, o in zip(cases, ours, strict=True) if o["status"] == "bad_reference"})
    header = ["group", "cases", "BFCL ok", "veristep ok", "agreement", "veristep-only ok"]
    print(_table("\nper category", agreement(cases, verdicts, ours, "category"), header))
    print(_table("\nper variant", agreement(cases, verdicts, ours, "variant"), header))
    print(_table("\nper format", agreement(cases, verdicts, ours, "format"), header))
    names = {"bfcl_in_process": "BFCL decode + ast_checker, in-process",
             "veristep_loop": "veristep verify() loop, in-process",
             "veristep_cli": f"veristep verify tools --workers {args.workers}, whole process"}
    rates = [[names[key], f"{statistics.median(runs):.2f}", f"{min(runs):.2f}-{max(runs):.2f}",
              f"{n / statistics.median(runs):.0f}",
              f"{statistics.median(runs) / statistics.median(seconds['bfcl_in_process']):.1f}x",
              f"{statistics.median(cpu[key]):.2f}"]
             for key, runs in seconds.items() if runs]
    print(_table(f"\nthroughput ({len(seconds['bfcl_in_process'])} interleaved runs each)", rates,
                 ["run", "median s", "range s", "cases/s", "time vs BFCL", "CPU s, all processes"]))
    print(f"\nagreement {agree}/{n} = {100 * agree / n:.2f}%; outside documented differences "
          f"{agree}/{outside} = {100 * agree / outside:.2f}%")
    for label, count in documented.most_common():
        print(f"  documented difference {label!r}: {count} cases ({DOCUMENTED[label]})")
    only_ours_by_label = collections.Counter(label or "undocumented" for b, o, label in
                                             zip(verdicts, ours, labels, strict=True)
                                             if o["valid"] and not b["valid"])
    print(f"veristep accepts what BFCL rejects: {only_ours} "
          f"({', '.join(f'{k} {v}' for k, v in sorted(only_ours_by_label.items())) or 'none'}); "
          f"questions whose reference veristep refuses (bad_reference): {len(bad_refs)}; "
          f"1-min load average before each CLI run: {', '.join(f'{x:.2f}' for x in loads) or '-'}; "
          f"cases whose CLI status differs from verify()'s: {cli_differs}")
    for name, found in opt_ins.items():
        by_label = found["veristep_only_accepts_by_label"]
        print(f"opt-in {name} (untimed pass): agreement {100 * found['agreement']:.2f}%; veristep accepts "
              f"what BFCL rejects: {sum(by_label.values())} "
              f"({', '.join(f'{k} {v}' for k, v in sorted(by_label.items())) or 'none'})")
    disagreements = [
        {"id": c["id"], "category": c["category"], "variant": c["variant"], "format": c["format"],
         "text": c["text"][:400], "bfcl": b, "veristep": o, "documented": label}
        for c, b, o, label in zip(cases, verdicts, ours, labels, strict=True) if b["valid"] != o["valid"]
    ]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({
        "command": _command(sys.argv), "questions": len(questions), "cases": n,
        "agreement": agree / n, "agreement_outside_documented": agree / outside,
        "documented_differences": dict(documented), "veristep_only_accepts": only_ours,
        "veristep_only_accepts_undocumented": only_ours_undocumented,
        "veristep_only_accepts_by_label": dict(only_ours_by_label),
        "opt_ins": opt_ins,
        "bad_reference_questions": bad_refs,
        "per_category": agreement(cases, verdicts, ours, "category"),
        "per_variant": agreement(cases, verdicts, ours, "variant"),
        "per_format": agreement(cases, verdicts, ours, "format"),
        "seconds": seconds, "cpu_seconds": cpu, "median_seconds": {k: statistics.median(v) for k, v in seconds.items() if v},
        "cases_per_s": {k: n / statistics.median(v) for k, v in seconds.items() if v},
        "cpus": os.cpu_count(), "load_average_before_cli": loads, "cli_statuses_differ_from_loop": cli_differs,
        "disagreements_shown": min(len(disagreements), 300),
        "disagreements": disagreements[:300],
    }, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

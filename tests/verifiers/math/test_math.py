"""MathVerifier end to end: the labelled set, MATH500, threads, time limits, the protocol."""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from veristep.verifiers import Status, Verifier, get_verifier
from veristep.verifiers.math import CALL_GRACE_S, MathVerifier
from veristep.verifiers.math.normalize import normalize_answer

DATA = Path(__file__).resolve().parents[2] / "data"
LIMIT = 3.0
# A completion that makes sympy run for minutes (a sum, so the size guard cannot see it).
HANG = "$\\boxed{(10^{5}+10^{10})!}$"
# A pair only sympy can settle (the in-process fast path cannot), used to start the pool.
NEEDS_SYMPY = ("$\\boxed{x^2+2x+1}$", "(x+1)^2")


def _rows(name: str) -> list[dict]:
    with (DATA / name).open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


@pytest.fixture(scope="module")
def verifier():
    with MathVerifier(workers=2, timeout=LIMIT) as v:
        yield v


@pytest.fixture(scope="module")
def labelled(verifier: MathVerifier):
    rows = _rows("math_equiv_labels.jsonl")
    results = verifier.verify_batch([r["completion"] for r in rows], [r["answer"] for r in rows])
    strict = [i for i, r in enumerate(rows) if r.get("extraction") == "strict"]
    with MathVerifier(workers=1, timeout=LIMIT, extraction="strict") as marker_only:
        for i, res in zip(strict, marker_only.verify_batch([rows[i]["completion"] for i in strict],
                                                           [rows[i]["answer"] for i in strict]), strict=True):
            results[i] = res
    return rows, results


def test_labelled_set_is_large_and_varied() -> None:
    rows = _rows("math_equiv_labels.jsonl")
    cats = Counter(r["category"] for r in rows)
    assert len(rows) >= 300
    assert {"close_wrong", "adversarial", "anti_gaming", "choice", "structure", "complex"} <= set(cats)


def test_labelled_set_accuracy_and_no_false_positives(labelled) -> None:
    rows, results = labelled
    wrong = [(r["id"], r["label"], res.status.value, res.extracted) for r, res in zip(rows, results, strict=True)
             if res.correct != r["label"]]
    false_pos = [w for w in wrong if not w[1]]
    assert not false_pos, false_pos
    # a true pair may only be missed by a time-out on a very loaded machine
    assert len(wrong) <= 0.02 * len(rows), wrong


def test_close_but_wrong_numbers_never_score_and_are_flagged(labelled) -> None:
    rows, results = labelled
    close = [(r, res) for r, res in zip(rows, results, strict=True) if r["category"] == "close_wrong"]
    assert close and all(res.reward == 0.0 for _, res in close)
    flagged = {r["answer"] for r, res in close if res.extra.get("numeric_close")}
    assert {"\\frac{22}{7}", "\\frac{1}{3}", "\\pi", "\\frac{1}{1000!}"} <= flagged


def test_adversarial_items_end_with_a_status_within_the_limit(labelled) -> None:
    rows, results = labelled
    for r, res in zip(rows, results, strict=True):
        if r["category"] == "adversarial":
            assert res.status in {Status.CORRECT, Status.WRONG, Status.NO_ANSWER, Status.PARSE_ERROR, Status.TIMEOUT}
            assert res.timings.get("worker_s", 0.0) <= LIMIT + 0.5


def test_result_fields(verifier: MathVerifier) -> None:
    text = "Thus $\\boxed{\\dfrac{1}{2}}$."
    res = verifier.verify(text, "0.5")
    assert (res.reward, res.correct, res.status, res.extracted) == (1.0, True, Status.CORRECT, "\\dfrac{1}{2}")
    start, end = res.extra["extracted_span"]
    assert text[start:end] == "\\dfrac{1}{2}"
    record = res.to_record()
    assert {"reward", "correct", "status", "extracted", "extracted_span"} <= set(record)
    assert record["status"] == "correct"
    json.dumps(record)
    miss = verifier.verify("no idea", "5")
    assert miss.status is Status.NO_ANSWER and miss.reward == 0.0 and miss.extracted is None
    close = verifier.verify("$\\boxed{3.142857}$", "\\frac{22}{7}")
    assert close.status is Status.WRONG and close.to_record()["numeric_close"] is True


def test_math500_reference_solutions_verify(verifier: MathVerifier) -> None:
    rows = _rows("math500_test.jsonl")
    answers = [r["answer"] for r in rows]
    # each solution, each answer field as a bare completion, and each boxed answer against its answer
    for completions in ([r["solution"] for r in rows], answers, [f"So $\\boxed{{{a}}}$." for a in answers]):
        results = verifier.verify_batch(completions, answers)
        failed = [(r["unique_id"], res.status.value, res.extracted, r["answer"])
                  for r, res in zip(rows, results, strict=True) if not res.correct]
        assert not failed, failed


@pytest.mark.parametrize("n", [200, pytest.param(500, marks=pytest.mark.slow)])
def test_math500_shuffled_pairs_almost_never_verify(verifier: MathVerifier, n: int) -> None:
    rows = _rows("math500_test.jsonl")[:n]
    perm = list(range(len(rows)))
    random.Random(0).shuffle(perm)
    results = verifier.verify_batch([rows[j]["solution"] for j in perm], [r["answer"] for r in rows])
    hits = [(i, j) for i, (j, res) in enumerate(zip(perm, results, strict=True)) if res.correct and i != j]
    # a hit is only acceptable where the two problems share the same answer
    unexplained = [(i, j) for i, j in hits
                   if normalize_answer(rows[i]["answer"]) != normalize_answer(rows[j]["answer"])]
    assert len(unexplained) <= 1, [(rows[i]["answer"], rows[j]["answer"]) for i, j in unexplained]
    assert len(hits) <= 0.05 * len(rows)


# Long enough that a sympy comparison finishes on a loaded 2-core machine (at 1 s it timed out at
# load 5); the hang bound below scales with it.
HANG_LIMIT_S = 3.0


def test_hang_times_out_within_limit_and_pool_recovers() -> None:
    with MathVerifier(workers=2, timeout=HANG_LIMIT_S) as v:
        v.verify(*NEEDS_SYMPY)  # start the pool outside the timing
        start = time.monotonic()
        res = v.verify(HANG, "5")
        assert time.monotonic() - start < HANG_LIMIT_S + CALL_GRACE_S + 0.5
        assert res.status is Status.TIMEOUT and res.reward == 0.0
        batch = v.verify_batch([HANG, "$\\boxed{\\sin^2 x + \\cos^2 x}$", HANG, "$\\boxed{x^2+2x+1}$"],
                               ["5", "1", "6", "(x+1)^2"])
        assert [r.status for r in batch] == [Status.TIMEOUT, Status.CORRECT, Status.TIMEOUT, Status.CORRECT]
        assert len(v.worker_pids()) == 2


def test_eight_threads_and_one_hang() -> None:
    with MathVerifier(workers=2, timeout=HANG_LIMIT_S) as v:
        v.verify(*NEEDS_SYMPY)
        out: dict[int, tuple[Status, float]] = {}

        def call(k: int) -> None:
            start = time.monotonic()
            if k == 0:
                res = v.verify(HANG, "5")
            else:
                res = v.verify(f"$\\boxed{{(x+{k})^2}}$", f"x^2+{2 * k}x+{k * k}")
            out[k] = (res.status, time.monotonic() - start)

        threads = [threading.Thread(target=call, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert out[0][0] is Status.TIMEOUT
        assert all(out[k][0] is Status.CORRECT for k in range(1, 8)), out
        assert all(seconds < HANG_LIMIT_S + CALL_GRACE_S + 0.5 for _, seconds in out.values()), out


def test_verify_from_a_non_main_thread(verifier: MathVerifier) -> None:
    box: list = []
    t = threading.Thread(target=lambda: box.append(verifier.verify("$\\boxed{i^2}$", "-1")))
    t.start()
    t.join()
    assert box[0].status is Status.CORRECT  # math-verify alone raises here (signal.alarm)


def test_each_reference_is_parsed_once_per_batch() -> None:
    v = MathVerifier(workers=2)
    completions, references = [], []
    for k in range(10):  # 10 prompts x 8 samples, all needing sympy
        for s in range(8):
            completions.append(f"$\\boxed{{{s}+\\sqrt{{{k + 2}}}}}$")
            references.append(f"\\sqrt{{{k + 2}}}")
    pending: dict = {}
    for pos, (c, r) in enumerate(zip(completions, references, strict=True)):
        ref = v._prepare_reference(r)
        res, pred = v._fast_path(c, ref)
        assert res is None  # every item goes to a worker
        pending.setdefault(ref.normalized, (ref, {}))[1].setdefault(pred[0], []).append((pos, pred[1]))
    chunks, owners = v._plan_chunks(pending, workers=2)
    shared = [c[0][0] for c in chunks]
    assert len(shared) == len(set(shared)) == 10  # one chunk, hence one parse, per reference
    assert sorted(pos for o in owners for where in o for pos, _ in where) == list(range(80))
    one_ref = {"x": (pending[next(iter(pending))][0], {f"p{i}": [(i, None)] for i in range(40)})}
    assert len(v._plan_chunks(one_ref, workers=2)[0]) == 2  # a lone big group still uses both cores


def test_duplicate_answers_in_a_group_are_judged_once() -> None:
    with MathVerifier(workers=1, timeout=1.0) as v:
        start = time.monotonic()
        res = v.verify_batch([HANG] * 6, ["5"] * 6)
        assert [r.status for r in res] == [Status.TIMEOUT] * 6
        assert time.monotonic() - start < 1.0 + 2.0  # one time-out, not six


def test_registry_protocol_and_config_errors() -> None:
    v = get_verifier("math", workers=2)
    try:
        assert isinstance(v, Verifier) and v.kind == "math"
        assert v.reference_from_record({"answer": "5"}) == "5"
        assert v.reference_from_record({"ground_truth": 7}) == "7"
        assert v.reference_from_record({"reference": "x"}) == "x"
        with pytest.raises(KeyError):
            v.reference_from_record({"completion": "..."})
        with pytest.raises(ValueError):
            v.verify_batch(["a"], [])
    finally:
        v.close()
    for bad in ({"workers": 0}, {"timeout": 0}, {"numeric_tolerance": -1}, {"percent": "maybe"}):
        with pytest.raises(ValueError):
            MathVerifier(**bad)


def test_close_stops_workers_and_verifier_restarts() -> None:
    v = MathVerifier(workers=2)
    assert v.verify(*NEEDS_SYMPY).correct
    pids = v.worker_pids()
    assert len(pids) == 2
    v.close()
    time.sleep(0.2)
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                assert fh.read().split(")")[-1].split()[0] == "Z"
        except FileNotFoundError:
            pass
    assert v.verify(*NEEDS_SYMPY).correct and len(v.worker_pids()) == 2  # a new pool on demand
    v.close()


@pytest.mark.parametrize("bad", [None, 42, b"\\boxed{5}", "\ud800\\boxed{5}", "\x00" * 1000])
def test_untrusted_input_never_raises(verifier: MathVerifier, bad) -> None:
    res = verifier.verify(bad, "5")
    assert res.reward in (0.0, 1.0) and isinstance(res.status, Status)


# Issue 16: each class of miss and false positive found on Math-Verify's own test tables, end to end.
ISSUE16_CASES = [
    # (class, completion, reference, status)
    ("no marker: bare math", "$\\frac13 $", "1/3", Status.CORRECT),
    ("no marker: bare number", "1,000.99$", "1000.99", Status.CORRECT),
    ("no marker: final sentence", "Therefore, $\\cos \\angle RPS = -\\frac{24}{25}$.", "-\\frac{24}{25}", Status.CORRECT),
    ("no marker: final sentence", "So the area is \\(48\\) square units.", "48", Status.CORRECT),
    ("no marker: bare assignment", "x = 9", "9", Status.CORRECT),
    ("no marker: last number", "the number is not 10 which is 1,000.99€", "1000.99", Status.CORRECT),
    ("no marker: last number", "the number is not 10 which is 1,000.99€", "10", Status.WRONG),
    ("several boxes", "$$\\boxed{(2, 2)} \\quad \\text{and} \\quad \\boxed{(6, 2)}$$", "(2, 2), (6, 2)", Status.CORRECT),
    ("several boxes", "\\boxed{1},\\boxed{2},\\boxed{3}", "{1,2,3}", Status.CORRECT),
    ("several boxes in the reference", "$\\boxed{-2,1}$.", "\\(\\boxed{1}\\) and \\(\\boxed{-2}\\).", Status.CORRECT),
    ("several boxes against one value", "$\\boxed{2}$ and $\\boxed{3}$", "3", Status.WRONG),
    ("several boxes restating one value", "$\\boxed{15\\frac{39}{40}}$, or $\\boxed{\\frac{639}{40}}$", "\\frac{639}{40}",
     Status.CORRECT),
    ("separators", "$$\\boxed{a_{37} = 19, \\quad a_3 = 2}$$", "$$a_3 = 2, a_{37} = 19$$", Status.CORRECT),
    ("separators", "$$\\boxed{(x, y) = (5, 8) \\quad \\text{and} \\quad (8, 5)}$$", "$$(5, 8), (8, 5)$$", Status.CORRECT),
    ("prose after a marker", "Final Answer: The largest $n$ is 34.", "34", Status.CORRECT),
    ("prose after a marker", "Final Answer: The largest $n$ is 34.", "$35$", Status.WRONG),
    ("percent word", "$\\boxed{28 percent}", "$28\\%$", Status.CORRECT),
    ("percent word", "28 pct", "$28\\%$", Status.CORRECT),
    ("decimal comma", "1.22", "1,22", Status.CORRECT),
    ("decimal comma", "0.111", "0,111", Status.CORRECT),
    ("decimal comma", "Soucis : 2,74 $ a..", "2.74", Status.CORRECT),
    ("decimal comma, not a list", "-2.1", "-2,1", Status.WRONG),
    ("false positive: times", "$1:00$", "$12:00$", Status.WRONG),
    ("false positive: times", "$3:00$", "$5:00$", Status.WRONG),
    ("times", "$12:00$", "$12:00$", Status.CORRECT),
    ("times are not numbers", "$12:00$", "12", Status.WRONG),
    ("ratios", "$\\boxed{14:64}$", "7:32", Status.CORRECT),
    ("false positive: list as a number", "is $\\boxed{32, 349}$", "So the answer is: \\[ \\boxed{32349} \\]", Status.WRONG),
    ("false positive: list as a number", "$\\boxed{1, 234}$", "1234", Status.WRONG),
    ("thousands", "is $\\boxed{32,\\! 349}$", "So the answer is: \\[ \\boxed{32349} \\]", Status.CORRECT),
    ("thousands", "$\\boxed{12,345,678}$", "12345678", Status.CORRECT),
    ("false positive: undefined values", "$\\boxed{\\frac{1}{0}}$", "\\frac{2}{0}", Status.WRONG),
    ("infinities", "$\\boxed{+\\infty}$", "\\infty", Status.CORRECT),
    ("infinities", "$\\boxed{-\\infty}$", "\\infty", Status.WRONG),
    ("reference: GSM8K solution", "The answer is $\\boxed{72}$.", "She sold 48+24 = 72 clips.\n#### 72", Status.CORRECT),
    ("reference: GSM8K solution", "The answer is $\\boxed{71}$.", "She sold 48+24 = 72 clips.\n#### 72", Status.WRONG),
    ("reference: #### anywhere", "#### 1,000", "So 500 + 500 = 1000 dollars. #### 1000", Status.CORRECT),
    ("reference: full solution", "so it is $0.5$", "Half are red, so the fraction is $\\boxed{\\frac{1}{2}}$.", Status.CORRECT),
    ("reference: prose without a box", "$\\boxed{28\\%}$",
     "The stock keeps 90% then 80% of its value. Final Answer: The final answer is $28 \\%$. I hope it is correct.",
     Status.CORRECT),
]


@pytest.mark.parametrize(("kind", "completion", "reference", "status"), ISSUE16_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(ISSUE16_CASES)])
def test_issue16_classes(verifier: MathVerifier, kind: str, completion: str, reference: str, status: Status) -> None:
    res = verifier.verify(completion, reference)
    assert res.status is status, (kind, res)


def test_strict_extraction_keeps_marker_only_behaviour() -> None:
    with MathVerifier(workers=1, timeout=LIMIT, extraction="strict") as strict:
        assert strict.verify("x = 9", "9").status is Status.NO_ANSWER
        assert strict.verify("The answer is $9$.", "9").status is Status.CORRECT
    with pytest.raises(ValueError):
        MathVerifier(extraction="loose")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "reference",
    [None, "", "   ", "We could not find the value of this expression in the book at all.", "x" * 200_000],
)
def test_unusable_references_are_unjudged(verifier: MathVerifier, reference) -> None:
    for res in (verifier.verify("$\\boxed{5}$", reference), verifier.verify_batch(["$\\boxed{5}$"], [reference])[0]):
        assert res.status is Status.BAD_REFERENCE and res.judged is False and res.reward == 0.0
        assert res.detail  # says why


@pytest.mark.parametrize("reference", [float("nan"), float("inf")])
def test_a_missing_value_label_is_unjudged(verifier: MathVerifier, reference) -> None:
    # A NaN is how pandas writes a missing answer: it was read as the answer "nan".
    for completion in ("$\\boxed{4}$", "$\\boxed{nan}$"):
        res = verifier.verify(completion, reference)
        assert res.status is Status.BAD_REFERENCE and res.judged is False, res
    assert verifier.reference_from_record({"answer": float("nan")}) != "nan"


@pytest.mark.parametrize(("completion", "reference"), [
    ("$\\boxed{5\\text{ million}}$", "5"),
    ("$\\boxed{5}$", "5\\text{ million}"),
    ("$\\boxed{3\\text{ thousand}}$", "3"),
    ("$\\boxed{2\\text{ dozen}}$", "2"),
    ("$\\boxed{1.2\\text{ billion}}$", "1.2"),
    ("So it is $5\\text{ million}$.", "5"),
])
def test_a_magnitude_word_in_text_is_not_a_unit(verifier: MathVerifier, completion, reference) -> None:
    assert verifier.verify(completion, reference).status is Status.WRONG
    assert verifier.verify("$\\boxed{5\\text{ cm}}$", "5").status is Status.CORRECT  # a unit


def test_a_reference_sympy_cannot_parse_is_unjudged(verifier: MathVerifier) -> None:
    res = verifier.verify("$\\boxed{x^2+1}$", "\\sqrt{")
    assert res.status is Status.BAD_REFERENCE and res.judged is False


def test_bad_references_reach_the_adapters_as_unjudged() -> None:
    from veristep.verifiers.adapters import TRLRewardFunction, compute_score_batch

    reward = TRLRewardFunction("math", workers=1)
    try:
        scores = reward(["$\\boxed{72}$", "$\\boxed{72}$", "$\\boxed{72}$"],
                        answer=["Natalia sold 72 clips.\n#### 72", "", None])
    finally:
        reward.verifier.close()
    assert scores == [1.0, None, None]  # TRL leaves unjudged items out of the reward
    rows = compute_score_batch(["openai/gsm8k", "openai/gsm8k"], ["#### 72", "#### 72"],
                               ["Natalia sold 72 clips.\n#### 72", ""])
    assert [(r["score"], r["judged"], r["status"]) for r in rows] == [(1.0, True, "correct"),
                                                                      (0.0, False, "bad_reference")]


@pytest.mark.parametrize("answer", [{"x": 1}, [None], ["1", "2"], ("3",)])
def test_a_container_reference_is_a_bad_reference_not_its_python_spelling(answer) -> None:
    # {"x": 1} was compared as the text "{'x': 1}": \\boxed{x=1} scored a silent 0
    with MathVerifier(workers=1) as verifier:
        with pytest.raises(ValueError, match="not one answer"):
            verifier.reference_from_record({"answer": answer})
        result = verifier.verify("\\boxed{1}", answer)
    assert result.status is Status.BAD_REFERENCE and not result.judged


def test_a_list_of_one_answer_is_that_answer() -> None:
    with MathVerifier(workers=1) as verifier:
        for answer in (["3"], [3]):
            assert verifier.verify("\\boxed{3}", verifier.reference_from_record({"answer": answer})).correct


ADVERSARIAL_1MB = {
    "answer phrases (56 KB)": "the answer is " * 4000,
    "answer phrases (1 MB)": "the answer is " * 75_000,
    "nested braces": "\\boxed{" + "{" * 400_000 + "1" + "}" * 400_000 + "}",
    "digits": "1" * 1_000_000,
    "many boxes": "\\boxed{" * 140_000,
    "many closed boxes": "\\boxed{1} and " * 70_000,
    "unbalanced dollars": "$" * 1_000_000,
    "inline spans": "$1$ " * 250_000,
    "display openers": "\\[ 1 " * 200_000,
    "sentences": "Then $x=1$. " * 80_000,
}


@pytest.mark.parametrize("name", list(ADVERSARIAL_1MB))
def test_any_completion_up_to_1mb_returns_within_the_limit(name: str) -> None:
    text = ADVERSARIAL_1MB[name]
    with MathVerifier(workers=1, timeout=1.0) as v:
        v.verify(*NEEDS_SYMPY)  # start the pool outside the timing
        for call in (lambda: v.verify(text, "5"), lambda: v.verify_batch([text], ["5"])[0]):
            start = time.monotonic()
            res = call()
            assert time.monotonic() - start < 1.0 + CALL_GRACE_S + 0.5, name
            assert res.reward == 0.0 and isinstance(res.status, Status)

"""How far to trust a PRM: score labelled traces and measure separation and calibration.

Data: ProcessBench (JSON arrays per subset), PRMBench (JSONL per error category; each record
gives an original, valid trace and a modified one with planted errors), or a generic JSONL
file. For every subset and per data set overall the report gives trace-level AUROC of each
aggregation with bootstrap intervals beside the length baselines, earliest-error F1 at 0.5
and at a threshold tuned on a dev split, step- and trace-level ECE and Brier score, and for
planted errors the accuracy of locating them.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from veristep.common.jsonl_io import iter_jsonl

from .base import StepScorer
from .metrics import (
    AGGREGATIONS,
    EarliestErrorF1,
    Estimate,
    aggregate,
    auroc,
    bootstrap,
    brier_score,
    earliest_error_f1,
    expected_calibration_error,
    first_below,
    tune_threshold,
)
from .steps import DEFAULT_SEPARATOR, split_steps, step_texts

#: Steps of benchmark data are joined with this and split back by the scorer.
JOIN = DEFAULT_SEPARATOR
_EMPTY_STEP = "(empty step)"


@dataclass
class Trace:
    """One labelled solution: its steps and what is known about where it goes wrong."""

    id: str
    dataset: str
    subset: str
    prompt: str
    steps: list[str]
    correct: bool  # trace label: final answer correct (ProcessBench) / unmodified (PRMBench)
    first_error: int | None = None  # earliest wrong step, -1 for none, None if unknown
    error_steps: tuple[int, ...] | None = None  # planted wrong steps (PRMBench), 0-based
    step_labels: list[int | None] = field(default_factory=list)  # 1 right, 0 wrong, None unknown
    answer: str | None = None  # reference answer, when the data has one (Monte-Carlo scorers need it)

    @property
    def completion(self) -> str:
        """The steps as one completion, in the layout every scorer splits back."""
        return JOIN.join(self.steps)


# ---------------------------------------------------------------------------------------------
# Data


def _clean_step(text: str) -> str:
    # A blank line inside a step would split it in two; an empty step would vanish.
    text = re.sub(r"\n\s*\n", "\n", str(text)).strip()
    return text or _EMPTY_STEP


def _labels_from_first_error(n_steps: int, first_error: int) -> list[int | None]:
    if first_error < 0:
        return [1] * n_steps
    return [1 if k < first_error else 0 if k == first_error else None for k in range(n_steps)]


#: Called with (file, line or None, what) for a record that cannot be used; None raises.
OnError = Callable[[str, "int | None", str], None]


def _raise(path: str, line: int | None, what: str) -> None:
    where = f"{path}:{line}" if line is not None else path
    raise ValueError(f"{where}: {what}")


def _why(err: Exception) -> str:
    if isinstance(err, KeyError):
        return f"missing key {err.args[0]!r}" if err.args else "missing key"
    return f"{type(err).__name__}: {err}"


def load_processbench(directory: str | Path, on_error: OnError | None = None) -> list[Trace]:
    """All ProcessBench subsets in `directory` (gsm8k.json, math.json, ...).

    A record that cannot be read goes to `on_error` (default: raise ValueError) and is skipped.
    """
    report = on_error or _raise
    files = sorted(Path(directory).glob("*.json"))
    if not files:
        raise ValueError(f"no ProcessBench *.json files in {directory}")
    traces = []
    for path in files:
        try:
            records = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            report(str(path), None, f"not a JSON file ({err})")
            continue
        if not isinstance(records, list):
            report(str(path), None, "expected a JSON array of records")
            continue
        for k, rec in enumerate(records):
            try:
                steps = [_clean_step(s) for s in rec["steps"]]
                label = int(rec["label"])
                if label >= len(steps):
                    label = -1 if not steps else len(steps) - 1
                trace = Trace(
                    id=str(rec.get("id", f"{path.stem}-{k}")),
                    dataset="processbench",
                    subset=path.stem,
                    prompt=str(rec["problem"]),
                    steps=steps,
                    correct=bool(rec["final_answer_correct"]),
                    first_error=label,
                    step_labels=_labels_from_first_error(len(steps), label),
                )
            except (KeyError, TypeError, ValueError, AttributeError) as err:
                report(str(path), None, f"record {k}: {_why(err)}")
                continue
            traces.append(trace)
    return traces


def load_prmbench(directory: str | Path, on_error: OnError | None = None) -> list[Trace]:
    """PRMBench test files in `directory`: each record gives a valid and a flawed trace.

    A line that cannot be read goes to `on_error` (default: raise ValueError) and is skipped.
    """
    report = on_error or _raise
    files = sorted(Path(directory).glob("*.jsonl"))
    if not files:
        raise ValueError(f"no PRMBench *.jsonl files in {directory}")
    traces = []
    for path in files:
        for record in iter_jsonl(path):
            if record.error is not None:
                report(str(path), record.line_no, record.error)
                continue
            try:
                traces.extend(_prmbench_pair(record.data, path, len(traces)))
            except (KeyError, TypeError, ValueError, AttributeError) as err:
                report(str(path), record.line_no, _why(err))
    return traces


def _prmbench_pair(rec: dict[str, Any], path: Path, position: int) -> tuple[Trace, Trace]:
    subset = str(rec.get("classification") or path.stem)
    # idx repeats across category files, so the subset is part of the id.
    rid = f"{subset}/{rec.get('idx', position)}"
    original = [_clean_step(s) for s in rec["original_process"]]
    modified = [_clean_step(s) for s in rec["modified_process"]]
    # error_steps are 1-based; a few point past the last step and are dropped.
    errors = tuple(sorted({int(e) - 1 for e in rec["error_steps"] if 1 <= int(e) <= len(modified)}))
    return (
        Trace(f"{rid}/original", "prmbench", subset, str(rec["original_question"]),
              original, True, -1, (), [1] * len(original)),
        Trace(f"{rid}/modified", "prmbench", subset, str(rec["modified_question"]),
              modified, False, errors[0] if errors else None, errors,
              [0 if k in errors else 1 for k in range(len(modified))] if errors else
              [None] * len(modified)),
    )


def load_jsonl(
    path: str | Path, separator: str = JOIN, regex: str | None = None,
    on_error: OnError | None = None,
) -> list[Trace]:
    """Generic labelled traces: prompt, steps (list) or completion (text), correct, optional label.

    A line that cannot be used goes to `on_error` (default: raise ValueError) and is skipped.
    """
    report = on_error or _raise
    traces = []
    for record in iter_jsonl(path):
        if record.error is not None:
            report(str(path), record.line_no, record.error)
            continue
        try:
            trace = _generic_trace(record.data, Path(path), record.line_no, separator, regex)
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            report(str(path), record.line_no, str(err) if isinstance(err, ValueError) else _why(err))
            continue
        traces.append(trace)
    return traces


def _generic_trace(
    rec: dict[str, Any], path: Path, lineno: int, separator: str, regex: str | None
) -> Trace:
    prompt = rec.get("prompt", rec.get("problem", rec.get("question")))
    correct = rec.get("correct", rec.get("final_answer_correct"))
    if prompt is None or correct is None:
        raise ValueError("needs 'prompt' and 'correct' (or ProcessBench keys)")
    if isinstance(rec.get("steps"), list):
        steps = [_clean_step(s) for s in rec["steps"]]
    elif isinstance(rec.get("completion"), str):
        spans = split_steps(rec["completion"], separator, regex)
        steps = [_clean_step(s) for s in step_texts(rec["completion"], spans)]
    else:
        raise ValueError("needs 'steps' (list) or 'completion' (text)")
    label = rec.get("label")
    first_error = int(label) if label is not None else None
    if first_error is not None and first_error >= len(steps):
        first_error = -1 if not steps else len(steps) - 1
    step_labels = (_labels_from_first_error(len(steps), first_error) if first_error is not None
                   else [None] * len(steps))
    if rec.get("step_labels") is not None:  # exact per-step labels (veristep prm traces)
        given = rec["step_labels"]
        if (not isinstance(given, list) or len(given) != len(steps)
                or not all(v in (0, 1, None) and not isinstance(v, float) for v in given)):
            raise ValueError(f"'step_labels' must be a list of 0, 1 or null, one per step ({len(steps)})")
        step_labels = [None if v is None else int(v) for v in given]
    return Trace(
        id=str(rec.get("id", f"{path.stem}-{lineno}")),
        dataset=path.stem,
        subset=str(rec.get("subset", "all")),
        prompt=str(prompt),
        steps=steps,
        correct=bool(correct),
        first_error=first_error,
        step_labels=step_labels,
        answer=None if rec.get("answer") is None else str(rec["answer"]),
    )


def load_data(
    spec: str, separator: str = JOIN, regex: str | None = None, on_error: OnError | None = None
) -> list[Trace]:
    """Load `processbench:DIR`, `prmbench:DIR` or a JSONL FILE of labelled traces."""
    kind, _, target = spec.partition(":")
    if kind == "processbench" and target:
        return load_processbench(target, on_error)
    if kind == "prmbench" and target:
        return load_prmbench(target, on_error)
    if Path(spec).is_file():
        return load_jsonl(spec, separator, regex, on_error)
    raise ValueError(f"cannot read data {spec!r}: use processbench:DIR, prmbench:DIR or a JSONL file")


def source_name(spec: str) -> str:
    """A data spec as recorded in a report: the kind and the folder or file name, no path."""
    kind, sep, target = spec.partition(":")
    if kind in ("processbench", "prmbench") and sep:
        name = Path(target).name
        return kind if name == kind else f"{kind}:{name}"
    return Path(spec).name


# ---------------------------------------------------------------------------------------------
# Scoring


@dataclass
class ScoredTraces:
    """Step scores of every trace, and how long the scorer took."""

    traces: list[Trace]
    step_scores: list[list[float]]
    seconds: float

    @property
    def traces_per_s(self) -> float:
        """Scoring throughput."""
        return len(self.traces) / self.seconds if self.seconds > 0 else float("inf")


def score_traces(scorer: StepScorer, traces: Sequence[Trace], chunk: int = 64, progress: bool = False) -> ScoredTraces:
    """Score every trace with `scorer` (in batches of `chunk`), checking the step count."""
    start = time.perf_counter()
    all_scores: list[list[float]] = []
    by_id = getattr(scorer, "has_ids", lambda: False)()
    iterator = range(0, len(traces), chunk)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(traces), desc="scoring", unit="trace")
    for b in iterator:
        part = traces[b : b + chunk]
        completions = [t.completion for t in part]
        if by_id:
            results = scorer.score_ids([t.id for t in part], completions)  # type: ignore[attr-defined]
        else:
            results = scorer.score_batch([t.prompt for t in part], completions)
        for t, r in zip(part, results, strict=True):
            if len(r.scores) != len(t.steps):
                raise ValueError(
                    f"scorer returned {len(r.scores)} scores for {len(t.steps)} steps of trace "
                    f"{t.id}; load the scorer with separator={JOIN!r} and no regex"
                )
            all_scores.append([float(s) for s in r.scores])
        if bar is not None:
            bar.update(len(part))
    if bar is not None:
        bar.close()
    return ScoredTraces(list(traces), all_scores, time.perf_counter() - start)


# ---------------------------------------------------------------------------------------------
# Report


@dataclass
class EarliestErrorReport:
    """Earliest-error F1 at 0.5 on all traces; tuned on the dev part, tested on the rest."""

    all_at_half: EarliestErrorF1
    test_at_half: EarliestErrorF1
    tuned_threshold: float
    test_at_tuned: EarliestErrorF1
    n_dev: int
    n_test: int


@dataclass
class LocateReport:
    """How often the planted error is where the scorer points (argmin / first below 0.5)."""

    n: int
    argmin_acc: float
    first_below_half_acc: float


@dataclass
class SubsetReport:
    """All metrics of one subset (or of a whole data set)."""

    n_traces: int
    n_correct: int
    n_without_steps: int
    auroc: dict[str, Estimate]
    baseline_auroc: dict[str, Estimate]
    trace_ece: dict[str, float]
    trace_brier: dict[str, float]
    step_ece: float
    step_brier: float
    n_labelled_steps: int
    earliest_error: EarliestErrorReport | None
    locate: LocateReport | None
    #: AUROC of step scores against the labelled steps (right vs wrong), steps resampled
    step_auroc: Estimate | None = None


@dataclass
class CalibrationReport:
    """The whole benchmark run: configuration, throughput, per-subset and overall metrics."""

    scorer: str
    data: list[str]
    n_traces: int
    traces_per_s: float
    scoring_seconds: float
    config: dict[str, Any]
    subsets: dict[str, SubsetReport]

    def to_json(self) -> str:
        """JSON text with NaN written as null."""
        return json.dumps(_nan_to_none(asdict(self)), indent=2)


def _nan_to_none(obj: Any) -> Any:
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_nan_to_none(v) for v in obj]
    return obj


def _dev_mask(n: int, fraction: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mask = np.zeros(n, dtype=bool)
    mask[rng.permutation(n)[: int(round(n * fraction))]] = True
    return mask


def subset_report(
    traces: Sequence[Trace],
    step_scores: Sequence[Sequence[float]],
    n_bootstrap: int = 1000,
    dev_fraction: float = 0.3,
    seed: int = 0,
    n_bins: int = 10,
) -> SubsetReport:
    """Compute every metric for one group of traces."""
    keep = [i for i, s in enumerate(step_scores) if len(s) > 0]
    tr = [traces[i] for i in keep]
    sc = [list(step_scores[i]) for i in keep]
    y = np.array([t.correct for t in tr], dtype=bool)
    aurocs, eces, briers = {}, {}, {}
    for how in AGGREGATIONS:
        agg = np.array([aggregate(s, how) for s in sc])
        aurocs[how] = bootstrap(auroc, agg, y, n_bootstrap, seed=seed)
        eces[how] = expected_calibration_error(agg, y, n_bins)
        briers[how] = brier_score(agg, y)
    # "Shorter trace = correct": the baseline any PRM number must beat.
    baselines = {
        "length_chars": bootstrap(auroc, np.array([-len(t.completion) for t in tr], float), y, n_bootstrap, seed=seed),
        "length_steps": bootstrap(auroc, np.array([-len(t.steps) for t in tr], float), y, n_bootstrap, seed=seed),
    }
    step_p, step_y = [], []
    for t, s in zip(tr, sc, strict=True):
        for p, lab in zip(s, t.step_labels, strict=True):
            if lab is not None:
                step_p.append(p)
                step_y.append(lab)
    return SubsetReport(
        n_traces=len(traces),
        n_correct=int(sum(t.correct for t in traces)),
        n_without_steps=len(traces) - len(tr),
        auroc=aurocs,
        baseline_auroc=baselines,
        trace_ece=eces,
        trace_brier=briers,
        step_ece=expected_calibration_error(step_p, step_y, n_bins),
        step_brier=brier_score(step_p, step_y),
        n_labelled_steps=len(step_p),
        earliest_error=_earliest_error(tr, sc, dev_fraction, seed),
        locate=_locate(tr, sc),
        step_auroc=bootstrap(auroc, step_p, step_y, n_bootstrap, seed=seed),
    )


def _earliest_error(
    traces: Sequence[Trace], scores: Sequence[Sequence[float]], dev_fraction: float, seed: int
) -> EarliestErrorReport | None:
    idx = [i for i, t in enumerate(traces) if t.first_error is not None]
    if not idx:
        return None
    truth = [traces[i].first_error for i in idx]
    sc = [scores[i] for i in idx]
    dev = _dev_mask(len(idx), dev_fraction, seed)
    dev_sc = [s for s, d in zip(sc, dev, strict=True) if d]
    dev_truth = [t for t, d in zip(truth, dev, strict=True) if d]
    test_sc = [s for s, d in zip(sc, dev, strict=True) if not d]
    test_truth = [t for t, d in zip(truth, dev, strict=True) if not d]
    threshold, _ = tune_threshold(dev_sc, dev_truth) if dev_sc else (0.5, float("nan"))
    return EarliestErrorReport(
        all_at_half=earliest_error_f1([first_below(s, 0.5) for s in sc], truth),
        test_at_half=earliest_error_f1([first_below(s, 0.5) for s in test_sc], test_truth),
        tuned_threshold=threshold,
        test_at_tuned=earliest_error_f1([first_below(s, threshold) for s in test_sc], test_truth),
        n_dev=len(dev_sc),
        n_test=len(test_sc),
    )


def _locate(traces: Sequence[Trace], scores: Sequence[Sequence[float]]) -> LocateReport | None:
    pairs = [(t, s) for t, s in zip(traces, scores, strict=True) if t.error_steps]
    if not pairs:
        return None
    argmin_hits = sum(int(np.argmin(s)) in t.error_steps for t, s in pairs)
    below_hits = sum(first_below(s, 0.5) in t.error_steps for t, s in pairs)
    return LocateReport(len(pairs), argmin_hits / len(pairs), below_hits / len(pairs))


def calibrate(
    scorer: StepScorer,
    traces: Sequence[Trace],
    scorer_name: str = "",
    data_names: Sequence[str] = (),
    n_bootstrap: int = 1000,
    dev_fraction: float = 0.3,
    seed: int = 0,
    n_bins: int = 10,
    progress: bool = False,
) -> tuple[CalibrationReport, ScoredTraces]:
    """Score `traces` and build the report: every subset, then each data set overall."""
    if not 0.0 < dev_fraction < 1.0:
        raise ValueError(f"dev_fraction must be in (0, 1), got {dev_fraction}")
    scored = score_traces(scorer, traces, progress=progress)
    groups: dict[str, list[int]] = {}
    for i, t in enumerate(traces):
        groups.setdefault(f"{t.dataset}/{t.subset}", []).append(i)
    for dataset in dict.fromkeys(t.dataset for t in traces):
        groups[f"{dataset}/overall"] = [i for i, t in enumerate(traces) if t.dataset == dataset]
    names = list(groups)
    if progress:  # the bootstrap is most of the time after scoring
        from tqdm import tqdm

        names = tqdm(names, desc="metrics", unit="subset")
    subsets = {
        name: subset_report(
            [traces[i] for i in groups[name]],
            [scored.step_scores[i] for i in groups[name]],
            n_bootstrap,
            dev_fraction,
            seed,
            n_bins,
        )
        for name in names
    }
    report = CalibrationReport(
        scorer=scorer_name,
        data=list(data_names),
        n_traces=len(traces),
        traces_per_s=scored.traces_per_s,
        scoring_seconds=scored.seconds,
        config={"n_bootstrap": n_bootstrap, "dev_fraction": dev_fraction, "seed": seed,
                "ece_bins": n_bins, "aggregations": list(AGGREGATIONS), "step_join": JOIN},
        subsets=subsets,
    )
    return report, scored


# ---------------------------------------------------------------------------------------------
# Presentation


def _fmt(x: float | None, digits: int = 3) -> str:
    return "  -  " if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _fmt(x: float | None, digits: int = 3) -> str:
    return "  -  " if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def baseline_verdict(score: Estimate, baseline: Estimate) -> str:
    """One line comparing a scorer's AUROC with the length baseline's, by their 95 % intervals.

    "below" / "above" only when the intervals do not overlap; otherwise "not distinguishable
    from". Without intervals (no bootstrap) the point values decide, and the line says so.
    """
    if math.isnan(score.value) or math.isnan(baseline.value):
        return "AUROC undefined (needs both correct and wrong traces)"
    intervals = not any(math.isnan(x) for x in (score.low, score.high, baseline.low, baseline.high))
    if intervals:
        word = ("below" if score.high < baseline.low else
                "above" if score.low > baseline.high else "not distinguishable from")
    else:
        word = "below" if score.value < baseline.value else "above" if score.value > baseline.value \
            else "equal to"
    line = f"AUROC {score.value:.2f}, {word} the length baseline {baseline.value:.2f}"
    return line if intervals else line + " (no bootstrap intervals)"


def format_table(report: CalibrationReport, how: str = "min") -> str:
    """A plain-text table: one row per subset, AUROC per aggregation beside the length baseline,
    then one verdict line per data set for the aggregation `how`."""
    head = (
        f"{'subset':<34}{'n':>6} " + " ".join(f"{a:>6}" for a in AGGREGATIONS)
        + f" {'min 95% CI':>13} {'len':>6} {'F1@.5':>6} {'F1@t':>6} {'t':>5} "
        f"{'sECE':>6} {'sBrier':>6} {'loc':>6}"
    )
    lines = [f"scorer {report.scorer}: {report.n_traces} traces, {report.traces_per_s:.1f} traces/s",
             head, "-" * len(head)]
    for name, r in report.subsets.items():
        ee, loc = r.earliest_error, r.locate
        ci = r.auroc["min"]
        lines.append(
            f"{name:<34}{r.n_traces:>6} "
            + " ".join(f"{_fmt(r.auroc[a].value):>6}" for a in AGGREGATIONS)
            + f" {_fmt(ci.low) + '-' + _fmt(ci.high):>13} {_fmt(r.baseline_auroc['length_chars'].value):>6}"
            f" {_fmt(ee.all_at_half.f1 if ee else None):>6} {_fmt(ee.test_at_tuned.f1 if ee else None):>6}"
            f" {_fmt(ee.tuned_threshold if ee else None, 2):>5} {_fmt(r.step_ece):>6} "
            f"{_fmt(r.step_brier):>6} {_fmt(loc.argmin_acc if loc else None):>6}"
        )
    lines.append(
        "AUROC: trace correct vs wrong per aggregation; len: shorter-is-correct baseline; "
        "F1@t: earliest-error F1 on the test part at the dev-tuned threshold t; sECE/sBrier: "
        "step level; loc: planted error at the argmin step."
    )
    for name, r in report.subsets.items():
        if name.endswith("/overall"):
            verdict = baseline_verdict(r.auroc[how], r.baseline_auroc["length_chars"])
            lines.append(f"{name.removesuffix('/overall')} ({how} step score): {verdict}")
    return "\n".join(lines)

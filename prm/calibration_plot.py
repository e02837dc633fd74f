"""The calibration figure of `veristep prm calibrate --plot`: what a person reads first.

One row per data set, only panels that have data: the trace score of correct and wrong traces
(side-by-side bars; a spike is cut and labelled so the rest stays readable), a reliability
diagram with ECE, the ROC curves of the scorer and of the length baseline on the same axes under
a one-line verdict, and each subset's AUROC beside the baseline.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .calibrate import CalibrationReport, ScoredTraces, SubsetReport, baseline_verdict
from .metrics import aggregate, reliability_bins, roc_curve

_OK, _BAD, _LEN = "#1b9e77", "#d95f02", "#7570b3"  # colour-blind-safe, never mixed by overlap


@dataclass
class _DatasetView:
    """What the figure shows of one data set: trace scores and labels, steps, subsets."""

    name: str
    agg: np.ndarray
    correct: np.ndarray
    lengths: np.ndarray
    step_p: list[float]
    step_y: list[int]
    overall: SubsetReport
    subsets: dict[str, SubsetReport]


def _views(report: CalibrationReport, scored: ScoredTraces, how: str) -> list[_DatasetView]:
    views = []
    for dataset in dict.fromkeys(t.dataset for t in scored.traces):
        idx = [i for i, t in enumerate(scored.traces) if t.dataset == dataset and scored.step_scores[i]]
        if not idx:
            continue
        step_p: list[float] = []
        step_y: list[int] = []
        for i in idx:
            for p, lab in zip(scored.step_scores[i], scored.traces[i].step_labels, strict=True):
                if lab is not None:
                    step_p.append(p)
                    step_y.append(lab)
        prefix = f"{dataset}/"
        views.append(_DatasetView(
            name=dataset,
            agg=np.array([aggregate(scored.step_scores[i], how) for i in idx]),
            correct=np.array([scored.traces[i].correct for i in idx], dtype=bool),
            lengths=np.array([len(scored.traces[i].completion) for i in idx], dtype=float),
            step_p=step_p,
            step_y=step_y,
            overall=report.subsets[f"{dataset}/overall"],
            subsets={k.removeprefix(prefix): v for k, v in report.subsets.items()
                     if k.startswith(prefix) and not k.endswith("/overall")},
        ))
    return views


def _panels(view: _DatasetView) -> list[str]:
    """The panels that have data for this data set, in order."""
    both = view.correct.any() and (~view.correct).any()
    panels = ["distribution", "reliability"]
    if both:
        panels.append("roc")
    if len(view.subsets) > 1:
        panels.append("subsets")
    return panels


def plot_calibration(report: CalibrationReport, scored: ScoredTraces, path: str | Path,
                     how: str = "min") -> None:
    """Save the calibration figure: one row per data set, only panels that have data.

    Panels: the trace score per class (side-by-side bars; a spike is cut and labelled so the
    rest stays readable), a reliability diagram (steps and traces, with ECE), the ROC curve of
    the scorer and of the length baseline on the same axes under a one-line verdict, and the
    AUROC of each subset with its interval beside the baseline.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    views = _views(report, scored, how)
    if not views:
        raise ValueError("nothing to plot: no trace has steps")
    cols = max(len(_panels(v)) for v in views)
    fig, axes = plt.subplots(len(views), cols, figsize=(4.6 * cols, 4.1 * len(views)),
                             squeeze=False)
    draw = {"distribution": _plot_distribution, "reliability": _plot_reliability,
            "roc": _plot_roc, "subsets": _plot_subsets}
    for row, view in zip(axes, views, strict=True):
        panels = _panels(view)
        for ax, panel in zip(row, panels, strict=False):
            draw[panel](ax, view, how, report)
        for ax in row[len(panels):]:
            fig.delaxes(ax)
    fig.suptitle(f"How far to trust the {report.scorer} scorer: trace score = {how} of its step "
                 f"scores; data: {', '.join(report.data)}", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_distribution(ax: Any, view: _DatasetView, how: str, report: CalibrationReport) -> None:
    values = np.unique(view.agg)
    gap = float(np.min(np.diff(values))) if len(values) > 1 else 1.0
    if len(values) <= 12 and gap >= 0.02:  # a few distinct scores: one bar pair per value
        centers = values
        width = min(gap, 0.1) * 0.4
        ok = np.array([(view.agg[view.correct] == v).sum() for v in values], float)
        bad = np.array([(view.agg[~view.correct] == v).sum() for v in values], float)
    else:
        edges = np.linspace(0.0, 1.0, 21)
        centers = (edges[:-1] + edges[1:]) / 2
        width = 0.02
        ok = np.histogram(np.clip(view.agg[view.correct], 0, 1), edges)[0].astype(float)
        bad = np.histogram(np.clip(view.agg[~view.correct], 0, 1), edges)[0].astype(float)
    n_ok, n_bad = int(view.correct.sum()), int((~view.correct).sum())
    ok = ok / max(n_ok, 1)
    bad = bad / max(n_bad, 1)
    ax.bar(centers - width / 2, ok, width, color=_OK, label=f"correct traces (n={n_ok})")
    ax.bar(centers + width / 2, bad, width, color=_BAD, label=f"wrong traces (n={n_bad})")
    # A spike (most traces at the neutral 0.5) would flatten every other bar: cut the axis
    # above the tallest of the rest and print the true height beside each cut bar.
    xlabel = f"trace score ({how} of step scores)"
    top_bin = int(np.argmax(np.maximum(ok, bad)))
    rest = np.delete(np.maximum(ok, bad), top_bin)
    second = float(rest.max()) if len(rest) else 0.0
    if second > 0 and max(ok[top_bin], bad[top_bin]) > 2.5 * second:
        limit = second * 1.6
        ax.set_ylim(0, limit)
        right = centers[top_bin] < 0.8  # labels on the side with room
        x = centers[top_bin] + (1.5 if right else -1.5) * width
        for k, (h, colour) in enumerate(((ok[top_bin], _OK), (bad[top_bin], _BAD))):
            if h > limit:
                ax.text(x, limit * (0.96 - 0.08 * k), f"{h:.0%} (cut)", ha="left" if right else "right",
                        va="top", fontsize=8, color=colour, fontweight="bold")
        xlabel += f"\nbars at {centers[top_bin]:.2f} are cut; their height is printed beside them"
    ax.set_xlim(-0.05, 1.05)
    ax.set_xlabel(xlabel, fontsize=9)
    ax.set_ylabel("share of the class's traces")
    ax.set_title(f"{view.name}: trace scores by outcome", fontsize=10)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2, frameon=False)


def _plot_reliability(ax: Any, view: _DatasetView, how: str, report: CalibrationReport) -> None:
    n_bins = int(report.config.get("ece_bins", 10))
    series = []
    if view.step_p:
        series.append(("labelled steps", view.step_p, view.step_y, view.overall.step_ece, "o", _LEN))
    series.append((f"traces ({how})", list(np.clip(view.agg, 0, 1)), list(view.correct.astype(int)),
                   view.overall.trace_ece[how], "s", "0.2"))
    from matplotlib.lines import Line2D

    ax.plot([0, 1], [0, 1], ls="--", color="0.6", lw=1)
    handles = [Line2D([], [], ls="--", color="0.6", lw=1, label="perfectly calibrated")]
    for label, probs, labels, ece, marker, colour in series:
        bins = reliability_bins(probs, labels, n_bins)
        total = sum(b.count for b in bins)
        x = [b.mean_prob for b in bins]
        y = [b.observed for b in bins]
        size = [15 + 350 * b.count / total for b in bins]
        ax.plot(x, y, color=colour, lw=1, alpha=0.7)
        ax.scatter(x, y, s=size, marker=marker, color=colour, alpha=0.75)
        handles.append(Line2D([], [], marker=marker, color=colour, lw=1, markersize=6,
                              label=f"{label}: ECE {ece:.2f} (n={total})"))
    ax.set_xlim(-0.03, 1.03)
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("score, read as P(correct)\nmarker area = share of items in the bin", fontsize=9)
    ax.set_ylabel("observed share correct")
    ax.set_title(f"{view.name}: reliability ({n_bins} bins)", fontsize=10)
    ax.legend(handles=handles, fontsize=7, loc="lower right")


def _plot_roc(ax: Any, view: _DatasetView, how: str, report: CalibrationReport) -> None:
    score = view.overall.auroc[how]
    baseline = view.overall.baseline_auroc["length_chars"]
    fpr, tpr = roc_curve(view.agg, view.correct)
    ax.plot(fpr, tpr, color=_BAD, lw=2, label=f"{how} step score: AUROC {score.value:.2f}")
    fpr, tpr = roc_curve(-view.lengths, view.correct)
    ax.plot(fpr, tpr, color=_LEN, lw=2, ls="-.",
            label=f"length baseline (shorter = correct): {baseline.value:.2f}")
    ax.plot([0, 1], [0, 1], ls="--", color="0.6", lw=1, label="chance: 0.50")
    ax.set_xlabel("wrong traces accepted (false-positive rate)")
    ax.set_ylabel("correct traces accepted (true-positive rate)")
    verdict = textwrap.fill(baseline_verdict(score, baseline), 46)
    ax.set_title(f"{view.name}: ROC of the trace score\n{verdict}", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")


def _plot_subsets(ax: Any, view: _DatasetView, how: str, report: CalibrationReport) -> None:
    names = list(view.subsets)
    ys = np.arange(len(names))[::-1]
    for y, name in zip(ys, names, strict=True):
        est = view.subsets[name].auroc[how]
        base = view.subsets[name].baseline_auroc["length_chars"]
        if not math.isnan(est.low):
            ax.plot([est.low, est.high], [y, y], color=_BAD, lw=2)
        ax.plot(est.value, y, "o", color=_BAD)
        ax.plot(base.value, y, "D", mfc="none", color=_LEN)
    ax.plot([], [], "o-", color=_BAD, label=f"{how} step score, 95 % CI")
    ax.plot([], [], "D", mfc="none", color=_LEN, label="length baseline")
    ax.axvline(0.5, ls="--", color="0.6", lw=1)
    ax.set_yticks(ys)
    ax.set_yticklabels(names, fontsize=8)
    ax.set_xlabel("AUROC (correct vs wrong traces; 0.5 = chance)")
    ax.set_title(f"{view.name}: per subset", fontsize=10)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)

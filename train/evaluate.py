"""Held-out evaluation: accuracy with its standard error, and before/after differences that pair.

One evaluation samples `k` completions per held-out prompt at the training temperature, plus one
greedy completion, each prompt under a fixed seed. The seeds depend only on the run seed and the
prompt's position, so the evaluation before training and the one after it draw the same random
numbers (common random numbers): the paired difference then measures the model's change, not
the sampling noise. Standard errors treat the prompt as the unit (samples of one prompt are
correlated): the SE of a mean over prompts is sd / sqrt(n) of the per-prompt values, and the SE of
a before/after difference is that of the per-prompt differences.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .distributed import DistInfo, gather_rows
from .lockstep import even_shard


@dataclass(frozen=True)
class Estimate:
    """A mean over prompts and its standard error."""

    mean: float
    se: float


def mean_se(values: Sequence[float]) -> Estimate:
    """The mean of per-prompt values and its standard error, sd (ddof 1) / sqrt(n); SE 0 if n < 2."""
    n = len(values)
    if n == 0:
        raise ValueError("mean_se: no values")
    mean = math.fsum(values) / n
    if n < 2:
        return Estimate(mean, 0.0)
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    return Estimate(mean, math.sqrt(var / n))


def paired_difference(before: Sequence[float], after: Sequence[float]) -> Estimate:
    """Mean of after - before over the same prompts, and the SE of that mean."""
    if len(before) != len(after):
        raise ValueError(f"paired_difference: {len(before)} prompts before, {len(after)} after; "
                         "a paired difference needs the same prompts")
    return mean_se([a - b for a, b in zip(after, before, strict=True)])


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al. 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


@dataclass
class EvalResult:
    """Per-prompt outcomes of one held-out evaluation, in prompt order.

    A completion no verifier could judge (a checker time-out, a sandbox error, a bad reference)
    has no verdict: as in training it is left out, here of the accuracies, and counted
    (`eval/unjudged_frac`). `judged` / `greedy_judged` are None when every completion was judged.
    """

    samples: int  # completions per prompt at the training temperature
    correct: list[int]  # per prompt: how many of its `samples` completions are correct
    greedy: list[int] | None  # per prompt: 1 if its greedy completion is correct (None: not run)
    seconds: float = 0.0
    judged: list[int] | None = None  # per prompt: how many of its samples were judged (None: all)
    greedy_judged: list[int] | None = None  # per prompt: 1 if its greedy completion was judged

    @property
    def prompts(self) -> int:
        """Number of prompts evaluated."""
        return len(self.correct)

    def _judged(self) -> list[int]:
        return self.judged if self.judged is not None else [self.samples] * self.prompts

    def _greedy_judged(self) -> list[int]:
        return self.greedy_judged if self.greedy_judged is not None else [1] * self.prompts

    def sample_accuracy(self) -> list[float | None]:
        """Per prompt: the share of its judged samples that are correct (None: none judged)."""
        return [c / j if j else None for c, j in zip(self.correct, self._judged(), strict=True)]

    def greedy_correct(self) -> list[float | None] | None:
        """Per prompt: 1.0 / 0.0 for its greedy completion (None: not judged; None if not run)."""
        if self.greedy is None:
            return None
        return [float(g) if j else None for g, j in zip(self.greedy, self._greedy_judged(), strict=True)]

    def pass_at_1(self) -> Estimate:
        """Held-out pass@1 at the sampling temperature, with its SE over prompts."""
        return _mean_se_judged(self.sample_accuracy())

    def greedy_accuracy(self) -> Estimate | None:
        """Held-out greedy accuracy with its SE (None when greedy was not evaluated)."""
        values = self.greedy_correct()
        return None if values is None else _mean_se_judged(values)

    def unjudged_frac(self) -> float:
        """Share of the evaluation's completions (samples and greedy) no verifier judged."""
        total = self.prompts * self.samples
        unjudged = total - sum(self._judged())
        if self.greedy is not None:
            total += self.prompts
            unjudged += self.prompts - sum(self._greedy_judged())
        return unjudged / total if total else 0.0

    def pass_at_k(self, k: int) -> float | None:
        """Unbiased pass@min(k, judged samples) averaged over the prompts with a judged sample."""
        values = [pass_at_k(j, c, min(k, j)) for c, j in zip(self.correct, self._judged(), strict=True) if j]
        return math.fsum(values) / len(values) if values else None

    def metrics(self, group_size: int) -> dict[str, float | None]:
        """The `eval/*` metrics of a step line.

        `eval/pass@k` is the unbiased pass@k with k = min(group_size, samples), the k it was
        measured at is `eval/k`; `eval/pass@G` is its deprecated old name (same value).
        """
        p1 = self.pass_at_1()
        g = self.greedy_accuracy()
        k = min(group_size, self.samples)
        pass_k = self.pass_at_k(k)
        return {
            "eval/pass@1": p1.mean, "eval/pass@1_se": p1.se,
            "eval/pass@k": pass_k, "eval/k": k, "eval/pass@G": pass_k,
            "eval/greedy": g.mean if g else None, "eval/greedy_se": g.se if g else None,
            "eval/unjudged_frac": self.unjudged_frac(),
        }

    def to_state(self) -> dict[str, Any]:
        """Plain data for a checkpoint (the paired difference after a resume needs it)."""
        return {"samples": self.samples, "correct": list(self.correct),
                "greedy": None if self.greedy is None else list(self.greedy), "seconds": self.seconds,
                "judged": None if self.judged is None else list(self.judged),
                "greedy_judged": None if self.greedy_judged is None else list(self.greedy_judged)}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> EvalResult:
        """Inverse of `to_state` (a state from before unjudged counts reads as all judged)."""
        def ints(key: str) -> list[int] | None:
            return None if state.get(key) is None else [int(v) for v in state[key]]

        return cls(int(state["samples"]), [int(c) for c in state["correct"]], ints("greedy"),
                   float(state.get("seconds", 0.0)), ints("judged"), ints("greedy_judged"))


def _mean_se_judged(values: Sequence[float | None]) -> Estimate:
    """`mean_se` over the prompts with a verdict; a mean of nan (SE 0) when there is none."""
    kept = [v for v in values if v is not None]
    return mean_se(kept) if kept else Estimate(math.nan, 0.0)


def compare(before: EvalResult, after: EvalResult) -> dict[str, Estimate | None]:
    """Paired before/after differences of pass@1 and of greedy accuracy (same prompts and seeds).

    A prompt enters a difference only if both evaluations judged it."""
    if before.samples != after.samples or before.prompts != after.prompts:
        raise ValueError("compare: the two evaluations did not use the same prompts and samples")
    diff = _paired_judged(before.sample_accuracy(), after.sample_accuracy())
    greedy = None
    gb, ga = before.greedy_correct(), after.greedy_correct()
    if gb is not None and ga is not None:
        greedy = _paired_judged(gb, ga)
    return {"pass@1": diff, "greedy": greedy}


def _paired_judged(before: Sequence[float | None], after: Sequence[float | None]) -> Estimate:
    pairs = [(b, a) for b, a in zip(before, after, strict=True) if b is not None and a is not None]
    if not pairs:
        return Estimate(math.nan, 0.0)
    return paired_difference([b for b, _ in pairs], [a for _, a in pairs])


def eval_seeds(run_seed: int, prompt_indices: Sequence[int]) -> list[int]:
    """The sampling seed of each held-out prompt: fixed by the run seed and the prompt alone."""
    return [(run_seed * 31 + 1_000_000_007 + i * 7_919) % (2**31 - 1) for i in prompt_indices]


@torch.no_grad()
def evaluate(engine: Any, prompt_ids: list[list[int]], references: list[list[Any]], rewarder: Any,
             samples: int, seed: int, info: DistInfo, greedy: bool = True) -> EvalResult | None:
    """Sample `samples` completions (and one greedy) per held-out prompt; score them; gather ranks.

    Each rank evaluates prompts rank, rank + world, ..., padded with repeats to the same number
    on every rank (`lockstep.even_shard`: under FSDP2 every rank must make the same generate
    calls); the repeats' results are dropped. The gathered results are put back in prompt
    order, the same order at every evaluation and for any number of processes, so two
    results pair prompt by prompt.
    """
    if not prompt_ids:
        return None
    t0 = time.perf_counter()
    mine, real = even_shard(len(prompt_ids), info)
    seeds = eval_seeds(seed, mine)
    prompts = [prompt_ids[i] for i in mine]
    refs = [references[i] for i in mine]
    rows = torch.zeros(0, 5, dtype=torch.long)  # prompt index, correct, judged, greedy, greedy judged
    if mine:
        ro = engine.generate(prompts, samples, seeds)
        scored = rewarder.score(ro.texts, [r for r in refs for _ in range(samples)])
        counts = scored.correct.view(-1, samples).sum(dim=1).long()
        judged = scored.judged.view(-1, samples).sum(dim=1).long()
        hits = torch.zeros(len(mine), dtype=torch.long)
        hits_judged = torch.ones(len(mine), dtype=torch.long)
        if greedy:
            rg = engine.generate(prompts, 1, seeds, greedy=True)
            sg = rewarder.score(rg.texts, refs)
            hits, hits_judged = sg.correct.long(), sg.judged.long()
        rows = torch.stack([torch.tensor(mine), counts, judged, hits, hits_judged], dim=1)[:real]
    table = gather_rows(rows, info)
    table = table[torch.argsort(table[:, 0])].tolist()
    judged_all = [r[2] for r in table]
    greedy_judged = [r[4] for r in table] if greedy else None
    return EvalResult(
        samples, [r[1] for r in table], [r[3] for r in table] if greedy else None,
        time.perf_counter() - t0,
        None if all(j == samples for j in judged_all) else judged_all,
        None if greedy_judged is None or all(greedy_judged) else greedy_judged)


def evaluate_model(model_dir: str, seed: int = 0, rewarder: Any = None, **config: Any) -> EvalResult:
    """Evaluate a saved model on a config's held-out set, as the trainer does (CPU or GPU).

    Pass the `rewarder` of an earlier call to reuse its verifiers (and their workers)."""
    from .config import make_config
    from .data import load_train_and_eval
    from .distributed import setup
    from .models import load_model, load_tokenizer, tokenize_prompts
    from .rewards import OutcomeRewarder
    from .rollout import build_engine

    cfg = make_config(model=model_dir, seed=seed, progress=False, **config)
    info = setup(cfg.device)
    tokenizer = load_tokenizer(cfg.tokenizer or model_dir)
    model = load_model(model_dir, torch.float32, info.device)
    _, eval_set = load_train_and_eval(cfg, tokenizer)
    own = rewarder is None
    if own:
        rewarder = OutcomeRewarder(cfg.verifier_kinds(), cfg.verifier_weight_list(), cfg.verifier_workers)
    try:
        refs = rewarder.references([p.record for p in eval_set])
        ids = tokenize_prompts([p.model_input for p in eval_set], tokenizer, cfg)
        engine = build_engine(cfg, model, tokenizer, model_dir, info.device, info.enabled)
        return evaluate(engine, ids, refs, rewarder, cfg.eval_samples or cfg.group_size, seed, info,
                        cfg.eval_greedy)
    finally:
        if own:
            rewarder.close()


def main(argv: list[str] | None = None) -> int:
    """Compare two models on the held-out set: accuracies with SEs and their paired difference."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("before", help="model directory (e.g. runs/warmstart)")
    parser.add_argument("after", help="model directory (e.g. runs/gated_grpo/checkpoints/step-000150/model)")
    parser.add_argument("--dataset", default=None, help="trainer dataset (default: the trainer's)")
    parser.add_argument("--eval-size", type=int, default=None, help="held-out prompts (default: the trainer's)")
    parser.add_argument("--seed", type=int, default=0, help="evaluation seeds of both models")
    parser.add_argument("--after-seed", type=int, default=None,
                        help="also evaluate `after` with other seeds, to show what common random numbers save")
    args = parser.parse_args(argv)
    from .config import make_config
    from .rewards import OutcomeRewarder

    config = {k: v for k, v in (("dataset", args.dataset), ("eval_size", args.eval_size)) if v is not None}
    cfg = make_config(**config)
    # one set of verifiers for every evaluation: they read the same held-out references
    with OutcomeRewarder(cfg.verifier_kinds(), cfg.verifier_weight_list(), cfg.verifier_workers) as rewarder:
        shared = {"rewarder": rewarder, **config}
        runs = {"before": evaluate_model(args.before, args.seed, **shared),
                "after": evaluate_model(args.after, args.seed, **shared)}
        if args.after_seed is not None:
            runs["after, other seeds"] = evaluate_model(args.after, args.after_seed, **shared)
    before = runs["before"]
    print(f"{before.prompts} prompts x {before.samples} samples at T=1, plus greedy; +- one standard error")
    for name, r in runs.items():
        p, g = r.pass_at_1(), r.greedy_accuracy()
        line = f"  {name:<20} pass@1 {100 * p.mean:5.1f} +- {100 * p.se:.1f}"
        print(line + (f" | greedy {100 * g.mean:5.1f} +- {100 * g.se:.1f}" if g else "") + f" | {r.seconds:.0f} s")
    for name, r in list(runs.items())[1:]:
        d = compare(before, r)
        unpaired = math.hypot(before.pass_at_1().se, r.pass_at_1().se)
        print(f"  {name} - before: pass@1 {100 * d['pass@1'].mean:+.1f} +- {100 * d['pass@1'].se:.1f} paired "
              f"(+- {100 * unpaired:.1f} unpaired)"
              + (f" | greedy {100 * d['greedy'].mean:+.1f} +- {100 * d['greedy'].se:.1f}" if d["greedy"] else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

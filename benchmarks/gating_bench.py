"""Gating benchmark: VeriGate's cost at training scale, and collapse rates by Monte Carlo.

Part 1 times `verigate_advantages` on an N x G x T batch against the plain-Python reference
(veristep.gating.spec_loops) in the same process, checks that both agree, and sets the cost
against one forward pass of the tiny model over the same batch (measured on a few sequences
of length T and scaled linearly to N x G sequences, since the forward pass is linear in the
batch size).

Part 2 draws per-prompt success probabilities p ~ Beta(a, b), samples G binary rewards per
prompt, and reports the measured advantage-collapse rate (ACR) against E[p^G + (1 - p)^G],
plus the fraction of groups that get a non-zero learning signal from GRPO, VeriGate (with a
simulated PRM), AVSPO and sign advantages. Part 3 checks, on the same simulation, how often
the PRM branch's step advantage has the sign of the simulated step label (before / after the
first error), for raw and centred scores and for DeepSeekMath's process GRPO.

Writes every number to benchmarks/results/gating_bench.json.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from veristep.gating import (
    collapse_metrics,
    outcome_advantages,
    process_grpo_advantages,
    verigate_advantages,
)
from veristep.gating import spec_loops as ref

RESULTS = Path(__file__).resolve().parent / "results" / "gating_bench.json"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (all have defaults matching the committed results)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=64, help="prompts per batch (N)")
    p.add_argument("--g", type=int, default=16, help="samples per prompt (G)")
    p.add_argument("--t", type=int, default=4096, help="completion tokens per sample (T)")
    p.add_argument("--s", type=int, default=32, help="max steps per completion (S)")
    p.add_argument("--repeats", type=int, default=7, help="timed runs of the tensor version (median)")
    p.add_argument("--forward-seqs", type=int, default=4,
                   help="sequences of length T in the measured tiny-model forward pass")
    p.add_argument("--forward-repeats", type=int, default=3, help="timed forward passes (median)")
    p.add_argument("--skip-forward", action="store_true", help="skip the tiny-model comparison")
    p.add_argument("--mc-prompts", type=int, default=20000, help="prompts per Monte-Carlo cell")
    p.add_argument("--beta", nargs="+", default=["1,1", "0.5,2"],
                   help="Beta(a,b) parameters of per-prompt success, as a,b")
    p.add_argument("--groups", type=int, nargs="+", default=[4, 8, 16], help="group sizes G")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads for every timed part (1: the reference is one "
                   "Python thread, and a shared machine times one thread more steadily)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=RESULTS, help="JSON output path")
    return p.parse_args(argv)


# ----------------------------------------------------------------------------- simulation


def simulate_batch(
    n: int, g: int, max_steps: int, t: int | None, a: float, b: float, gen: torch.Generator
) -> dict[str, torch.Tensor]:
    """Binary rewards with p ~ Beta(a, b) per prompt, plus a simulated PRM on every rollout.

    Correct rollouts score ~0.85 on every step; a wrong rollout has a first-error step k,
    scoring ~0.8 before k and ~0.25 from k on (Gaussian noise, sd 0.1, clipped to [0, 1]).
    With t given, each rollout gets a length in [t/4, t] tokens split into its steps at random
    boundaries; otherwise each step is one token.
    """
    # torch's Beta sampler takes no generator; numpy's seeded one keeps runs reproducible.
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=gen))
    p = torch.from_numpy(np.random.default_rng(seed).beta(a, b, n))
    rewards = (torch.rand(n, g, generator=gen) < p[:, None]).to(torch.float64)
    n_steps = torch.randint(2, max_steps + 1, (n, g), generator=gen)
    positions = torch.arange(max_steps)
    step_mask = positions < n_steps[..., None]
    first_error = (torch.rand(n, g, generator=gen) * n_steps).long()
    before_error = positions < first_error[..., None]
    correct = rewards.bool()[..., None]
    good = correct | before_error
    noise = 0.1 * torch.randn(n, g, max_steps, generator=gen, dtype=torch.float64)
    base = torch.where(correct, 0.85, torch.where(before_error, 0.8, 0.25))
    scores = torch.where(step_mask, (base + noise).clamp(0, 1), 0.0)
    if t is None:
        token_step = torch.where(step_mask, positions, -1)
    else:
        lengths = torch.randint(t // 4, t + 1, (n, g), generator=gen)
        # Step j covers the tokens whose relative position falls in [cut_j, cut_{j+1}).
        cuts = torch.sort(torch.rand(n, g, max_steps, generator=gen), -1).values
        cuts = torch.where(step_mask, cuts, 2.0)
        cuts[..., 0] = 0.0
        rel = (torch.arange(t) / lengths[..., None]).contiguous()
        token_step = torch.searchsorted(cuts.contiguous(), rel, right=True) - 1
        token_step = torch.minimum(token_step, n_steps[..., None] - 1)
        token_step = torch.where(torch.arange(t) < lengths[..., None], token_step, -1)
    return {
        "p": p, "rewards": rewards, "step_scores": scores, "step_mask": step_mask,
        "token_step": token_step, "good_step": good & step_mask,
    }


def beta_collapse(a: float, b: float, g: int) -> float:
    """E[p^G + (1 - p)^G] for p ~ Beta(a, b): B(a+G, b)/B(a, b) + B(a, b+G)/B(a, b)."""
    lb = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    up = math.lgamma(a + g) + math.lgamma(b) - math.lgamma(a + b + g)
    down = math.lgamma(a) + math.lgamma(b + g) - math.lgamma(a + b + g)
    return math.exp(up - lb) + math.exp(down - lb)


# ----------------------------------------------------------------------------- part 1


def _median_time(fn, repeats: int) -> float:
    """Median wall time of `fn()` over `repeats` runs after one warm-up."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _ragged_inputs(batch: dict[str, torch.Tensor]) -> tuple[list, list, list]:
    """Padded tensors -> the reference's ragged lists (rewards, step scores, token steps)."""
    rewards = batch["rewards"].tolist()
    lengths = batch["step_mask"].sum(-1).tolist()
    scores = batch["step_scores"].tolist()
    steps = [[row[:k] for row, k in zip(sg, kg, strict=True)] for sg, kg in zip(scores, lengths, strict=True)]
    token_steps = [[[j for j in row if j >= 0] for row in grp] for grp in batch["token_step"].tolist()]
    return rewards, steps, token_steps


def _padded_output(ragged: list, t: int) -> torch.Tensor:
    """The reference's ragged token advantages -> a padded [N, G, T] tensor."""
    return torch.tensor([[row + [0.0] * (t - len(row)) for row in grp] for grp in ragged])


def bench_scenario(batch: dict[str, torch.Tensor], repeats: int) -> dict:
    """Time tensor VeriGate vs the reference (bare, and with tensor <-> list conversion)."""
    inputs = (batch["rewards"], batch["step_scores"], batch["step_mask"], batch["token_step"])
    fast = _median_time(lambda: verigate_advantages(*inputs), repeats)
    adv, metrics = verigate_advantages(*inputs)

    start = time.perf_counter()
    ragged = _ragged_inputs(batch)
    converted_in = time.perf_counter() - start
    start = time.perf_counter()
    expected, _ = ref.verigate(*ragged)
    slow = time.perf_counter() - start
    start = time.perf_counter()
    padded = _padded_output(expected, batch["token_step"].shape[-1])
    converted_out = time.perf_counter() - start
    return {
        "tokens": int((batch["token_step"] >= 0).sum()),
        "gated_groups": metrics["gate/gated_groups"],
        "verigate_s": fast,
        "reference_s": slow,
        "reference_with_conversion_s": converted_in + slow + converted_out,
        "speedup": slow / fast,
        "speedup_with_conversion": (converted_in + slow + converted_out) / fast,
        # The tensor run is float32, the reference float64.
        "max_abs_diff_vs_reference": float((adv.double() - padded.double()).abs().max()),
    }


def bench_speed(args: argparse.Namespace, gen: torch.Generator) -> dict:
    """Both scenarios at N x G x T, then the tiny-model forward pass for scale."""
    batch = simulate_batch(args.n, args.g, args.s, args.t, 0.5, 2.0, gen)
    batch["rewards"] = batch["rewards"].float()
    batch["step_scores"] = batch["step_scores"].float()
    scenarios = {"beta_0.5_2": bench_scenario(batch, args.repeats)}
    # Worst case for the PRM branch: every group all wrong, so every token is looked up.
    batch["rewards"] = torch.zeros_like(batch["rewards"])
    scenarios["all_gated"] = bench_scenario(batch, args.repeats)
    out = {
        "shape": {"N": args.n, "G": args.g, "T": args.t, "S_max": args.s},
        "torch_threads": torch.get_num_threads(),
        "scenarios": scenarios,
    }
    if not args.skip_forward:
        out.update(bench_forward(args, max(s["verigate_s"] for s in scenarios.values())))
    return out


def bench_forward(args: argparse.Namespace, verigate_s: float) -> dict:
    """Tiny-model forward time on a few length-T sequences, scaled to N x G sequences."""
    from veristep.train.demo.tiny import build_char_tokenizer, build_tiny_causal_lm

    tok = build_char_tokenizer(model_max_length=args.t)
    model = build_tiny_causal_lm(tok, max_position_embeddings=args.t).eval()
    ids = torch.randint(4, len(tok), (args.forward_seqs, args.t))
    with torch.inference_mode():
        per_call = _median_time(lambda: model(input_ids=ids).logits, args.forward_repeats)
    sequences = args.n * args.g
    full = per_call * sequences / args.forward_seqs
    return {
        "forward_measured_seqs": args.forward_seqs,
        "forward_measured_s": per_call,
        "forward_full_batch_s_extrapolated": full,
        "verigate_over_forward": verigate_s / full,
        "tiny_model": {"params": sum(p.numel() for p in model.parameters()),
                       "layers": model.config.num_hidden_layers,
                       "hidden": model.config.hidden_size},
    }


# ----------------------------------------------------------------------------- part 2 / 3


def bench_collapse(args: argparse.Namespace, gen: torch.Generator) -> list[dict]:
    """Measured ACR vs Beta closed form, and the share of groups with a non-zero signal."""
    rows = []
    for spec in args.beta:
        a, b = (float(x) for x in spec.split(","))
        for g in args.groups:
            batch = simulate_batch(args.mc_prompts, g, 8, None, a, b, gen)
            r = batch["rewards"]
            m = collapse_metrics(r)
            p = batch["p"].double()
            signal = {
                "grpo": outcome_advantages(r, "grpo"),
                "avspo": outcome_advantages(r, "avspo"),
                "sign": outcome_advantages(r, "sign"),
            }
            frac = {k: float((v != 0).any(-1).double().mean()) for k, v in signal.items()}
            for gate in ("all_wrong", "any_collapsed"):
                adv, _ = verigate_advantages(
                    r, batch["step_scores"], batch["step_mask"], batch["token_step"], gate=gate
                )
                frac[f"verigate_{gate}"] = float((adv != 0).flatten(1).any(-1).double().mean())
            rows.append({
                "beta": [a, b], "G": g, "prompts": args.mc_prompts,
                "acr": m["acr"], "all_wrong": m["all_wrong_rate"], "all_correct": m["all_correct_rate"],
                "expected_acr": beta_collapse(a, b, g),
                "expected_acr_sampled_p": float((p**g + (1 - p) ** g).mean()),
                "iid_at_mean_p": float(p.mean() ** g + (1 - p.mean()) ** g),
                "nonzero_signal": frac,
                "step_sign_agreement": step_sign_agreement(batch),
            })
    return rows


def step_sign_agreement(batch: dict[str, torch.Tensor]) -> dict[str, float]:
    """Share of steps in all-wrong groups whose advantage sign matches the simulated label."""
    r, s, mask, good = batch["rewards"], batch["step_scores"], batch["step_mask"], batch["good_step"]
    gated = (r == 0).all(-1)
    s, mask, good = s[gated], mask[gated], good[gated]
    out = {}
    variants = {
        "verigate_raw": lambda: verigate_advantages(
            torch.zeros(s.shape[:2], dtype=s.dtype), s, mask, torch.where(mask, torch.arange(s.shape[2]), -1)
        )[0],
        "verigate_centred": lambda: verigate_advantages(
            torch.zeros(s.shape[:2], dtype=s.dtype), s, mask, torch.where(mask, torch.arange(s.shape[2]), -1),
            centre_scores=True,
        )[0],
        "process_grpo": lambda: process_grpo_advantages(s, mask),
    }
    for name, fn in variants.items():
        adv = fn()
        valid = mask & (adv != 0)
        agree = ((adv > 0) == good) & valid
        out[name] = float(agree.sum() / valid.sum().clamp(min=1))
    return out


# ----------------------------------------------------------------------------- report


def _beta(row: dict) -> str:
    """A row's Beta parameters as "a,b"."""
    return "{:g},{:g}".format(*row["beta"])


def print_tables(speed: dict | None, rows: list[dict]) -> None:
    """Human-readable tables of everything measured."""
    if speed:
        shape = speed["shape"]
        print(f"\n== VeriGate cost, N x G x T = {shape['N']} x {shape['G']} x {shape['T']}, "
              f"up to {shape['S_max']} steps, {speed['torch_threads']} torch thread(s)")
        print(f"{'scenario':<12}{'tokens':>9}{'gated':>7}{'tensor s':>10}{'ref s':>9}"
              f"{'ref+conv s':>11}{'x ref':>8}{'x ref+conv':>11}{'max|diff|':>11}")
        for name, sc in speed["scenarios"].items():
            print(f"{name:<12}{sc['tokens']:>9}{sc['gated_groups']:>7}{sc['verigate_s']:>10.4f}"
                  f"{sc['reference_s']:>9.3f}{sc['reference_with_conversion_s']:>11.3f}"
                  f"{sc['speedup']:>8.1f}{sc['speedup_with_conversion']:>11.1f}"
                  f"{sc['max_abs_diff_vs_reference']:>11.1e}")
        if "forward_full_batch_s_extrapolated" in speed:
            print(f"tiny-model forward: {speed['forward_measured_s']:.3f} s for "
                  f"{speed['forward_measured_seqs']} x {shape['T']} tokens, scaled to "
                  f"{shape['N'] * shape['G']} sequences: "
                  f"{speed['forward_full_batch_s_extrapolated']:.1f} s; slowest VeriGate / forward "
                  f"= {speed['verigate_over_forward']:.1e}")
    print("\n== Advantage collapse, binary rewards, p ~ Beta(a, b) per prompt "
          f"({rows[0]['prompts'] if rows else 0} prompts per row)")
    head = (f"{'Beta':<10}{'G':>3}{'ACR':>8}{'E[..]':>8}{'iid p̄':>8}{'wrong':>8}{'right':>8}"
            f"{'GRPO':>8}{'VG':>8}{'VG any':>8}{'AVSPO':>8}{'sign':>8}")
    print(head)
    for row in rows:
        f = row["nonzero_signal"]
        print(f"{_beta(row):<10}{row['G']:>3}{row['acr']:>8.3f}"
              f"{row['expected_acr']:>8.3f}{row['iid_at_mean_p']:>8.3f}{row['all_wrong']:>8.3f}"
              f"{row['all_correct']:>8.3f}{f['grpo']:>8.3f}{f['verigate_all_wrong']:>8.3f}"
              f"{f['verigate_any_collapsed']:>8.3f}{f['avspo']:>8.3f}{f['sign']:>8.3f}")
    print("ACR measured; E[..] = E[p^G + (1-p)^G] under the Beta; iid p̄ = the same at the mean p;"
          "\nlast five columns: share of groups with any non-zero advantage.")
    print("\n== PRM branch on all-wrong groups: share of steps whose advantage sign matches the"
          " simulated label (+ before the first error, - from it on)")
    print(f"{'Beta':<10}{'G':>3}{'raw':>10}{'centred':>10}{'DSM proc':>10}")
    for row in rows:
        a = row["step_sign_agreement"]
        print(f"{_beta(row):<10}{row['G']:>3}{a['verigate_raw']:>10.3f}"
              f"{a['verigate_centred']:>10.3f}{a['process_grpo']:>10.3f}")


def main(argv: list[str] | None = None) -> int:
    """Run both parts, print the tables and write the JSON."""
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(args.seed)
    speed = bench_speed(args, gen)
    rows = bench_collapse(args, gen)
    print_tables(speed, rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "machine": {"python": platform.python_version(), "torch": torch.__version__,
                    "cpu": platform.processor() or platform.machine()},
        "speed": speed,
        "collapse": rows,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

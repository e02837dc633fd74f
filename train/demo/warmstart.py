"""The warm start: a tiny character-level model taught the arithmetic task from noisy demos.

RL needs a policy that sometimes succeeds. `ensure_warm_start` builds the character
tokenizer and a tiny Llama-architecture model (veristep.train.demo.tiny), trains it briefly with
supervised learning on demonstrations that contain injected mistakes (veristep.train.demo.task),
and saves it, so that its success rate is high on easy prompts and low but not zero on hard
ones: the regime where GRPO groups collapse. The recipe is shipped, not the weights; the
result is cached under a hash of the recipe, with a checksum of its weights.

The build is bit-reproducible across machines of one kind: it runs in a child process whose
thread count and CPU code paths are pinned before torch starts (a fixed number of threads, no
dynamic thread adjustment, torch's AVX2 kernels and MKL's AVX2 code branch), its data order and
initialisation are seeded, and it uses deterministic algorithms. The demonstrations come only from
the "demo" part of the problem space (`task.problem_part`), so no training or held-out prompt of
`builtin:arith` is one the model was taught.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from .task import LEVELS, check_completion, make_noisy_demonstrations, make_problems

#: Bump when the training code changes what a recipe produces, so old caches are rebuilt.
RECIPE_VERSION = 3
META_FILE = "warmstart.json"
WEIGHTS_FILE = "model.safetensors"
#: Weight checksums of reference builds (recipe hash -> {sha256: the machine that built it}), to
#: tell a user which documented numbers their machine reproduces (docs/trainer.md, warm start).
REFERENCE_SHA256: dict[str, dict[str, str]] = {
    "86e97d6bc5f283e3": {
        "86879150ef37a214c7e3a796b32444ea4933030ec2ee29f992293cb1a58d59d3": "the first reference machine",
        "0749d44a0fdd1876e1961a84f68aa9cd60cf498607d0bab0757904f159e87f39":
            "AMD EPYC, torch 2.13.0+cpu, transformers 5.19.0",
    },
    # CONDITION_RECIPES["chain8"]: the build the step-credit experiment's runs started from
    # (benchmarks/results/gating_experiment_chain8.json), rebuilt bit-identical by a fresh clone.
    "1b13153f0d85716a": {
        "1b6b3239b2ba3ea6817aa84c9a9e697e114cb0e32436daea5dd9330e87aa1a6e":
            "AMD EPYC, torch 2.13.0+cpu, transformers 5.19.0",
        # Two builds, one with oneDNN also held to AVX2: the same weights (README, make run).
        "6ff292aee7590b640cd61ad6880aaad22034336ad96b44053a80b38329313c39":
            "Intel Xeon (AVX-512 present, AVX2 pinned), torch 2.13.0+cpu, transformers 5.19.0",
    },
}


#: Warm-start recipes of the experiment's conditions other than the default one (fields of
#: WarmStartRecipe). "chain8": demonstrations of 8-step +/- chains only, 30 % of their steps
#: miscomputed on purpose, so the policy makes step-local slips it can learn to avoid (the
#: step-credit condition, docs/experiment.md); longer sequences need more steps and tokens.
CONDITION_RECIPES: dict[str, dict[str, Any]] = {
    "chain8": {"levels": ["chain8"], "demos_per_level": 5000, "step_error_rate": 0.3,
               "train_steps": 1000, "max_new_tokens": 180},
}


@dataclass(frozen=True)
class WarmStartRecipe:
    """Everything that determines the warm-started model (hashed for the cache)."""

    # model (head dim = hidden_size / num_heads must stay >= 64 for vLLM's CPU kernel)
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 2
    num_kv_heads: int = 1
    intermediate_size: int = 384
    # data: demonstrations drawn evenly from these difficulty levels of veristep.train.demo.task
    levels: tuple[str, ...] = ("easy", "medium")
    demos_per_level: int = 4000
    step_error_rate: float = 0.05
    answer_error_rate: float = 0.03
    # optimisation
    train_steps: int = 400
    batch_size: int = 64
    lr: float = 3e-3
    warmup_steps: int = 50
    weight_decay: float = 0.01
    # numerics: the build's threads and CPU code paths are pinned so its weights are the same on
    # every machine; "native" lets torch and MKL use the widest instructions (faster, machine-bound)
    threads: int = 2
    isa: str = "avx2"
    # evaluation written to warmstart.json (not part of training)
    eval_per_level: int = 64
    max_new_tokens: int = 110

    def __post_init__(self) -> None:
        unknown = [lv for lv in self.levels if lv not in LEVELS]
        if unknown or not self.levels:
            raise ValueError(f"levels must be a non-empty subset of {list(LEVELS)}, got {self.levels}")
        if self.isa not in ("avx2", "native"):
            raise ValueError(f"isa must be avx2 or native, got {self.isa!r}")
        for name in ("demos_per_level", "train_steps", "batch_size", "max_new_tokens", "threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.hidden_size // self.num_heads < 64:
            raise ValueError(
                f"hidden_size/num_heads = {self.hidden_size // self.num_heads} < 64: raise "
                "hidden_size or lower num_heads (vLLM's CPU attention needs head dim >= 64)"
            )


def recipe_from_kwargs(**recipe: Any) -> WarmStartRecipe:
    """Build a recipe from keywords, naming any unknown one."""
    known = {f.name for f in fields(WarmStartRecipe)}
    unknown = set(recipe) - known
    if unknown:
        raise ValueError(f"unknown warm-start option(s) {sorted(unknown)}; known: {sorted(known)}")
    if "levels" in recipe:
        recipe["levels"] = tuple(recipe["levels"])
    return WarmStartRecipe(**recipe)


def recipe_hash(recipe: WarmStartRecipe, seed: int) -> str:
    """A stable hash of the recipe, the seed and the recipe version."""
    payload = json.dumps(
        {"version": RECIPE_VERSION, "seed": seed, "recipe": asdict(recipe)}, sort_keys=True
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def ensure_warm_start(out_dir: str | Path, seed: int = 0, **recipe: Any) -> Path:
    """Return `out_dir` holding the warm-started model and tokenizer, training it if not cached.

    A cache counts only if its recipe hash matches and its weights still match the checksum
    recorded when they were built; otherwise the model is rebuilt (in a pinned child process,
    with a progress bar on stderr).
    """
    out_dir = Path(out_dir)
    spec = recipe_from_kwargs(**recipe)
    key = recipe_hash(spec, seed)
    if _cached(out_dir, key):
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with _lock(out_dir.parent / f".{out_dir.name}.lock"):
        if _cached(out_dir, key):  # another process built it while we waited
            return out_dir
        if out_dir.exists() and any(out_dir.iterdir()) and not (out_dir / META_FILE).exists():
            raise ValueError(f"{out_dir} exists and is not a warm-start directory; choose another")
        if (out_dir / META_FILE).exists():
            print(f"warm start in {out_dir}: {_stale_reason(out_dir, key)}; rebuilding", file=sys.stderr, flush=True)
        tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            _build_in_child(tmp, spec, seed)
            meta = load_meta(tmp)
            meta["hash"] = key
            meta["weights_sha256"] = weights_sha256(tmp)
            # The metadata file is rewritten last: with the hash, it marks a complete directory.
            (tmp / META_FILE).write_text(json.dumps(meta, indent=2))
            if out_dir.exists():
                shutil.rmtree(out_dir)
            os.replace(tmp, out_dir)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"warm start ready in {out_dir}: {describe_checksum(meta)}", file=sys.stderr, flush=True)
    return out_dir


def load_meta(model_dir: str | Path) -> dict[str, Any]:
    """Read the recipe, hash, weight checksum, timings and evaluation stored with a warm-started model."""
    return json.loads((Path(model_dir) / META_FILE).read_text())


def weights_sha256(model_dir: str | Path) -> str:
    """sha256 over the saved tensors (names, dtypes, shapes and bytes, in name order)."""
    from safetensors import safe_open

    digest = hashlib.sha256()
    with safe_open(str(Path(model_dir) / WEIGHTS_FILE), framework="numpy") as f:
        for name in sorted(f.keys()):
            tensor = f.get_tensor(name)
            digest.update(f"{name}:{tensor.dtype}:{tensor.shape};".encode())
            digest.update(tensor.tobytes())
    return digest.hexdigest()


def describe_checksum(meta: dict[str, Any]) -> str:
    """One line: the weights' checksum and which reference build of this recipe it matches, if any."""
    sha = meta.get("weights_sha256", "")
    refs = REFERENCE_SHA256.get(meta.get("hash", ""))
    if not refs:
        return f"weights sha256 {sha[:16]} (no reference build for this recipe)"
    if sha in refs:
        return f"weights sha256 {sha[:16]}, identical to the reference build on {refs[sha]}"
    known = ", ".join(k[:16] for k in refs)
    return (f"weights sha256 {sha[:16]} differ from every reference build's ({known}): this machine "
            "computes differently (see docs/trainer.md, warm start); results will not match the docs")


def _stale_reason(out_dir: Path, key: str) -> str:
    """Why a warm-start directory is not a valid cache for recipe hash `key`."""
    try:
        meta = load_meta(out_dir)
    except (OSError, ValueError):
        return "its metadata is unreadable"
    if meta.get("hash") != key:
        return "it was built from another recipe"
    return "its weights do not match the checksum recorded when they were built"


def _cached(out_dir: Path, key: str) -> bool:
    """Whether `out_dir` holds a complete warm start of recipe hash `key` with intact weights."""
    try:
        meta = load_meta(out_dir)
        return (meta.get("hash") == key and (out_dir / "config.json").exists()
                and meta.get("weights_sha256") == weights_sha256(out_dir))
    except (OSError, ValueError):
        return False


def pinned_env(recipe: WarmStartRecipe) -> dict[str, str]:
    """Environment that fixes the build's numerics; it must be set before torch is imported."""
    threads = str(recipe.threads)
    env = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
           # Without these, MKL and OpenMP may use fewer threads than asked, depending on the
           # machine's load and core count, and a different split changes the sums' rounding.
           "MKL_DYNAMIC": "FALSE", "OMP_DYNAMIC": "FALSE",
           # Idle threads sleep instead of spinning: on a loaded machine spinning threads made
           # a 2-thread step 3x slower than a 1-thread one (numerics unchanged).
           "OMP_WAIT_POLICY": "PASSIVE"}
    if recipe.isa == "avx2":
        # torch's own kernels and MKL's code branch: AVX2 exists on every x86-64 machine of this
        # kind, whereas AVX-512 (picked by default where present) gives other roundings.
        env.update({"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"})
    return env


def _build_in_child(out_dir: Path, recipe: WarmStartRecipe, seed: int) -> None:
    """Train the model in a child process with pinned numerics; its progress bar goes to stderr."""
    print(f"building the warm-start model ({recipe.train_steps} steps on {recipe.threads} threads, once: "
          f"it is cached in {out_dir.parent})", file=sys.stderr, flush=True)
    env = {**os.environ, **pinned_env(recipe)}
    cmd = [sys.executable, "-m", "veristep.train.demo.warmstart", str(out_dir), "--seed", str(seed),
           "--recipe", json.dumps(asdict(recipe)), "--in-process"]
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, check=False)
    if proc.returncode != 0 or not (out_dir / META_FILE).exists():
        raise RuntimeError(f"building the warm start failed (exit code {proc.returncode}); its error is above")


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    """An exclusive inter-process lock, so concurrent callers train the model once."""
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def train_warm_start(out_dir: Path, recipe: WarmStartRecipe, seed: int) -> dict[str, Any]:
    """Train the tiny model on noisy demonstrations, save it to `out_dir`, return metadata."""
    import torch

    from .tiny import build_char_tokenizer, build_tiny_causal_lm

    t0 = time.perf_counter()
    torch.set_num_threads(recipe.threads)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed)
    tokenizer = build_char_tokenizer(model_max_length=512)
    model = build_tiny_causal_lm(
        tokenizer,
        hidden_size=recipe.hidden_size,
        num_layers=recipe.num_layers,
        num_heads=recipe.num_heads,
        num_kv_heads=recipe.num_kv_heads,
        intermediate_size=recipe.intermediate_size,
        max_position_embeddings=512,
        seed=seed,
    )
    demos = []
    for i, level in enumerate(recipe.levels):
        problems = make_problems(recipe.demos_per_level, seed=1000 * seed + i, level=level, part="demo")
        demos += make_noisy_demonstrations(
            problems, seed=1000 * seed + i, step_error_rate=recipe.step_error_rate,
            answer_error_rate=recipe.answer_error_rate,
        )
    input_ids, labels = _encode_demos(tokenizer, [(d.prompt, d.completion) for d in demos])
    losses = _supervised_train(model, input_ids, labels, tokenizer.pad_token_id, recipe, seed)
    train_s = time.perf_counter() - t0

    t1 = time.perf_counter()
    evaluation = evaluate_levels(
        model, tokenizer, recipe.levels, n=recipe.eval_per_level, seed=10_000 + seed,
        max_new_tokens=recipe.max_new_tokens,
    )
    eval_s = time.perf_counter() - t1

    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return {
        "recipe": asdict(recipe),
        "seed": seed,
        "version": RECIPE_VERSION,
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "demo_correct_rate": sum(d.correct for d in demos) / len(demos),
        "loss_first": losses[0],
        "loss_last": sum(losses[-20:]) / len(losses[-20:]),
        "loss_curve": [round(sum(losses[i : i + 25]) / len(losses[i : i + 25]), 4) for i in range(0, len(losses), 25)],
        "train_seconds": round(train_s, 2),
        "eval_seconds": round(eval_s, 2),
        "torch_threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "pinned_env": {k: os.environ.get(k) for k in pinned_env(recipe)},
        "build_machine": _build_machine(),
        "eval": evaluation,
    }


def _build_machine() -> dict[str, str]:
    """Library versions and CPU model: what to compare when two machines' weights differ."""
    import platform

    import torch
    import transformers

    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.partition(":")[2].strip()
                break
    return {"torch": torch.__version__, "transformers": transformers.__version__, "cpu": cpu}


def _encode_demos(tokenizer, pairs: list[tuple[str, str]]):
    """Tokenise (prompt, completion) pairs into right-padded ids and completion-only labels."""
    import torch

    rows, prompt_lens = [], []
    for prompt, completion in pairs:
        p = tokenizer(prompt, add_special_tokens=False).input_ids
        c = tokenizer(completion, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        rows.append(p + c)
        prompt_lens.append(len(p))
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for i, (row, plen) in enumerate(zip(rows, prompt_lens, strict=True)):
        input_ids[i, : len(row)] = torch.tensor(row)
        labels[i, plen : len(row)] = input_ids[i, plen : len(row)]
    return input_ids, labels


def _supervised_train(model, input_ids, labels, pad_id: int, recipe: WarmStartRecipe, seed: int) -> list[float]:
    """AdamW with linear warm-up and cosine decay on completion tokens; returns the loss curve."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(
        model.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay, betas=(0.9, 0.98)
    )

    def lr_factor(step: int) -> float:
        if step < recipe.warmup_steps:
            return (step + 1) / recipe.warmup_steps
        progress = (step - recipe.warmup_steps) / max(1, recipe.train_steps - recipe.warmup_steps)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    model.train()
    losses: list[float] = []
    bar = _progress(recipe.train_steps)
    # Batches mix levels and lengths: batches of similar lengths (less padding, a third less
    # work) never learnt the arithmetic in 600 steps (loss 0.41 against 0.10, docs/trainer.md).
    for step in range(recipe.train_steps):
        idx = torch.randint(0, input_ids.shape[0], (recipe.batch_size,), generator=gen)
        ids, lab = input_ids[idx], labels[idx]
        # Trim the batch to its longest row: right padding makes every row start at position 0.
        width = int((ids != pad_id).sum(1).max())
        ids, lab = ids[:, :width], lab[:, :width]
        loss = model(input_ids=ids, attention_mask=(ids != pad_id).long(), labels=lab).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if bar is not None:
            bar.update(1)
            if step % 10 == 0:
                bar.set_postfix(loss=f"{sum(losses[-10:]) / len(losses[-10:]):.3f}", refresh=False)
    if bar is not None:
        bar.close()
    model.eval()
    return losses


def _progress(total: int):
    """A progress bar with ETA on stderr (None where tqdm is missing)."""
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm comes with transformers; without it the build is just silent
        return None
    return tqdm(total=total, desc="warm start", unit="step", file=sys.stderr, mininterval=1.0,
                dynamic_ncols=True)


def generate_completions(
    model, tokenizer, prompts: list[str], temperature: float, max_new_tokens: int, seed: int = 0
) -> list[str]:
    """Generate one completion per prompt (greedy when temperature is 0), decoded without specials."""
    import torch

    torch.manual_seed(seed)
    batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    sampling = (
        {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
        if temperature > 0
        else {"do_sample": False}
    )
    with torch.no_grad():
        out = model.generate(
            **batch, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id, **sampling,
        )
    return tokenizer.batch_decode(out[:, batch.input_ids.shape[1] :], skip_special_tokens=True)


def evaluate_levels(
    model, tokenizer, levels: tuple[str, ...] | list[str], n: int, seed: int, max_new_tokens: int = 110
) -> dict[str, dict[str, float]]:
    """Success rate (exact final answer) and step accuracy per level, greedy and at temperature 1."""
    result: dict[str, dict[str, float]] = {}
    for i, level in enumerate(levels):
        problems = make_problems(n, seed=seed + i, level=level)
        prompts = [p["prompt"] for p in problems]
        row: dict[str, float] = {}
        for mode, temperature in (("greedy", 0.0), ("sampled_t1", 1.0)):
            completions = generate_completions(
                model, tokenizer, prompts, temperature, max_new_tokens, seed=seed + i
            )
            checks = [check_completion(c, p["answer"]) for c, p in zip(completions, problems, strict=True)]
            steps = [ok for ch in checks for ok in ch.steps_correct]
            row[f"{mode}_success"] = sum(ch.correct for ch in checks) / len(checks)
            row[f"{mode}_step_accuracy"] = sum(steps) / max(1, len(steps))
        result[level] = row
    return result


def main(argv: list[str] | None = None) -> int:
    """Build (or reuse) a warm start from the command line and print its evaluation."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-steps", type=int, default=None, help="override the recipe's train_steps")
    parser.add_argument("--recipe", default=None, help="JSON object of WarmStartRecipe fields")
    # The pinned child of ensure_warm_start: train here, with whatever numerics this process has.
    parser.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    recipe = json.loads(args.recipe) if args.recipe else {}
    if args.train_steps is not None:
        recipe["train_steps"] = args.train_steps
    if args.in_process:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # one bar: ours
        meta = train_warm_start(args.out_dir, recipe_from_kwargs(**recipe), args.seed)
        (args.out_dir / META_FILE).write_text(json.dumps(meta, indent=2))
        return 0
    t0 = time.perf_counter()
    path = ensure_warm_start(args.out_dir, seed=args.seed, **recipe)
    meta = load_meta(path)
    print(f"warm start in {path} ({time.perf_counter() - t0:.1f}s this call)")
    print(json.dumps({k: v for k, v in meta.items() if k != "recipe"}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

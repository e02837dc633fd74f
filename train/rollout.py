"""Rollout engines: sample G completions per prompt behind one interface (`hf` and `vllm`).

Both engines take prompt token ids and return `Rollouts` in group-major order: completion
`i * G + j` is sample j of prompt i. A completion ends with (and includes) the EOS token; one
that hit `max_new_tokens` without EOS is marked truncated.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from .logprobs import autocast, resolve_dtype


def group_rows(groups: Sequence[int], group_size: int) -> list[int]:
    """The rows of `groups` in a group-major batch (row `g * group_size + j` is sample j of group g)."""
    return [g * group_size + j for g in groups for j in range(group_size)]


@dataclass
class Rollouts:
    """Sampled completions of one batch of prompts, G per prompt, group-major."""

    prompt_ids: list[list[int]]  # one entry per completion (the prompt repeated G times)
    completion_ids: list[list[int]]
    texts: list[str]
    truncated: list[bool]
    #: Per-token log-probs of the sampled tokens under the engine, if it reports them.
    engine_logprobs: list[list[float]] | None = None
    timings: dict[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.completion_ids)

    def num_tokens(self) -> int:
        """Completion tokens in the batch."""
        return sum(len(c) for c in self.completion_ids)

    def extend(self, other: Rollouts) -> None:
        """Append another batch (used by dynamic sampling)."""
        self.prompt_ids += other.prompt_ids
        self.completion_ids += other.completion_ids
        self.texts += other.texts
        self.truncated += other.truncated
        if self.engine_logprobs is not None and other.engine_logprobs is not None:
            self.engine_logprobs += other.engine_logprobs
        else:
            self.engine_logprobs = None

    def select_groups(self, keep: list[int], group_size: int) -> Rollouts:
        """Keep only the groups (prompt indices) in `keep`, in that order."""
        rows = group_rows(keep, group_size)
        lp = self.engine_logprobs
        return Rollouts(
            prompt_ids=[self.prompt_ids[r] for r in rows],
            completion_ids=[self.completion_ids[r] for r in rows],
            texts=[self.texts[r] for r in rows],
            truncated=[self.truncated[r] for r in rows],
            engine_logprobs=None if lp is None else [lp[r] for r in rows],
            timings=dict(self.timings),
        )


class RolloutEngine(Protocol):
    """What the trainer needs from a generation engine."""

    def generate(self, prompt_ids: list[list[int]], group_size: int,
                 seeds: list[int] | None = None, greedy: bool = False) -> Rollouts:
        """Sample `group_size` completions for each prompt (greedy: the argmax path).

        The same prompts with the same `seeds` give the same samples from the same weights,
        and after a weight change they draw the same random numbers (common random numbers).
        """
        ...

    def update_weights(self, model: torch.nn.Module) -> None:
        """Make the engine sample from the trainer's current weights."""
        ...

    def sleep(self) -> None:
        """Free the engine's memory while the trainer runs (no-op if unsupported)."""
        ...

    def wake_up(self) -> None:
        """Undo `sleep` before the next generation."""
        ...


@dataclass
class SamplingConfig:
    """Sampling settings shared by the engines."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0


def _cut_at_eos(ids: list[int], eos_ids: set[int]) -> tuple[list[int], bool]:
    """Return the completion up to and including the first EOS, and whether it was truncated."""
    for k, tok in enumerate(ids):
        if tok in eos_ids:
            return ids[: k + 1], False
    return ids, True


def eos_token_ids(tokenizer: Any, model: Any | None = None) -> set[int]:
    """The token ids that end a completion: the tokenizer's EOS plus the model's generation EOS."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    gen = getattr(model, "generation_config", None)
    extra = getattr(gen, "eos_token_id", None)
    if isinstance(extra, int):
        ids.add(extra)
    elif isinstance(extra, (list, tuple)):
        ids.update(int(x) for x in extra)
    return ids


class HFRolloutEngine:
    """Sampling with transformers `generate` on the trainer's own model (CPU or GPU)."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, sampling: SamplingConfig,
                 device: torch.device, synced: bool = False, batch_size: int = 0,
                 per_prompt_seeds: bool = False, dtype: torch.dtype = torch.float32,
                 eos: set[int] | None = None) -> None:
        self.model = model  # the unwrapped module (DDP/FSDP wrappers are the trainer's business)
        self.tokenizer = tokenizer
        self.sampling = sampling
        self.device = device
        # FSDP ranks must run the same number of forward passes or the all-gathers deadlock.
        self.synced = synced
        self.batch_size = batch_size  # prompts per generate call (0: all)
        # One generate call per prompt under its own seed: samples then do not depend on the
        # batch composition or the world size (slower; for reproducibility checks).
        self.per_prompt_seeds = per_prompt_seeds
        self.dtype = dtype  # compute dtype of the forward passes (the weights may be float32)
        self.eos = set(eos) if eos else eos_token_ids(tokenizer, model)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos)

    @torch.no_grad()
    def generate(self, prompt_ids: list[list[int]], group_size: int,
                 seeds: list[int] | None = None, greedy: bool = False) -> Rollouts:
        """Sample with `model.generate`, left-padding the prompts.

        With `seeds`, the batch's random stream is seeded from them (or, with per_prompt_seeds,
        each prompt's from its own seed), so a batch sampled twice with the same seeds draws the
        same noise. The global RNG is left as it was.
        """
        t0 = time.perf_counter()
        out = Rollouts([], [], [], [])
        was_training = self.model.training
        self.model.eval()
        devices = [self.device] if self.device.type == "cuda" else []
        try:
            if self.per_prompt_seeds and seeds is not None:
                for p, seed in zip(prompt_ids, seeds, strict=True):
                    with torch.random.fork_rng(devices=devices):
                        torch.manual_seed(seed)
                        out.extend(self._generate_chunk([p], group_size, greedy))
            else:
                with torch.random.fork_rng(devices=devices, enabled=seeds is not None):
                    if seeds is not None:
                        torch.manual_seed(batch_seed(seeds))
                    for chunk in iter_chunks(prompt_ids, self.batch_size):
                        out.extend(self._generate_chunk(chunk, group_size, greedy))
        finally:
            self.model.train(was_training)
        out.engine_logprobs = None
        out.timings["rollout_s"] = time.perf_counter() - t0
        return out

    def _generate_chunk(self, prompt_ids: list[list[int]], group_size: int, greedy: bool) -> Rollouts:
        width = max(len(p) for p in prompt_ids)
        input_ids = torch.full((len(prompt_ids), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompt_ids), width), dtype=torch.long)
        for i, p in enumerate(prompt_ids):
            input_ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            attention[i, width - len(p):] = 1
        s = self.sampling
        with autocast(self.dtype, self.device):
            seqs = self.model.generate(
                input_ids=input_ids.to(self.device),
                attention_mask=attention.to(self.device),
                **({"do_sample": False} if greedy else {
                    "do_sample": True, "temperature": s.temperature, "top_p": s.top_p,
                    "top_k": 0,  # generate's default top_k=50 would silently change the distribution
                }),
                max_new_tokens=s.max_new_tokens,
                num_return_sequences=group_size,
                pad_token_id=self.pad_id,
                eos_token_id=sorted(self.eos),
                synced_gpus=self.synced,
                use_cache=True,  # a KV cache, whatever the training config says (O(T) not O(T^2))
            )
        new = seqs[:, width:].tolist()
        comps, truncs = zip(*(_cut_at_eos(row, self.eos) for row in new), strict=False) if new else ((), ())
        comps, truncs = list(comps), list(truncs)
        prompts = [list(p) for p in prompt_ids for _ in range(group_size)]
        texts = self.tokenizer.batch_decode(comps, skip_special_tokens=True)
        return Rollouts(prompts, comps, texts, truncs, engine_logprobs=None)

    def update_weights(self, model: torch.nn.Module) -> None:
        """Nothing to do: the engine samples from the trainer's module itself."""

    def sleep(self) -> None:
        """Nothing to free: the engine owns no memory of its own."""

    def wake_up(self) -> None:
        """Nothing to restore."""


class VLLMRolloutEngine:
    """A colocated vLLM engine in the trainer's process; weights are pushed after each step."""

    def __init__(self, model_path: str, tokenizer: Any, sampling: SamplingConfig, dtype: str,
                 seed: int, max_model_len: int, gpu_memory_utilization: float = 0.3,
                 sleep_mode: bool = False, tokenizer_path: str | None = None,
                 eos: set[int] | None = None) -> None:
        # In-process engine core: weight pushes are plain in-memory copies, no IPC.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        from vllm import LLM

        self.tokenizer = tokenizer
        self.sampling = sampling
        self.sleep_mode = sleep_mode
        self._sleeping = False
        # The caller passes the trainer's set (tokenizer EOS + the model's generation EOS), so
        # both engines stop on the same tokens; alone, only the tokenizer's is known here.
        self.eos = set(eos) if eos else eos_token_ids(tokenizer)
        kwargs: dict[str, Any] = dict(
            model=model_path,
            tokenizer=tokenizer_path or model_path,
            dtype=dtype,
            seed=seed,
            max_model_len=max_model_len,
            enable_sleep_mode=sleep_mode,
            enforce_eager=True,
            # Log-probs after temperature/top-p, i.e. of the distribution actually sampled,
            # so they are comparable to the trainer's pi_old.
            logprobs_mode="processed_logprobs",
        )
        if torch.cuda.is_available():
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
            # Under torchrun each rank hosts its own engine on its own GPU: vLLM must reuse the
            # launcher's process group instead of starting one (its "external_launcher" mode).
            kwargs["distributed_executor_backend"] = "external_launcher"
        self.llm = LLM(**kwargs)
        self._seed = seed
        self._calls = 0

    def generate(self, prompt_ids: list[list[int]], group_size: int,
                 seeds: list[int] | None = None, greedy: bool = False) -> Rollouts:
        """Sample with vLLM (a seed per request), asking for the sampled tokens' log-probs."""
        from vllm import SamplingParams

        t0 = time.perf_counter()
        self.wake_up()
        s = self.sampling
        self._calls += 1
        if seeds is None:
            seeds = [self._seed * 1_000_003 + self._calls * 1009 + i for i in range(len(prompt_ids))]
        params = [
            SamplingParams(
                n=group_size,
                temperature=0.0 if greedy else s.temperature,
                top_p=1.0 if greedy else s.top_p,
                max_tokens=s.max_new_tokens,
                logprobs=0,
                seed=seed,  # per request: samples do not depend on batch composition
                stop_token_ids=sorted(self.eos),
                skip_special_tokens=True,
            )
            for seed in seeds
        ]
        outs = self.llm.generate([{"prompt_token_ids": p} for p in prompt_ids], params, use_tqdm=False)
        result = Rollouts([], [], [], [], engine_logprobs=[])
        for p, req in zip(prompt_ids, outs, strict=False):
            for c in req.outputs:
                ids = list(c.token_ids)
                lps = [float(d[t].logprob) if d and t in d else float("nan") for d, t in zip(c.logprobs or [], ids, strict=False)]
                ids, truncated = _cut_at_eos(ids, self.eos)
                result.prompt_ids.append(list(p))
                result.completion_ids.append(ids)
                result.texts.append(self.tokenizer.decode(ids, skip_special_tokens=True))
                result.truncated.append(truncated)
                result.engine_logprobs.append(lps[: len(ids)])
        result.timings["rollout_s"] = time.perf_counter() - t0
        return result

    def update_weights(self, model: torch.nn.Module) -> None:
        """Copy the trainer's weights into the engine's model (full tensors, in place)."""
        self.wake_up()
        weights = list(_full_state_dict(model).items())
        # reload_weights re-runs vLLM's loader (stacking q/k/v, gate/up, CPU repacking) in place;
        # a bare model.load_weights fails once the kernels have repacked the parameters.
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights,
                                                          "is_checkpoint_format": True})
        self.llm.reset_prefix_cache()

    def sleep(self) -> None:
        """Release weights and KV cache memory while training (vLLM sleep level 1)."""
        if self.sleep_mode and not self._sleeping:
            self.llm.sleep(level=1)
            self._sleeping = True

    def wake_up(self) -> None:
        """Restore the engine after `sleep`."""
        if self._sleeping:
            self.llm.wake_up()
            self._sleeping = False


def _full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Unsharded parameters of a plain, DDP or FSDP2 model, keyed like the HF checkpoint."""
    module = getattr(model, "module", model)
    out: dict[str, torch.Tensor] = {}
    for name, tensor in module.state_dict().items():
        full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
        out[name] = full.detach()
    return out


def build_engine(cfg: Any, model: torch.nn.Module, tokenizer: Any, model_path: str,
                 device: torch.device, distributed: bool) -> RolloutEngine:
    """Build the rollout engine that `cfg.rollout` names; both stop on `eos_token_ids(tokenizer, model)`."""
    eos = eos_token_ids(tokenizer, model)
    sampling = SamplingConfig(cfg.max_completion_len, cfg.temperature, cfg.top_p)
    dtype = resolve_dtype(cfg.dtype, device)  # the compute dtype; the trainer's weights stay float32
    if cfg.rollout == "hf":
        return HFRolloutEngine(model, tokenizer, sampling, device, synced=distributed and cfg.fsdp,
                               batch_size=cfg.rollout_batch_prompts,
                               per_prompt_seeds=cfg.reproducible_rollouts, dtype=dtype, eos=eos)
    if cfg.rollout == "vllm":
        return VLLMRolloutEngine(
            model_path, tokenizer, sampling, dtype=str(dtype).replace("torch.", ""), seed=cfg.seed,
            max_model_len=cfg.vllm_max_model_len or (cfg.max_prompt_len + cfg.max_completion_len),
            gpu_memory_utilization=cfg.vllm_gpu_memory_utilization, sleep_mode=cfg.vllm_sleep_mode,
            tokenizer_path=cfg.tokenizer, eos=eos,
        )
    raise ValueError(f"rollout={cfg.rollout!r}: choose hf or vllm")


def batch_seed(seeds: Sequence[int]) -> int:
    """One seed for a batch's random stream, fixed by its prompts' seeds (in order)."""
    digest = hashlib.sha256(",".join(str(int(x)) for x in seeds).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def iter_chunks(items: list[Any], size: int) -> Iterable[list[Any]]:
    """Consecutive chunks of `items` of at most `size` (size 0: one chunk)."""
    size = size or len(items) or 1
    for start in range(0, len(items), size):
        yield items[start : start + size]

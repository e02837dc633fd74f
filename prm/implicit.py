"""The implicit PRM of PRIME: dense rewards from a causal LM trained on outcome labels only.

A reward model pi_phi starts as a copy of the policy (or reference) pi_ref. Token t of a
completion gets r_t = beta * log(pi_phi(y_t | y_<t) / pi_ref(y_t | y_<t)); a step's reward is
the sum over its tokens, and the sum up to the end of step j is the implicit Q-value of that
prefix (log-odds of reaching a right answer). `update` trains pi_phi online with PRIME's
cross-entropy: sigmoid(sum of all r_t) against the outcome label of each completion.

As a step scorer its score of step j is sigmoid(Q_j) (mode "q", default: the probability that
the prefix ending with step j leads to a right answer), or sigmoid of the step's own reward
(mode "step"). `step_rewards` gives the raw per-step rewards for credit forms that want them.
The completion is re-joined with the step separator before scoring, so a trace whose steps were
stored with other whitespace is scored as the policy writes it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .base import StepScores
from .steps import split_steps, step_texts

KIND = "implicit"
MODES = ("q", "step")
#: PRIME's defaults for a 7B policy.
DEFAULT_BETA = 0.05
DEFAULT_LR = 1e-6
#: Options a spec may carry after the folder: `implicit:DIR,beta=0.1,lr=1e-5`.
SPEC_OPTIONS: dict[str, type] = {"beta": float, "lr": float, "mode": str, "batch_size": int,
                                 "max_length": int}


def parse_implicit_target(target: str) -> tuple[str, dict[str, Any]]:
    """`DIR,beta=0.1,lr=1e-5` -> (DIR, {"beta": 0.1, "lr": 1e-5}); a folder named with a comma stays whole."""
    from .options import parse_options

    path, sep, tail = target.partition(",")
    if not sep or Path(target).is_dir():
        return target, {}
    return path, parse_options(tail, SPEC_OPTIONS)


class ImplicitPRM:
    """PRIME's implicit PRM: score steps with beta*log(pi_phi/pi_ref); `update` from outcomes."""

    kind = KIND

    def __init__(self, model: Any, reference: Any, tokenizer: Any, *, beta: float = DEFAULT_BETA,
                 lr: float = DEFAULT_LR, separator: str = "\n", regex: str | None = None,
                 mode: str = "q", batch_size: int = 16, max_length: int | None = None,
                 low: float = 0.0, high: float = 1.0) -> None:
        import torch

        if not beta > 0:
            raise ValueError(f"beta must be > 0, got {beta}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not high > low:
            raise ValueError(f"need high > low, got {low}, {high}")
        if regex is None and not separator:
            raise ValueError("separator must be a non-empty string (or pass regex=)")
        self.model, self.reference, self.tokenizer = model, reference.eval(), tokenizer
        for p in self.reference.parameters():
            p.requires_grad_(False)
        self.beta, self.lr, self.mode = float(beta), float(lr), mode
        self.separator, self.regex, self.batch_size = separator, regex, batch_size
        self.low, self.high = float(low), float(high)
        self.device = next(model.parameters()).device
        limit = getattr(model.config, "max_position_embeddings", None) or 4096
        self.max_length = int(max_length or limit)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=self.lr,
                                           weight_decay=0.0)
        #: cost accounting: what `update` and scoring spent (forward = one pass of phi and ref)
        self.stats: dict[str, float] = {"updates": 0, "update_seqs": 0, "update_tokens": 0,
                                        "update_forward_s": 0.0, "update_backward_s": 0.0,
                                        "score_seqs": 0, "score_tokens": 0, "score_s": 0.0}

    # -- encoding -------------------------------------------------------------------------------

    def _canonical(self, completion: str) -> tuple[str, list[tuple[int, int]], list[tuple[int, int]]]:
        """(text the model reads, step spans in it, step spans in the original completion)."""
        spans = split_steps(completion, self.separator, self.regex)
        texts = step_texts(completion, spans)
        joiner = self.separator if self.regex is None else "\n"
        canon, pos = [], 0
        for t in texts:
            canon.append((pos, pos + len(t)))
            pos += len(t) + len(joiner)
        return joiner.join(texts), canon, spans

    def _encode(self, prompt: str, text: str) -> tuple[list[int], int, list[tuple[int, int]]]:
        """Prompt ids (specials as the trainer adds them) + completion ids; completion start; offsets."""
        p = list(self.tokenizer(prompt, add_special_tokens=True)["input_ids"])
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
        keep_prompt = max(1, self.max_length - len(ids)) if p else 0
        p = p[-keep_prompt:] if p else p
        ids, offsets = ids[: max(0, self.max_length - len(p))], offsets[: max(0, self.max_length - len(p))]
        return p + ids, len(p), offsets

    def _log_ratio(self, batch: list[tuple[list[int], int]], grad: bool) -> list[Any]:
        """beta * (log pi_phi - log pi_ref) of each completion token, one tensor per sequence."""
        import torch

        width = max(len(ids) for ids, _ in batch)
        ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for r, (seq, _) in enumerate(batch):
            ids[r, :len(seq)] = torch.tensor(seq)
            mask[r, :len(seq)] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)

        def token_logp(model: Any) -> Any:
            logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits[:, :-1].float()
            return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]

        with torch.no_grad():
            ref = token_logp(self.reference)
        with torch.enable_grad() if grad else torch.no_grad():
            phi = token_logp(self.model)
        ratio = self.beta * (phi - ref)
        # Token i of the sequence is predicted at position i - 1.
        return [ratio[r, max(start, 1) - 1:len(seq) - 1] for r, (seq, start) in enumerate(batch)]

    # -- scoring --------------------------------------------------------------------------------

    def token_rewards(self, prompts: Sequence[str], completions: Sequence[str]) -> list[list[float]]:
        """r_t of each completion token (of the canonical text), no gradient."""
        import torch

        out = []
        for b in range(0, len(prompts), self.batch_size):
            enc = [self._encode(p, self._canonical(c)[0]) for p, c in
                   zip(prompts[b:b + self.batch_size], completions[b:b + self.batch_size], strict=True)]
            with torch.inference_mode():
                rs = self._log_ratio([(ids, start) for ids, start, _ in enc], grad=False)
            out.extend([r.tolist() for r in rs])
        return out

    def step_rewards(self, prompts: Sequence[str], completions: Sequence[str]) -> list[list[float]]:
        """Per step, the sum of its tokens' implicit rewards (the separator after it included)."""
        from .steps import token_step_index

        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
        t0 = time.perf_counter()
        rewards = self.token_rewards(prompts, completions)
        out = []
        for p, c, r in zip(prompts, completions, rewards, strict=True):
            text, canon, _ = self._canonical(c)
            _, _, offsets = self._encode(p, text)
            sums = [0.0] * len(canon)
            if canon:
                for step, value in zip(token_step_index(canon, offsets, len(r)), r, strict=True):
                    sums[step] += value
            out.append(sums)
        self.stats["score_seqs"] += len(prompts)
        self.stats["score_tokens"] += sum(len(r) for r in rewards)
        self.stats["score_s"] += time.perf_counter() - t0
        return out

    def score(self, prompt: str, completion: str) -> StepScores:
        """Step scores of one completion (see `score_batch`)."""
        return self.score_batch([prompt], [completion])[0]

    def score_batch(self, prompts: Sequence[str], completions: Sequence[str]) -> list[StepScores]:
        """sigmoid(Q_j) (mode q) or sigmoid(step reward) (mode step) of every step."""
        t0 = time.perf_counter()
        step_r = self.step_rewards(prompts, completions)
        seconds = (time.perf_counter() - t0) / max(1, len(prompts))
        out = []
        for c, rs in zip(completions, step_r, strict=True):
            _, _, spans = self._canonical(c)
            values, total = [], 0.0
            for r in rs:
                total += r
                values.append(_sigmoid(total if self.mode == "q" else r))
            out.append(StepScores(step_texts(c, spans), spans, values, {"score_s": seconds}))
        return out

    # -- learning -------------------------------------------------------------------------------

    def update(self, prompts: Sequence[str], completions: Sequence[str],
               outcome_rewards: Sequence[float]) -> dict[str, float]:
        """One optimizer step of PRIME's loss: BCE(sigmoid(sum_t r_t), outcome in [0, 1]).

        Returns the loss and the extra cost of this update (sequences, tokens, forward and
        backward seconds). Rewards are mapped to [0, 1] by (r - low) / (high - low).
        """
        import torch

        if not (len(prompts) == len(completions) == len(outcome_rewards)):
            raise ValueError("update needs one prompt and one outcome reward per completion")
        if not prompts:
            return {"loss": math.nan, "seqs": 0, "tokens": 0, "forward_s": 0.0, "backward_s": 0.0}
        targets = [min(1.0, max(0.0, (float(r) - self.low) / (self.high - self.low))) for r in outcome_rewards]
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        total_loss, tokens, fwd, bwd = 0.0, 0, 0.0, 0.0
        n = len(prompts)
        for b in range(0, n, self.batch_size):
            t0 = time.perf_counter()
            enc = [self._encode(p, self._canonical(c)[0]) for p, c in
                   zip(prompts[b:b + self.batch_size], completions[b:b + self.batch_size], strict=True)]
            ratios = self._log_ratio([(ids, start) for ids, start, _ in enc], grad=True)
            seq = torch.stack([r.sum() for r in ratios])
            y = torch.tensor(targets[b:b + self.batch_size], device=seq.device)
            # Summed over chunks and divided by n: the same gradient as one batch of all n.
            loss = torch.nn.functional.binary_cross_entropy_with_logits(seq, y, reduction="sum") / n
            t1 = time.perf_counter()
            loss.backward()
            bwd += time.perf_counter() - t1
            fwd += t1 - t0
            total_loss += loss.item()
            tokens += sum(len(r) for r in ratios)
        t1 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.model.eval()
        bwd += time.perf_counter() - t1
        for key, value in (("updates", 1), ("update_seqs", n), ("update_tokens", tokens),
                           ("update_forward_s", fwd), ("update_backward_s", bwd)):
            self.stats[key] += value
        return {"loss": total_loss, "seqs": n, "tokens": tokens, "forward_s": fwd, "backward_s": bwd}

    # -- persistence ----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """pi_phi's weights, its optimizer and the cost counters, for the trainer's checkpoint.

        The tensors are the live ones (no copy of a large model): save them, as a checkpoint does.
        """
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "stats": dict(self.stats), "beta": self.beta}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned (a resumed run continues the same pi_phi)."""
        if float(state.get("beta", self.beta)) != self.beta:
            raise ValueError(f"checkpoint of an implicit PRM with beta={state['beta']}, this one has {self.beta}")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.stats.update(state.get("stats", {}))

    def save(self, output: str | Path) -> Path:
        """Write pi_phi, pi_ref (under reference/), the tokenizer and the meta file (last), atomically."""
        from .train import META_FILE, write_folder_atomically

        out = Path(output)
        if out.is_dir() and any(out.iterdir()) and not (out / META_FILE).exists():
            raise ValueError(f"{out} exists and is not a PRM folder; choose another")

        def write(tmp: Path) -> dict[str, Any]:
            self.model.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)
            self.reference.save_pretrained(tmp / "reference")
            return {"kind": KIND, "beta": self.beta, "lr": self.lr, "mode": self.mode,
                    "separator": self.separator, "stats": self.stats}

        return write_folder_atomically(out, write)


def train_implicit(prm: ImplicitPRM, rows: Sequence[dict[str, Any]], steps: int, batch_size: int,
                   seed: int, output: str | Path | None = None, progress: bool = False) -> dict[str, Any]:
    """`steps` updates on seeded batches of rows (prompt, completion, correct); saved to `output`."""
    import random

    if output is not None:
        from .train import check_output_folder

        check_output_folder(output)
    t0 = time.perf_counter()
    bar = None
    if progress:
        import sys

        from tqdm import tqdm

        bar = tqdm(total=steps, desc="implicit prm", unit="update", file=sys.stderr)
    fwd = bwd = 0.0
    losses = []
    for step in range(steps):
        rng = random.Random(f"{seed}:{step}")
        batch = [rows[rng.randrange(len(rows))] for _ in range(min(batch_size, len(rows)))]
        out = prm.update([r["prompt"] for r in batch], [r["completion"] for r in batch],
                         [float(bool(r["correct"])) for r in batch])
        fwd, bwd = fwd + out["forward_s"], bwd + out["backward_s"]
        losses.append(out["loss"])
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{out['loss']:.4f}")
    if bar is not None:
        bar.close()
    if output is not None:
        prm.save(output)
    return {"updates": steps, "seconds": time.perf_counter() - t0, "forward_s": fwd,
            "backward_s": bwd, "loss_first": losses[0] if losses else math.nan,
            "loss_last": losses[-1] if losses else math.nan}


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def load_implicit(path: str, device: str | None = None, **kw: Any) -> ImplicitPRM:
    """A saved implicit PRM folder, or a causal LM folder to start one from (phi = ref = it)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .hf import pick_device
    from .train import META_FILE, read_meta

    folder = Path(path)
    if not folder.is_dir():
        raise ValueError(f"implicit:{path}: no model folder {path}")
    saved = (folder / META_FILE).exists()
    meta = read_meta(folder, KIND) if saved else {}
    ref_path = folder / "reference" if saved else folder
    device = pick_device(device)
    dtype = kw.pop("dtype", None) or torch.float32  # trained in float32 (updates in bf16 drift)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device)
        reference = AutoModelForCausalLM.from_pretrained(ref_path, dtype=dtype).to(device)
    except Exception as err:  # noqa: BLE001 - a folder that does not load is one line
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"cannot load implicit PRM from {path}: {first}") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    options = {k: meta[k] for k in ("beta", "lr", "mode", "separator") if k in meta}
    options.update(kw)
    prm = ImplicitPRM(model.eval(), reference, tokenizer, **options)
    if saved and isinstance(meta.get("stats"), dict):
        prm.stats.update(meta["stats"])
    return prm

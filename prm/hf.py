"""Process reward models from Hugging Face checkpoints: three input layouts, one batched engine.

- `QwenPRMScorer` (spec `hf:`): Qwen2.5-Math-PRM style. The steps are joined with the
  model's separator token (`<extra_0>`) inside the chat template; a 2-class head is read at
  each separator and the step score is the probability of class 1.
- `TokenClassificationScorer` (spec `token-cls:`): an `AutoModelForTokenClassification` in
  the layout of TRL's former `PRMTrainer`: `[bos] + prompt + step_1 + sep + step_2 + sep ...`,
  each piece tokenised on its own, no separator between prompt and first step, label read at
  the last token of each `step + sep` piece.
- `ShepherdScorer` (spec `shepherd:`): a Math-Shepherd causal LM. Each step is followed by
  the step tag (` ки`); the step score is P(`+`) / (P(`+`) + P(`-`)) of the next token at the tag.

Where a step's score is read is found from character offsets, never by searching for the
separator's token id: model output may itself contain `<extra_0>` or `ки`, which must not shift
the scores of the real steps.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .base import StepScores
from .steps import DEFAULT_SEPARATOR, split_steps, step_texts

#: The system prompt Qwen2.5-Math-PRM was trained with.
QWEN_PRM_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."


@dataclass
class EncodedTrace:
    """One (prompt, steps) pair as model input: token ids and where each step's score is read."""

    input_ids: list[int]
    positions: list[int]  # token index per step; -1 when the step fell beyond max_length
    completion_start: int  # index of the first completion token (prompt truncation stops here)


def pick_device(device: str | None = None) -> str:
    """The device to run on: the given one, else CUDA when available, else CPU."""
    if device:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def pick_dtype(device: str):
    """bf16 on GPU (what these PRMs are released in), fp32 on CPU (bf16 matmuls are slow there)."""
    import torch

    return torch.bfloat16 if str(device).startswith("cuda") else torch.float32


class _ModelScorer:
    """Shared engine: split, encode, pad, run under inference_mode, read one score per step."""

    kind = "model"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        separator: str = DEFAULT_SEPARATOR,
        regex: str | None = None,
        batch_size: int = 8,
        max_length: int | None = None,
        neutral: float = 0.5,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if regex is None and not separator:
            raise ValueError("separator must be a non-empty string (or pass regex=)")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.separator = separator
        self.regex = regex
        self.batch_size = batch_size
        self.neutral = float(neutral)
        # Inputs follow the model: place the model (model.to(...)) before building a scorer.
        self.device = next(model.parameters()).device
        self.max_length = max_length or _model_max_length(model, tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (tokenizer.eos_token_id or 0)

    # -- what differs between kinds ---------------------------------------------------------

    def encode(self, prompt: str, steps: Sequence[str]) -> EncodedTrace:
        """Build the model input for one trace (before truncation)."""
        raise NotImplementedError

    def _step_probabilities(self, logits):  # [K, C] logits at the read positions -> [K]
        raise NotImplementedError

    def _forward(self, input_ids, attention_mask, positions_union):
        # Remote-code PRMs may not take use_cache; ask only those whose forward accepts it.
        extra = {"use_cache": False} if self._accepts("use_cache") else {}
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, **extra)
        return out.logits if hasattr(out, "logits") else out[0], None

    def _accepts(self, name: str) -> bool:
        params = inspect.signature(self.model.forward).parameters
        return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())

    # -- shared -------------------------------------------------------------------------------

    def score(self, prompt: str, completion: str) -> StepScores:
        """Split `completion` into steps and score each with the model."""
        return self.score_batch([prompt], [completion])[0]

    def score_batch(self, prompts: Sequence[str], completions: Sequence[str]) -> list[StepScores]:
        """Score many completions in padded batches of `batch_size`; equals one-by-one scoring."""
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
        start = time.perf_counter()
        spans = [split_steps(c, self.separator, self.regex) for c in completions]
        steps = [step_texts(c, s) for c, s in zip(completions, spans, strict=True)]
        encoded = [
            _truncate(self.encode(p, s), self.max_length, self._leading_specials())
            for p, s in zip(prompts, steps, strict=True)
        ]
        probs: list[list[float]] = [[] for _ in encoded]
        # Longest first, so each padded batch holds traces of similar length.
        order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i].input_ids))
        for b in range(0, len(order), self.batch_size):
            chunk = [i for i in order[b : b + self.batch_size] if encoded[i].positions]
            if chunk:
                for i, p in zip(chunk, self._run([encoded[i] for i in chunk]), strict=True):
                    probs[i] = p
        elapsed = time.perf_counter() - start
        results = []
        for i, enc in enumerate(encoded):
            scores = [self.neutral if pos < 0 else probs[i][k] for k, pos in enumerate(enc.positions)]
            results.append(
                StepScores(
                    steps[i],
                    spans[i],
                    scores,
                    {"score_s": elapsed / max(len(encoded), 1)},
                    truncated_steps=sum(pos < 0 for pos in enc.positions),
                )
            )
        return results

    def _leading_specials(self) -> int:
        return 1 if self.tokenizer.bos_token_id is not None else 0

    def _run(self, batch: list[EncodedTrace]) -> list[list[float]]:
        import torch

        width = max(len(e.input_ids) for e in batch)
        # Right padding keeps every real token at its unpadded position, so a padded batch
        # reads the same logits as one trace alone.
        ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for r, e in enumerate(batch):
            ids[r, : len(e.input_ids)] = torch.tensor(e.input_ids, dtype=torch.long)
            mask[r, : len(e.input_ids)] = 1
        rows = [r for r, e in enumerate(batch) for p in e.positions if p >= 0]
        cols = [p for e in batch for p in e.positions if p >= 0]
        union = sorted(set(cols))
        with torch.inference_mode():
            logits, kept = self._forward(ids.to(self.device), mask.to(self.device), union)
            if kept is not None:  # logits were computed only at the union of read positions
                where = {p: k for k, p in enumerate(kept)}
                cols = [where[c] for c in cols]
            index = (torch.tensor(rows, device=logits.device), torch.tensor(cols, device=logits.device))
            picked = logits[index].float()
            values = self._step_probabilities(picked).cpu().tolist()
        out: list[list[float]] = [[] for _ in batch]
        for r, v in zip(rows, values, strict=True):
            out[r].append(float(v))
        return out


def _model_max_length(model: Any, tokenizer: Any) -> int:
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None) or 4096
    tok_limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(tok_limit, int) and 0 < tok_limit < 1_000_000:
        limit = min(limit, tok_limit)
    return int(limit)


def _truncate(enc: EncodedTrace, max_length: int, keep_head: int) -> EncodedTrace:
    """Fit `max_length`: drop prompt tokens first (after BOS), then cut the completion's tail."""
    ids, positions = enc.input_ids, list(enc.positions)
    excess = len(ids) - max_length
    if excess <= 0:
        return enc
    keep_head = min(keep_head, enc.completion_start)
    drop = min(excess, enc.completion_start - keep_head)
    if drop > 0:
        ids = ids[:keep_head] + ids[keep_head + drop :]
        positions = [p - drop if p >= 0 else p for p in positions]
    if len(ids) > max_length:
        ids = ids[:max_length]
        positions = [p if 0 <= p < max_length else -1 for p in positions]
    return EncodedTrace(ids, positions, max(enc.completion_start - drop, 0))


def _positions_from_offsets(
    offsets: Sequence[tuple[int, int]], chars: Sequence[int], text_length: int
) -> list[int]:
    """Token index covering each character index (the nearest token to its left if none)."""
    owner = [-1] * (text_length + 1)
    for t, (a, b) in enumerate(offsets):
        for c in range(a, min(b, text_length)):
            owner[c] = t
    result = []
    for c in chars:
        while c >= 0 and owner[c] < 0:
            c -= 1
        result.append(owner[c] if c >= 0 else 0)
    return result


def _encode_text(tokenizer: Any, text: str, add_special_tokens: bool) -> tuple[list[int], list]:
    enc = tokenizer(text, add_special_tokens=add_special_tokens, return_offsets_mapping=True)
    return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]


def _two_class_positive(logits):
    """P(positive) from [K, C] logits: sigmoid for one logit, softmax class 1 otherwise."""
    import torch

    if logits.shape[-1] == 1:
        return torch.sigmoid(logits[:, 0])
    return torch.softmax(logits, dim=-1)[:, 1]


class QwenPRMScorer(_ModelScorer):
    """Qwen2.5-Math-PRM layout: chat template, steps joined by `<extra_0>`, read at each one."""

    kind = "hf"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        step_token: str = "<extra_0>",
        system_prompt: str | None = QWEN_PRM_SYSTEM,
        **kw: Any,
    ) -> None:
        super().__init__(model, tokenizer, **kw)
        if not step_token:
            raise ValueError("step_token must be non-empty (Qwen2.5-Math-PRM uses '<extra_0>')")
        self.step_token = step_token
        self.system_prompt = system_prompt

    def _leading_specials(self) -> int:
        return 0  # the chat template, not a BOS token, opens the sequence

    def encode(self, prompt: str, steps: Sequence[str]) -> EncodedTrace:
        """Chat-template the trace and find the token of each step separator."""
        content = "".join(s + self.step_token for s in steps)
        text, content_start = self._render(prompt, content)
        ends, pos = [], content_start
        for s in steps:
            pos += len(s) + len(self.step_token)
            ends.append(pos - 1)  # last character of the separator after this step
        ids, offsets = _encode_text(self.tokenizer, text, add_special_tokens=False)
        positions = _positions_from_offsets(offsets, ends, len(text))
        start = _positions_from_offsets(offsets, [content_start], len(text))[0]
        return EncodedTrace(ids, positions, start)

    def _render(self, prompt: str, content: str) -> tuple[str, int]:
        if getattr(self.tokenizer, "chat_template", None):
            messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": content}]
            if self.system_prompt is not None:
                messages.insert(0, {"role": "system", "content": self.system_prompt})
            text = self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=False
            )
            at = text.rfind(content) if isinstance(text, str) else -1
            if at >= 0:
                return text, at
        # No template, or one that rewrites the message: plain prompt, newline, steps.
        return f"{prompt}\n{content}", len(prompt) + 1

    def _step_probabilities(self, logits):
        return _two_class_positive(logits)


class TokenClassificationScorer(_ModelScorer):
    """TRL PRMTrainer layout for `AutoModelForTokenClassification` PRMs."""

    kind = "token-cls"

    def __init__(
        self, model: Any, tokenizer: Any, *, step_separator: str = "\n", **kw: Any
    ) -> None:
        super().__init__(model, tokenizer, **kw)
        self.step_separator = step_separator
        self._sep_ids = list(tokenizer(step_separator, add_special_tokens=False)["input_ids"])

    def encode(self, prompt: str, steps: Sequence[str]) -> EncodedTrace:
        """`[bos] + prompt + (step + sep)*`, each piece tokenised alone, read at its last token."""
        ids = list(self.tokenizer(prompt, add_special_tokens=False)["input_ids"])
        if self.tokenizer.bos_token_id is not None:
            ids = [self.tokenizer.bos_token_id] + ids
        completion_start = len(ids)
        positions = []
        for s in steps:
            piece = list(self.tokenizer(s, add_special_tokens=False)["input_ids"]) + self._sep_ids
            ids.extend(piece)
            positions.append(len(ids) - 1 if piece else -1)
        return EncodedTrace(ids, positions, completion_start)

    def _step_probabilities(self, logits):
        return _two_class_positive(logits)


class ShepherdScorer(_ModelScorer):
    """Math-Shepherd layout: `prompt step_1 ки\\nstep_2 ки`, P(+) vs P(-) read at each tag."""

    kind = "shepherd"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        step_tag: str = "ки",
        good_token: str = "+",
        bad_token: str = "-",
        **kw: Any,
    ) -> None:
        super().__init__(model, tokenizer, **kw)
        if not step_tag:
            raise ValueError("step_tag must be non-empty (Math-Shepherd uses 'ки')")
        self.step_tag = step_tag
        self.candidate_ids = [self._single_id(good_token), self._single_id(bad_token)]
        self._forward_takes_keep = "logits_to_keep" in inspect.signature(model.forward).parameters

    def _single_id(self, token: str) -> int:
        ids = self.tokenizer(token, add_special_tokens=False)["input_ids"]
        if not ids:
            raise ValueError(f"the tokenizer maps {token!r} to no token; pass another good/bad token")
        return int(ids[-1])

    def encode(self, prompt: str, steps: Sequence[str]) -> EncodedTrace:
        """`prompt + " " + step + " ки" + "\\n" + ...`, read at the last character of each tag."""
        text, ends = f"{prompt} ", []
        content_start = len(text)
        for k, s in enumerate(steps):
            text += ("\n" if k else "") + s + " " + self.step_tag
            ends.append(len(text) - 1)
        ids, offsets = _encode_text(self.tokenizer, text, add_special_tokens=True)
        positions = _positions_from_offsets(offsets, ends, len(text))
        start = _positions_from_offsets(offsets, [content_start], len(text))[0]
        return EncodedTrace(ids, positions, start)

    def _forward(self, input_ids, attention_mask, positions_union):
        import torch

        if self._forward_takes_keep and positions_union:
            # Only the tag positions need the vocabulary projection (saves T x V logits).
            keep = torch.tensor(positions_union, dtype=torch.long, device=input_ids.device)
            out = self.model(
                input_ids=input_ids, attention_mask=attention_mask, use_cache=False, logits_to_keep=keep
            )
            return out.logits, positions_union
        return super()._forward(input_ids, attention_mask, positions_union)

    def _step_probabilities(self, logits):
        import torch

        pair = logits[:, self.candidate_ids]
        return torch.softmax(pair, dim=-1)[:, 0]


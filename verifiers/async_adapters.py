"""Async reward functions for RL stacks that await their rewards: TRL, slime, PrimeIntellect.

* TRL (>= 1.x) awaits a reward function whose `__call__` is `async def` on its own event loop,
  next to the other reward functions: `async_trl_reward_func("math")`.
* slime calls `--custom-rm-path module.function` as `await f(args, sample)` (and the batched
  form with a list of samples): `veristep.verifiers.async_adapters.async_rm` /
  `batched_async_rm`, or `slime_rm(kind, ...)` for another configuration.

* PrimeIntellect `verifiers` (>= 0.4, `verifiers.v1`) scores a rollout with a `Task`'s reward
  methods: `VerifiersReward("math")` is one (a class attribute of the task, or plugged by
  import path, `veristep.verifiers.async_adapters:verifiers_reward_math`).

All await `averify_batch` (verifiers/core/aio.py), so the event loop never blocks and the
verifier's one pool serves every concurrent call. Unjudged items are never silently 0: TRL gets
None (left out of the reward), slime gets the value the caller chose (`unjudged_reward`), or
the whole result with its status when `as_dict=True` (slime's `--reward-key reward`).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from veristep.verifiers.adapters import (
    TRLRewardFunction,
    _BadReference,
    _safe_text,
    _UnjudgedLog,
    adapter_verifier,
)
from veristep.verifiers.core.aio import averify_batch
from veristep.verifiers.core.registry import get_verifier
from veristep.verifiers.core.result import Status, Verifier, VerifyResult
from veristep.verifiers.core.text import mark_truncated


async def _averify(verifier: Verifier, texts: Sequence[str], refs: Sequence[Any]) -> list[VerifyResult]:
    """averify_batch on the usable rows; bad_reference results for the rest, in order."""
    good = [i for i, ref in enumerate(refs) if not isinstance(ref, _BadReference)]
    results: list[VerifyResult] = [
        VerifyResult(0.0, False, Status.BAD_REFERENCE, ref.detail[:500]) if isinstance(ref, _BadReference)
        else VerifyResult(0.0, False, Status.INTERNAL_ERROR)  # replaced below
        for ref in refs
    ]
    if good:
        batch = await averify_batch(verifier, [texts[i] for i in good], [refs[i] for i in good])
        for i, result in zip(good, batch, strict=True):
            results[i] = result
    return results


class AsyncTRLRewardFunction(TRLRewardFunction):
    """`TRLRewardFunction` whose call is `async def`: TRL awaits it beside its other rewards."""

    async def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:  # type: ignore[override]
        """Score a batch of completions without blocking TRL's loop; None where unjudged."""
        texts, refs = self._inputs(completions, kwargs)
        return self._rewards(await _averify(self.verifier, texts, refs), kwargs)


def async_trl_reward_func(
    verifier: str | Verifier = "math",
    *,
    reference_column: str | None = None,
    name: str | None = None,
    remote: str | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    **config: Any,
) -> AsyncTRLRewardFunction:
    """An `async def` TRL reward function: `GRPOTrainer(reward_funcs=[async_trl_reward_func("math")])`.

    `remote="http://host:port"` awaits a `veristep serve` server instead of local pools;
    `eos_token_id` (the tokenizer's) marks completions that do not end in it as cut off.
    """
    return AsyncTRLRewardFunction(verifier, reference_column=reference_column, name=name, remote=remote,
                                  eos_token_id=eos_token_id, **config)


def reference_from_label(verifier: Verifier, label: Any) -> Any:
    """The reference a label (slime's `label`, OpenRLHF's `labels[i]`) stands for.

    A JSON object (or its text) is read as a record by the verifier's own parser (so a code
    label is `{"tests": [...]}` and a tools label `{"tools": ..., "expected": ...}`). Any other
    label is read as the record `{"answer": label}` (a math answer, a number included); a kind
    that reads no "answer" gets the label itself (JSON text decoded: a tools label may be the
    list of expected calls). A label the parser refuses gives a `_BadReference`, which scores
    as `bad_reference`.
    """
    value = label
    if isinstance(label, str) and label.lstrip()[:1] in ("{", "["):
        try:
            value = json.loads(label)
        except (ValueError, RecursionError):
            value = label  # not JSON after all: the text itself is the reference
    try:
        if isinstance(value, Mapping):
            return verifier.reference_from_record(dict(value))
        try:
            return verifier.reference_from_record({"answer": label})
        except KeyError:
            return value
    except KeyError as err:
        return _BadReference(f"the label has no {err.args[0] if err.args else '?'!r}")
    except (TypeError, ValueError, RecursionError) as err:
        return _BadReference(str(err)[:300])


class SlimeRewardModel:
    """slime's custom reward model, `await rm(args, sample)` or `await rm.batch(args, samples)`.

    The sample's `response` is the completion and its `label` the reference (see
    `reference_from_label`); `sample.metadata["veristep_kind"]` may pick another kind per sample.
    """

    def __init__(
        self,
        kind: str = "math",
        *,
        unjudged_reward: float | None = 0.0,
        as_dict: bool = False,
        configs: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.kind = kind
        self.unjudged_reward = unjudged_reward
        self.as_dict = as_dict
        self.configs = {k: dict(v) for k, v in (configs or {}).items()}
        self._verifiers: dict[str, Verifier] = {}
        self._lock = threading.Lock()
        self._unjudged = _UnjudgedLog(f"veristep slime rm ({kind})")
        self.verifier(kind)  # a bad kind or config fails now, not at the first rollout

    @property
    def unjudged_counts(self) -> dict[str, int]:
        """How many samples were left unjudged so far, by status."""
        return dict(self._unjudged.counts)

    def verifier(self, kind: str) -> Verifier:
        """The cached verifier of `kind`."""
        with self._lock:
            if kind not in self._verifiers:
                self._verifiers[kind] = get_verifier(kind, **self.configs.get(kind, {}))
            return self._verifiers[kind]

    async def __call__(self, args: Any, sample: Any, **kwargs: Any) -> float | dict[str, Any] | None:
        """The reward of one slime sample."""
        return (await self.batch(args, [sample]))[0]

    async def batch(self, args: Any, samples: Sequence[Any], **kwargs: Any) -> list[Any]:
        """The rewards of many samples (slime's batched custom RM), one verifier call per kind."""
        by_kind: dict[str, list[int]] = {}
        for i, sample in enumerate(samples):
            metadata = getattr(sample, "metadata", None)
            kind = metadata.get("veristep_kind", self.kind) if isinstance(metadata, Mapping) else self.kind
            by_kind.setdefault(str(kind), []).append(i)
        out: list[Any] = [None] * len(samples)
        for kind, idx in by_kind.items():
            verifier = self.verifier(kind)
            texts = [mark_truncated(_safe_text(getattr(samples[i], "response", "")), slime_sample_cut(args, samples[i]))
                     for i in idx]
            refs = [reference_from_label(verifier, getattr(samples[i], "label", None)) for i in idx]
            results = await _averify(verifier, texts, refs)
            self._unjudged.add(results)
            for i, result in zip(idx, results, strict=True):
                out[i] = self.reply(result)
        return out

    def reply(self, result: VerifyResult) -> float | dict[str, Any] | None:
        """What slime gets for one result: the reward, or the chosen value where unjudged."""
        reward = float(result.reward) if result.judged else self.unjudged_reward
        if not self.as_dict:
            return reward
        return {"reward": reward, "judged": bool(result.judged), "status": result.status.value,
                "correct": bool(result.correct), "detail": result.detail[:300]}


def slime_sample_cut(args: Any, sample: Any) -> bool | None:
    """Whether slime cut a sample's response off: its `status` (TRUNCATED / COMPLETED, set from
    the engine's finish reason), else `response_length` against `args.rollout_max_response_len`;
    None (no signal) when neither says."""
    status = getattr(sample, "status", None)
    value = getattr(status, "value", status)
    if isinstance(value, str) and value.lower() in ("truncated", "completed"):
        return value.lower() == "truncated"
    length = getattr(sample, "response_length", None)
    limit = getattr(args, "rollout_max_response_len", None)
    if isinstance(length, int) and isinstance(limit, int) and length > 0 and limit > 0:
        return length >= limit
    return None


def slime_rm(
    kind: str = "math",
    *,
    unjudged_reward: float | None = 0.0,
    as_dict: bool = False,
    **config: Any,
) -> SlimeRewardModel:
    """A slime custom reward model for one verifier kind (config keywords go to that kind)."""
    return SlimeRewardModel(kind, unjudged_reward=unjudged_reward, as_dict=as_dict,
                            configs={kind: config} if config else None)


class VerifiersUnjudged(RuntimeError):
    """A PrimeIntellect `verifiers` rollout veristep could not judge (its status says why).

    Raised from the reward so `verifiers` records a task error on the trace instead of a score:
    a rollout nobody could judge is not a wrong answer.
    """


class VerifiersReward:
    """A PrimeIntellect `verifiers` (>= 0.4, `verifiers.v1`) task reward backed by a veristep kind.

    `verifiers` scores a trace by calling every `Task` method tagged `@vf.reward` with the
    arguments it names (`task`: the task data, `trace`: the rollout) and summing the returned
    floats by weight. This object carries the same tags, so it is such a method without
    importing `verifiers` (the package cannot share veristep's environment, docs/serve.md):

        class MathTask(vf.Task[MathData]):
            correct = VerifiersReward("math")          # recorded as trace.rewards["veristep_math"]

    or plugged into a task config: `rewards = {veristep_math = {fn =
    "veristep.verifiers.async_adapters:verifiers_reward_math"}}`.

    The completion is the rollout's last reply (its root agent's, else its last sampled
    assistant message with any tool calls as text), cut off where `trace.is_truncated` says so;
    the reference is read from the task data by the kind's record parser (or from the one field
    `reference_key`). The verdict goes to `trace.info[name]` (status, judged, correct, detail)
    and `trace.metrics[name + "_judged"]`. An unjudged rollout (bad reference, time-out,
    sandbox error) raises `VerifiersUnjudged` by default, which `verifiers` records as a task
    error; `unjudged_reward=` a number scores it with that number instead.
    """

    reward = True  # the tags `@vf.reward` sets
    reward_priority = 0

    def __init__(self, kind: str | Verifier = "math", *, name: str | None = None, weight: float = 1.0,
                 reference_key: str | None = None, unjudged_reward: float | None = None,
                 remote: str | None = None, **config: Any) -> None:
        self.verifier: Verifier = adapter_verifier(kind, remote, config)
        self.__name__ = name or f"veristep_{getattr(self.verifier, 'kind', kind)}"
        self._vf_weight = float(weight)
        self.reference_key = reference_key
        self.unjudged_reward = unjudged_reward
        self._unjudged = _UnjudgedLog(self.__name__)

    @property
    def unjudged_counts(self) -> dict[str, int]:
        """How many rollouts were left unjudged so far, by status."""
        return dict(self._unjudged.counts)

    async def __call__(self, task: Any, trace: Any) -> float:
        """The reward of one rollout (`task`: its task data, `trace`: the rollout)."""
        record = task.model_dump() if hasattr(task, "model_dump") else dict(task or {})
        if self.reference_key is not None:
            if self.reference_key not in record:
                ref: Any = _BadReference(f"the task data has no {self.reference_key!r}")
            else:
                ref = reference_from_label(self.verifier, record[self.reference_key])
        else:
            ref = reference_from_label(self.verifier, record)
        text = mark_truncated(_trace_reply(trace), bool(getattr(trace, "is_truncated", False)) or None)
        (result,) = await _averify(self.verifier, [text], [ref])
        self._unjudged.add([result])
        info = getattr(trace, "info", None)
        if isinstance(info, dict):
            info[self.__name__] = {"status": result.status.value, "judged": bool(result.judged),
                                   "correct": bool(result.correct), "detail": result.detail[:300]}
        if callable(getattr(trace, "record_metric", None)):
            trace.record_metric(f"{self.__name__}_judged", float(bool(result.judged)))
        if result.judged:
            return float(result.reward)
        if self.unjudged_reward is None:
            raise VerifiersUnjudged(f"{self.__name__}: not judged ({result.status.value}): {result.detail[:200]}")
        return float(self.unjudged_reward)

    def close(self) -> None:
        """Close the verifier's pool."""
        close = getattr(self.verifier, "close", None)
        if callable(close):
            close()


def _trace_reply(trace: Any) -> str:
    """A `verifiers` trace's final reply: the root agent's, else the last sampled assistant
    message (its tool calls as Hermes-style text, as `completion_text` writes them)."""
    root = getattr(trace, "root_reply", None)
    if isinstance(root, str):
        return root
    messages = getattr(trace, "assistant_messages", None) or []
    if not messages:
        return ""
    last = messages[-1]
    calls = [{"function": {"name": getattr(c, "name", None), "arguments": getattr(c, "arguments", None)}}
             for c in (getattr(last, "tool_calls", None) or [])]
    return _safe_text({"role": "assistant", "content": getattr(last, "content", None), "tool_calls": calls})


def verifiers_reward(kind: str = "math", **options: Any) -> VerifiersReward:
    """A PrimeIntellect `verifiers` task reward for one veristep kind (see `VerifiersReward`)."""
    return VerifiersReward(kind, **options)


_PLUGGED: dict[str, VerifiersReward] = {}
_PLUGGED_PREFIX = "verifiers_reward_"


def __getattr__(name: str) -> VerifiersReward:
    """`verifiers_reward_KIND`: a shared default reward per kind, built on first use, for
    `verifiers`' import-path plugging (`fn = "veristep.verifiers.async_adapters:verifiers_reward_math"`)."""
    if not name.startswith(_PLUGGED_PREFIX):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    kind = name[len(_PLUGGED_PREFIX):]
    with _DEFAULT_LOCK:
        if kind not in _PLUGGED:
            _PLUGGED[kind] = VerifiersReward(kind)
        return _PLUGGED[kind]


_DEFAULT: SlimeRewardModel | None = None
_DEFAULT_LOCK = threading.Lock()


def _default_rm() -> SlimeRewardModel:
    """The module's shared slime RM: kind from $VERISTEP_SLIME_KIND (default math)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = SlimeRewardModel(os.environ.get("VERISTEP_SLIME_KIND", "math"))
        return _DEFAULT


async def async_rm(args: Any, sample: Any, **kwargs: Any) -> float | dict[str, Any] | None:
    """slime `--custom-rm-path veristep.verifiers.async_adapters.async_rm`: one sample's reward."""
    return await _default_rm()(args, sample, **kwargs)


async def batched_async_rm(args: Any, samples: Sequence[Any], **kwargs: Any) -> list[Any]:
    """slime's batched custom RM form: the rewards of a list of samples, in order."""
    return await _default_rm().batch(args, samples, **kwargs)


__all__ = [
    "AsyncTRLRewardFunction",
    "SlimeRewardModel",
    "VerifiersReward",
    "VerifiersUnjudged",
    "async_rm",
    "async_trl_reward_func",
    "batched_async_rm",
    "reference_from_label",
    "slime_rm",
    "slime_sample_cut",
    "verifiers_reward",
]

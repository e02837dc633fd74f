"""Plug veristep verifiers into RL stacks: a TRL reward function and verl's `compute_score`.

verl loads a custom reward file by path (``reward.custom_reward_function.path``) as a module
of its own, outside any package; this module then hands out the installed package's objects
(see the end of the file), so whatever verl loads pickles by reference, shares one set of
verifiers, and works in process pools and Ray actors. Absolute imports only, for that reason.

References are read by each verifier's own `reference_from_record` (one parser per kind, the
same as the Python API and the CLI); an unusable reference scores as unjudged
(`bad_reference`): None in TRL, `judged: False` in verl, counted, and warned about once.
"""

from __future__ import annotations

import collections
import importlib
import json
import threading
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from veristep.verifiers.core.registry import get_verifier
from veristep.verifiers.core.result import Status, Verifier, VerifyResult
from veristep.verifiers.core.text import completion_text, eos_set, mark_truncated, truncation_flag

_PACKAGE = "veristep.verifiers.adapters"


class _UnjudgedLog:
    """Counts unjudged results by status and warns once per status per run (thread-safe)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def add(self, results: Sequence[VerifyResult]) -> None:
        """Count the unjudged results; the first of each status gets one warning."""
        for r in results:
            if r.judged:
                continue
            with self._lock:
                first = self.counts[r.status.value] == 0
                self.counts[r.status.value] += 1
            if first:
                what = ("a reference the verifier cannot use" if r.status is Status.BAD_REFERENCE
                        else "an item the verifier could not judge")
                warnings.warn(
                    f"{self.name}: {what} ({r.status.value}: {r.detail[:200]}); such items are "
                    "left out of the reward (None in TRL, judged=False in verl) and counted in "
                    "`unjudged_counts`; this warning is shown once per status",
                    RuntimeWarning,
                    stacklevel=3,
                )

    def __getstate__(self) -> dict[str, Any]:
        return {"name": self.name, "counts": self.counts}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


def _references(verifier: Verifier, records: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Each record's reference, read by the verifier's own parser; a row it refuses is marked bad.

    A field missing from every row raises KeyError: that is a configuration error (the wrong
    column, the wrong kind), not a bad row.
    """
    out: list[Any] = []
    missing: KeyError | None = None
    for record in records:
        try:
            out.append(verifier.reference_from_record(dict(record)))
        except KeyError as err:
            missing = err
            out.append(_BadReference(f"the reference has no {err.args[0] if err.args else '?'!r}"))
        except ValueError as err:
            out.append(_BadReference(str(err)))
    if missing is not None and all(isinstance(ref, _BadReference) for ref in out):
        raise missing
    return out


class _BadReference:
    """A row whose reference the verifier's parser refused; it scores as bad_reference."""

    def __init__(self, detail: str) -> None:
        self.detail = detail


def _verify(verifier: Verifier, texts: Sequence[str], refs: Sequence[Any]) -> list[VerifyResult]:
    """verify_batch on the usable rows; bad_reference results for the rest, in order."""
    good = [i for i, ref in enumerate(refs) if not isinstance(ref, _BadReference)]
    results: list[VerifyResult] = [
        VerifyResult(0.0, False, Status.BAD_REFERENCE, ref.detail[:500]) if isinstance(ref, _BadReference)
        else VerifyResult(0.0, False, Status.INTERNAL_ERROR)  # replaced below
        for ref in refs
    ]
    if good:
        batch = verifier.verify_batch([texts[i] for i in good], [refs[i] for i in good])
        for i, result in zip(good, batch, strict=True):
            results[i] = result
    return results

# ---------------------------------------------------------------------------------------------
# TRL


class TRLRewardFunction:
    """A TRL `GRPOTrainer` reward function backed by a veristep verifier.

    Called as ``f(completions=..., prompts=..., **dataset_columns) -> list[float | None]``: plain
    or conversational completions, the reference read from the dataset columns, and None where
    the verifier could not judge (timeout, sandbox or internal error), which TRL leaves out of
    the reward sum instead of counting it as a wrong answer.
    """

    def __init__(
        self,
        verifier: str | Verifier = "math",
        *,
        reference_column: str | None = None,
        name: str | None = None,
        remote: str | None = None,
        eos_token_id: int | Sequence[int] | None = None,
        **config: Any,
    ) -> None:
        # TRL passes each completion's token ids, up to and including its end-of-sequence
        # token: one that does not end in it was cut off (mark_truncated, docs/verifiers.md).
        self._eos = None if eos_token_id is None else eos_set(eos_token_id)
        # Built now so a bad kind or config fails at set-up, not at the first training step.
        self._verifier: Verifier | None = adapter_verifier(verifier, remote, config)
        # a local kind is rebuilt from these in a process this function is pickled into
        local = remote is None and isinstance(verifier, str)
        self._kind: str | None = verifier if local else None
        self._config = config if local else {}
        self.reference_column = reference_column
        self.__name__ = name or f"veristep_{getattr(verifier, 'kind', verifier)}"
        self._lock = threading.Lock()
        self._unjudged = _UnjudgedLog(self.__name__)

    @property
    def unjudged_counts(self) -> dict[str, int]:
        """How many completions this function left unjudged so far, by status."""
        return dict(self._unjudged.counts)

    @property
    def verifier(self) -> Verifier:
        """The verifier; after unpickling it is rebuilt on first use (worker pools do not pickle)."""
        with self._lock:
            if self._verifier is None:
                self._verifier = get_verifier(self._kind, **self._config)
            return self._verifier

    def references(self, n: int, columns: Mapping[str, Any]) -> list[Any]:
        """One reference per completion, from `reference_column` or the verifier's record reader."""
        if self.reference_column is not None:
            if self.reference_column not in columns:
                raise ValueError(self._missing(self.reference_column, columns))
            values = list(columns[self.reference_column])
            if len(values) != n:
                raise ValueError(
                    f"column {self.reference_column!r} has {len(values)} rows for {n} completions"
                )
            return values
        per_row = {k: v for k, v in columns.items() if isinstance(v, (list, tuple)) and len(v) == n}
        rows = [{k: v[i] for k, v in per_row.items()} for i in range(n)]
        try:
            return _references(self.verifier, rows)
        except KeyError as err:
            key = err.args[0] if err.args else "?"
            raise ValueError(self._missing(key, per_row)) from None

    def _missing(self, key: str, columns: Mapping[str, Any]) -> str:
        shown = ", ".join(sorted(k for k in columns if k not in _TRL_EXTRAS)) or "none"
        return (
            f"{self.__name__}: the dataset has no column {key!r} (columns: {shown}); add it or "
            "pass reference_column= to the reward function"
        )

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """Score a batch of completions; None where the verifier could not judge."""
        texts, refs = self._inputs(completions, kwargs)
        return self._rewards(_verify(self.verifier, texts, refs), kwargs)

    def _inputs(self, completions: Sequence[Any], kwargs: dict[str, Any]) -> tuple[list[str], list[Any]]:
        """The texts (cut-off ones marked) and references of one TRL call."""
        texts = [_safe_text(c) for c in completions]
        ids = kwargs.get("completion_ids")
        eos = getattr(self, "_eos", None)  # None in a function pickled by an older veristep
        if eos is not None and isinstance(ids, (list, tuple)) and len(ids) == len(texts):
            texts = [mark_truncated(text, bool(row) and _last(row) not in eos)
                     for text, row in zip(texts, ids, strict=True)]
        columns = {k: v for k, v in kwargs.items() if k not in _TRL_EXTRAS}
        return texts, self.references(len(texts), columns)

    def _rewards(self, results: list[VerifyResult], kwargs: dict[str, Any]) -> list[float | None]:
        """Count and log one call's results; its rewards, None where unjudged."""
        self._unjudged.add(results)
        self._log(results, kwargs)
        return [None if not r.judged else float(r.reward) for r in results]

    def _log(self, results: list[VerifyResult], kwargs: dict[str, Any]) -> None:
        # TRL >= 1.x passes these hooks; older versions do not, and then nothing is logged.
        log_metric, log_extra = kwargs.get("log_metric"), kwargs.get("log_extra")
        if callable(log_metric) and results:
            n = len(results)
            log_metric(f"{self.__name__}/correct_frac", sum(r.correct for r in results) / n)
            log_metric(
                f"{self.__name__}/unjudged_frac", sum(not r.judged for r in results) / n
            )
        if callable(log_extra):
            log_extra(f"{self.__name__}_status", [r.status.value for r in results])

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_lock")
        if self._kind is not None:  # rebuilt lazily on the other side; pools do not pickle
            state["_verifier"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


# Keyword arguments TRL passes besides dataset columns.
_TRL_EXTRAS = frozenset(
    {"prompts", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments"}
)


def adapter_verifier(verifier: str | Verifier, remote: str | None, config: Mapping[str, Any]) -> Verifier:
    """What an adapter scores with: a `veristep serve` server's kind (`remote=`, no pools here),
    a kind built with `config`, or a verifier instance (no config)."""
    if remote is not None:
        if config or not isinstance(verifier, str):
            raise ValueError("remote= takes the server's kind name and no config (the server holds it)")
        from veristep.client import RemoteVerifier

        return RemoteVerifier(remote, verifier)
    if isinstance(verifier, str):
        return get_verifier(verifier, **config)
    if config:
        raise ValueError("pass config keywords only with a verifier kind, not an instance")
    return verifier


def _safe_text(completion: Any) -> str:
    try:
        return completion_text(completion)
    except TypeError:  # model output is data: never let an odd shape stop training
        try:
            return str(completion)
        except (ValueError, RecursionError):  # a huge integer, deep nesting: no text to judge
            return ""


def _last(row: Any) -> Any:
    try:
        last = row[-1]
    except (TypeError, IndexError, KeyError):
        return None
    return int(last) if hasattr(last, "__int__") else last


def trl_reward_func(
    verifier: str | Verifier = "math",
    *,
    reference_column: str | None = None,
    name: str | None = None,
    remote: str | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    **config: Any,
) -> TRLRewardFunction:
    """Return a TRL reward function: `GRPOTrainer(..., reward_funcs=[trl_reward_func("math")])`.

    `remote="http://host:port"` scores on a `veristep serve` server instead of local pools;
    `eos_token_id` (the tokenizer's) marks completions that do not end in it as cut off.
    """
    return TRLRewardFunction(verifier, reference_column=reference_column, name=name,
                             remote=remote, eos_token_id=eos_token_id, **config)


# ---------------------------------------------------------------------------------------------
# verl

#: verl `data_source` values and the verifier kind that scores them.
DATA_SOURCE_KINDS: dict[str, str] = {
    "openai/gsm8k": "math",
    "gsm8k": "math",
    "lighteval/MATH": "math",
    "DigitalLearningGmbH/MATH-lighteval": "math",
    "HuggingFaceH4/MATH-500": "math",
    "math500": "math",
    "math_dapo": "math",
    "numina_aops_forum": "math",
    "numina_synthetic_math": "math",
    "numina_amc_aime": "math",
    "numina_synthetic_amc": "math",
    "numina_cn_k12": "math",
    "numina_olympiads": "math",
    "codecontests": "code",
    "apps": "code",
    "codeforces": "code",
    "taco": "code",
    "code": "code",
    "tools": "tools",
    "bfcl": "tools",
}
# Families recognised by prefix, checked in order after the exact names.
_DATA_SOURCE_PREFIXES: tuple[tuple[str, str], ...] = (
    ("aime", "math"),
    ("amc", "math"),
    ("math", "math"),
    ("numina", "math"),
    ("gsm8k", "math"),
    ("code", "code"),
    ("livecodebench", "code"),
    ("mbpp", "code"),
    ("humaneval", "code"),
    ("openai_humaneval", "code"),
    ("tool", "tools"),
    ("bfcl", "tools"),
)


class UnknownDataSource(NotImplementedError, ValueError):
    """No verifier kind is known for a verl data_source (verl raises NotImplementedError too)."""


def kind_for_data_source(data_source: str, extra_info: Mapping[str, Any] | None = None) -> str:
    """The verifier kind for a verl data_source; `extra_info["veristep_kind"]` overrides it."""
    if isinstance(extra_info, Mapping) and extra_info.get("veristep_kind"):
        return str(extra_info["veristep_kind"])
    if data_source in DATA_SOURCE_KINDS:
        return DATA_SOURCE_KINDS[data_source]
    lowered = str(data_source).lower()
    for prefix, kind in _DATA_SOURCE_PREFIXES:
        if lowered.startswith(prefix) or lowered.rsplit("/", 1)[-1].startswith(prefix):
            return kind
    raise UnknownDataSource(
        f"no veristep verifier for data_source={data_source!r}; set extra_info['veristep_kind'] "
        f"or use one of {sorted(DATA_SOURCE_KINDS)}"
    )


def _decode(value: Any) -> Any:
    # verl keeps ground truth in parquet, where structured references are often JSON strings.
    if isinstance(value, (str, bytes)):
        text = _text(value)
        if text.lstrip()[:1] in ("{", "["):
            try:
                return json.loads(text)
            except (ValueError, RecursionError):
                return text
        return text
    if hasattr(value, "tolist"):  # numpy arrays from parquet columns
        return value.tolist()
    return value


def _text(value: str | bytes) -> str:
    """Ground truth as text; bytes that are not UTF-8 are read with replacement characters."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _reference_record(
    kind: str, ground_truth: Any, extra_info: Mapping[str, Any] | None
) -> dict[str, Any]:
    """A JSONL-style record from verl's ground truth and extra_info, for reference_from_record.

    Only the shape changes here: the verifier's own parser reads the record, so verl accepts
    exactly the reference formats the Python API and the CLI accept.
    """
    record: dict[str, Any] = dict(extra_info) if isinstance(extra_info, Mapping) else {}
    if kind == "math":  # the answer text as is: "[1, 2]" is an interval, not JSON
        raw = _text(ground_truth) if isinstance(ground_truth, bytes) else ground_truth
        # the verifier's reader writes the rest as text, and keeps None and NaN to report them
        record["answer"] = raw if raw is None or isinstance(raw, str) else _decode(raw)
        return record
    truth = _decode(ground_truth)
    record["ground_truth"] = truth
    if isinstance(truth, Mapping):
        record.update(truth)
    elif kind == "tools" and isinstance(truth, list):
        record["expected"] = truth
    else:  # any other kind: the conventional reference keys
        record.setdefault("answer", truth)
    return record


class VerlScorer:
    """verl custom reward function: one verifier per kind, built on first use and reused."""

    def __init__(self, configs: Mapping[str, Mapping[str, Any]] | None = None, remote: str | None = None) -> None:
        self.configs = {k: dict(v) for k, v in (configs or {}).items()}
        self.remote = remote  # a `veristep serve` URL: verdicts come from there, no pools here
        self._verifiers: dict[str, Verifier] = {}
        self._lock = threading.Lock()
        self._unjudged = _UnjudgedLog("veristep verl scorer")

    @property
    def unjudged_counts(self) -> dict[str, int]:
        """How many responses this scorer left unjudged so far, by status."""
        return dict(self._unjudged.counts)

    def __getstate__(self) -> dict[str, Any]:
        # verifiers hold worker processes: rebuilt on first use on the other side
        return {"configs": self.configs, "remote": self.remote, "_unjudged": self._unjudged}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._verifiers = {}
        self._lock = threading.Lock()

    def verifier(self, kind: str) -> Verifier:
        """The cached verifier of `kind`."""
        with self._lock:
            if kind not in self._verifiers:
                if self.remote:
                    from veristep.client import RemoteVerifier

                    self._verifiers[kind] = RemoteVerifier(self.remote, kind)
                else:
                    self._verifiers[kind] = get_verifier(kind, **self.configs.get(kind, {}))
            return self._verifiers[kind]

    def __call__(
        self,
        data_source: str,
        solution_str: str,
        ground_truth: Any,
        extra_info: Mapping[str, Any] | None = None,
        **_: Any,
    ) -> VerlScore:
        """Score one response: {"score", "acc", "pred", "status", "judged", "kind"}."""
        return self.batch([data_source], [solution_str], [ground_truth], [extra_info])[0]

    def batch(
        self,
        data_sources: Sequence[str],
        solution_strs: Sequence[str],
        ground_truths: Sequence[Any],
        extra_infos: Sequence[Mapping[str, Any] | None] | None = None,
        **_: Any,
    ) -> list[VerlScore]:
        """Score many responses, one `verify_batch` per verifier kind, results in input order."""
        n = len(solution_strs)
        infos = list(extra_infos) if extra_infos is not None else [None] * n
        if not (len(data_sources) == len(ground_truths) == len(infos) == n):
            raise ValueError(
                "data_sources, solution_strs, ground_truths, extra_infos differ in length"
            )
        by_kind: dict[str, list[int]] = {}
        for i in range(n):
            by_kind.setdefault(kind_for_data_source(data_sources[i], infos[i]), []).append(i)
        scores: list[VerlScore] = [VerlScore() for _ in range(n)]
        for kind, idx in by_kind.items():
            verifier = self.verifier(kind)
            try:
                refs = _references(verifier, [_reference_record(kind, ground_truths[i], infos[i]) for i in idx])
            except KeyError as err:
                raise ValueError(
                    f"ground_truth/extra_info lack {err.args[0]!r}, which the {kind} verifier "
                    "needs as its reference"
                ) from None
            texts = [mark_truncated(_safe_text(solution_strs[i]), truncation_flag(infos[i]))
                     for i in idx]
            results = _verify(verifier, texts, refs)
            self._unjudged.add(results)
            for i, result in zip(idx, results, strict=True):
                scores[i] = verl_score(result, kind)
        return scores

    def close(self) -> None:
        """Close the cached verifiers."""
        with self._lock:
            for verifier in self._verifiers.values():
                close = getattr(verifier, "close", None)
                if callable(close):
                    close()
            self._verifiers.clear()


class VerlScore(dict):
    """verl's dict result, which also answers `result[0]` with the score.

    verl's naive, dapo and reward-loop managers read a dict (and stack its keys into
    reward_extra_info); its PrimeRewardManager reads `float(result[0])` from anything that is
    not a number. One return type serves both.
    """

    def __getitem__(self, key: Any) -> Any:
        if key == 0 and not isinstance(key, bool):
            return dict.__getitem__(self, "score")
        return dict.__getitem__(self, key)


def verl_score(result: VerifyResult, kind: str) -> VerlScore:
    """verl's dict form of a result; same keys and types every time so verl can stack them.

    verl needs a number in "score", so an unjudged item scores 0.0 with judged=False (and the
    status says why: timeout, bad_reference ...).
    """
    judged = bool(result.judged)
    return VerlScore({
        "score": float(result.reward) if judged else 0.0,
        "acc": bool(result.correct),
        "pred": result.extracted or "",
        "status": result.status.value,
        "judged": judged,
        "kind": kind,
    })


_SCORERS: dict[str, VerlScorer] = {}
_SCORERS_LOCK = threading.Lock()


def _scorer(config: Mapping[str, Mapping[str, Any]] | None, remote: str | None = None) -> VerlScorer:
    """The shared scorer for one verifier configuration (verl's reward_kwargs.veristep_config)."""
    key = json.dumps([config or {}, remote], sort_keys=True, default=str)
    with _SCORERS_LOCK:
        if key not in _SCORERS:
            _SCORERS[key] = VerlScorer(config, remote)
        return _SCORERS[key]


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    veristep_config: Mapping[str, Mapping[str, Any]] | None = None,
    veristep_remote: str | None = None,
    **_: Any,
) -> VerlScore:
    """verl `custom_reward_function` entry point (naive, dapo, prime ...): score one response.

    `veristep_config` (from verl's `custom_reward_function.reward_kwargs`) maps a verifier kind
    to its keyword configuration, e.g. {"math": {"timeout": 3}}; `veristep_remote` (a `veristep
    serve` URL) scores on that server instead of local pools.
    """
    return _scorer(veristep_config, veristep_remote)(data_source, solution_str, ground_truth, extra_info)


def compute_score_batch(
    data_sources: Sequence[str] | None,
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Mapping[str, Any] | None] | None = None,
    veristep_config: Mapping[str, Mapping[str, Any]] | None = None,
    veristep_remote: str | None = None,
    **_: Any,
) -> list[VerlScore]:
    """verl entry point for its BatchRewardManager: score a whole batch in parallel.

    verl's offline evaluation passes data_sources=None; extra_info["veristep_kind"] then names
    the kind.
    """
    if data_sources is None:
        data_sources = [""] * len(solution_strs)
    return _scorer(veristep_config, veristep_remote).batch(data_sources, solution_strs, ground_truths, extra_infos)


__all__ = [
    "DATA_SOURCE_KINDS",
    "TRLRewardFunction",
    "UnknownDataSource",
    "VerlScore",
    "VerlScorer",
    "compute_score",
    "compute_score_batch",
    "kind_for_data_source",
    "trl_reward_func",
    "truncation_flag",
    "verl_score",
]

if __name__ != _PACKAGE:
    # Loaded by file path (verl's custom_reward_function.path) as a module of its own: hand out
    # the installed package's objects instead, so that they pickle by reference (a process
    # pool or Ray actor can import them) and share one set of verifiers with the package.
    _installed = importlib.import_module(_PACKAGE)
    globals().update({name: getattr(_installed, name) for name in __all__})

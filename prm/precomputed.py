"""Step scores computed elsewhere (a GPU job, another toolkit) and read back from JSONL."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .base import StepScores
from .steps import DEFAULT_SEPARATOR, split_steps, step_texts


def _ordered_spans(spans: Any) -> bool:
    """Whether `spans` is a list of [start, end] integer pairs, non-empty, in order, apart."""
    if not isinstance(spans, list):
        return False
    last = 0
    for span in spans:
        if not (isinstance(span, list) and len(span) == 2
                and all(isinstance(x, int) and not isinstance(x, bool) for x in span)):
            return False
        start, end = span
        if not last <= start < end:
            return False
        last = end
    return True


class PrecomputedScorer:
    """Serve step scores from a JSONL file written by `veristep prm score` or by hand.

    Each line holds `step_scores` (a list of floats in [0, 1]; on top or, as `veristep prm
    score` writes it, under a `veristep` key) and either `prompt` and `completion`, or an `id`;
    `step_spans` (character spans, beside `step_scores`) are optional and otherwise the
    completion is split with `separator` / `regex`. A trace missing from the file is a
    configuration error (the wrong file), so it raises ValueError.
    """

    kind = "scores"

    def __init__(
        self,
        path: str | Path,
        separator: str = DEFAULT_SEPARATOR,
        regex: str | None = None,
    ) -> None:
        self.path = Path(path)
        self.separator = separator
        self.regex = regex
        self._by_text: dict[tuple[str, str], dict[str, Any]] = {}
        self._by_id: dict[str, dict[str, Any]] = {}
        if not self.path.is_file():
            raise ValueError(f"scores file {self.path} does not exist")
        with self.path.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as err:
                    raise ValueError(f"{self.path}:{lineno}: not JSON ({err})") from err
                nested = record.get("veristep")
                if isinstance(nested, dict) and "step_scores" in nested:
                    record = {**record, **nested}  # written by `veristep prm score`
                scores = record.get("step_scores")
                if not isinstance(scores, list) or not all(
                    isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s)
                    for s in scores
                ):
                    # a NaN was passed on (and written back as null), an infinity clamped to 1
                    raise ValueError(f"{self.path}:{lineno}: 'step_scores' must be a list of finite numbers")
                spans = record.get("step_spans")
                if spans is not None and not _ordered_spans(spans):
                    raise ValueError(f"{self.path}:{lineno}: 'step_spans' must be [start, end] pairs of "
                                     "integers, 0 <= start < end, each starting at or after the last one's end")
                if "prompt" in record and "completion" in record:
                    self._by_text[(str(record["prompt"]), str(record["completion"]))] = record
                if "id" in record:
                    if str(record["id"]) in self._by_id:
                        raise ValueError(f"{self.path}:{lineno}: duplicate id {record['id']!r}")
                    self._by_id[str(record["id"])] = record
                if "id" not in record and "completion" not in record:
                    raise ValueError(f"{self.path}:{lineno}: needs 'id' or 'prompt' and 'completion'")

    def __len__(self) -> int:
        """Number of distinct traces the file scores."""
        return max(len(self._by_text), len(self._by_id))

    def has_ids(self) -> bool:
        """Whether the file can be looked up by trace id."""
        return bool(self._by_id)

    def score(self, prompt: str, completion: str) -> StepScores:
        """The stored scores of (prompt, completion)."""
        record = self._by_text.get((prompt, completion))
        if record is None:
            raise ValueError(
                f"{self.path} has no scores for this (prompt, completion) pair "
                f"(completion starts {completion[:60]!r}); score the same data that was stored"
            )
        return self._to_scores(record, completion)

    def score_batch(self, prompts: Sequence[str], completions: Sequence[str]) -> list[StepScores]:
        """The stored scores of each pair."""
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
        return [self.score(p, c) for p, c in zip(prompts, completions, strict=True)]

    def score_ids(self, ids: Sequence[str], completions: Sequence[str]) -> list[StepScores]:
        """The stored scores by trace id (for benchmark data whose ids the file carries)."""
        out = []
        for trace_id, completion in zip(ids, completions, strict=True):
            record = self._by_id.get(str(trace_id))
            if record is None:
                raise ValueError(f"{self.path} has no scores for id {trace_id!r}")
            out.append(self._to_scores(record, completion))
        return out

    def _to_scores(self, record: dict[str, Any], completion: str) -> StepScores:
        if isinstance(record.get("step_spans"), list):
            spans = [(int(a), int(b)) for a, b in record["step_spans"]]
            if spans and spans[-1][1] > len(completion):
                raise ValueError(f"{self.path}: step spans reach character {spans[-1][1]} of a "
                                 f"{len(completion)}-character completion (id={record.get('id')!r})")
        else:
            spans = split_steps(completion, self.separator, self.regex)
        scores = [min(max(float(s), 0.0), 1.0) for s in record["step_scores"]]
        if len(scores) != len(spans):
            raise ValueError(
                f"{self.path}: {len(scores)} stored scores but {len(spans)} steps in the "
                f"completion (id={record.get('id')!r}); check the step separator"
            )
        return StepScores(step_texts(completion, spans), spans, scores)

"""Prompt difficulty: a per-prompt EMA of success that sorts prompts into easy / frontier / hard."""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from enum import Enum
from typing import Any

import torch


class Difficulty(str, Enum):
    """How hard a prompt currently is for the policy, from its EMA success rate."""

    EASY = "easy"  # EMA near 1: downsample, or move out of the main training data
    FRONTIER = "frontier"  # mixed outcomes: the main training data
    HARD = "hard"  # EMA near 0: audit the verifier first, then larger G, then process rewards


_STATE_VERSION = 1


def _as_list(values: torch.Tensor | Iterable[Any], name: str) -> list[Any]:
    """A tensor or iterable as a flat Python list."""
    if isinstance(values, torch.Tensor):
        if values.dim() > 1:
            raise ValueError(f"{name} must be 1-D, got shape {tuple(values.shape)}")
        return values.tolist()
    return list(values)


class DifficultyTracker:
    """Per-prompt EMA success rates, difficulty classes and sampling weights (checkpointable).

    ema = alpha * new_rate + (1 - alpha) * ema; the first observation sets the EMA. A prompt
    with ema >= easy_threshold is easy, <= hard_threshold hard, else frontier; prompts seen
    fewer than `min_updates` times, and prompts never seen, count as frontier.
    """

    def __init__(
        self,
        alpha: float = 0.3,
        easy_threshold: float = 0.9,
        hard_threshold: float = 0.1,
        weights: Mapping[str, float] | None = None,
        min_updates: int = 1,
    ) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        if not 0.0 <= hard_threshold < easy_threshold <= 1.0:
            raise ValueError(
                "need 0 <= hard_threshold < easy_threshold <= 1, got "
                f"hard_threshold={hard_threshold}, easy_threshold={easy_threshold}"
            )
        if min_updates < 1:
            raise ValueError(f"min_updates must be >= 1, got {min_updates}")
        merged = {Difficulty.EASY: 0.1, Difficulty.FRONTIER: 1.0, Difficulty.HARD: 0.5}
        for key, value in (weights or {}).items():
            try:
                level = Difficulty(key)
            except ValueError:
                raise ValueError(
                    f"weights key {key!r} is not one of 'easy', 'frontier', 'hard'"
                ) from None
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"weights[{key!r}] must be finite and >= 0, got {value}")
            merged[level] = float(value)
        self.alpha = float(alpha)
        self.easy_threshold = float(easy_threshold)
        self.hard_threshold = float(hard_threshold)
        self.weights: dict[Difficulty, float] = merged
        self.min_updates = int(min_updates)
        self._ema: dict[Hashable, float] = {}
        self._count: dict[Hashable, int] = {}

    def __len__(self) -> int:
        """Number of prompts seen so far."""
        return len(self._ema)

    def update(
        self,
        prompt_ids: torch.Tensor | Sequence[Hashable],
        success_rates: torch.Tensor | Sequence[float],
    ) -> None:
        """Fold one step's success rates (in [0, 1], one per prompt id) into the EMAs."""
        ids = _as_list(prompt_ids, "prompt_ids")
        rates = [float(r) for r in _as_list(success_rates, "success_rates")]
        if len(ids) != len(rates):
            raise ValueError(f"got {len(ids)} prompt ids but {len(rates)} success rates")
        bad = [r for r in rates if not (math.isfinite(r) and 0.0 <= r <= 1.0)]
        if bad:
            raise ValueError(f"success rates must lie in [0, 1], got {bad[:5]}")
        for pid, rate in zip(ids, rates, strict=True):
            old = self._ema.get(pid)
            self._ema[pid] = rate if old is None else self.alpha * rate + (1 - self.alpha) * old
            self._count[pid] = self._count.get(pid, 0) + 1

    def success(self, prompt_id: Hashable) -> float | None:
        """The EMA success rate of a prompt, or None if it was never updated."""
        return self._ema.get(prompt_id)

    def difficulty_of(self, prompt_id: Hashable) -> Difficulty:
        """The difficulty class of a prompt now."""
        ema = self._ema.get(prompt_id)
        if ema is None or self._count[prompt_id] < self.min_updates:
            return Difficulty.FRONTIER
        if ema >= self.easy_threshold:
            return Difficulty.EASY
        if ema <= self.hard_threshold:
            return Difficulty.HARD
        return Difficulty.FRONTIER

    def by_difficulty(self) -> dict[str, list[Hashable]]:
        """Every known prompt id by class: {"easy": [...], "frontier": [...], "hard": [...]}."""
        out: dict[str, list[Hashable]] = {d.value: [] for d in Difficulty}
        for pid in self._ema:
            out[self.difficulty_of(pid).value].append(pid)
        return out

    def sample_weights(self, prompt_ids: Sequence[Hashable] | None = None) -> torch.Tensor:
        """float64 sampling weight per prompt id (default: all known ids, in first-seen order)."""
        ids = list(self._ema) if prompt_ids is None else _as_list(prompt_ids, "prompt_ids")
        return torch.tensor([self.weights[self.difficulty_of(pid)] for pid in ids], dtype=torch.float64)

    def state_dict(self) -> dict[str, Any]:
        """A plain, JSON-serialisable snapshot (ids must be str or int to survive JSON)."""
        return {
            "version": _STATE_VERSION,
            "config": {
                "alpha": self.alpha,
                "easy_threshold": self.easy_threshold,
                "hard_threshold": self.hard_threshold,
                "weights": {d.value: w for d, w in self.weights.items()},
                "min_updates": self.min_updates,
            },
            # A list of rows keeps int ids as ints through JSON (dict keys would become str).
            "prompts": [[pid, self._ema[pid], self._count[pid]] for pid in self._ema],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the configuration and per-prompt statistics saved by `state_dict`."""
        if state.get("version") != _STATE_VERSION:
            raise ValueError(
                f"DifficultyTracker state version {state.get('version')!r} is not {_STATE_VERSION}"
            )
        restored = DifficultyTracker(**state["config"])  # validates the saved configuration
        for row in state["prompts"]:
            pid, ema, count = row
            pid = tuple(pid) if isinstance(pid, list) else pid  # JSON turns tuples into lists
            restored._ema[pid] = float(ema)
            restored._count[pid] = int(count)
        self.__dict__.update(restored.__dict__)

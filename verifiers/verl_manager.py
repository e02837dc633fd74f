"""verl reward-loop managers that tell veristep which responses were cut off.

verl 0.9.1 hands `compute_score` the decoded text only (special tokens skipped) and no finish
reason, so a response stopped by the length limit looks like a finished one. These managers
(verl's own `naive` and `dapo` reward-loop managers, unchanged otherwise) read the response's
token ids before verl decodes them and set ``extra_info["truncated"]``, which
`veristep.verifiers.adapters.compute_score` reads (docs/verifiers.md, "verl").

A response is cut off when it fills the whole response window (``responses`` is padded to
``rollout.response_length``) and its last token is not an end-of-sequence token: a response
that ended on a stop string before the limit, or on the end-of-sequence token at the limit,
is not.

Use (verl 0.9.x)::

    reward.reward_manager.source=importlib \
    reward.reward_manager.name=VeristepRewardManager \
    reward.reward_manager.module.path=$(python -c "import veristep.verifiers.verl_manager as m; print(m.__file__)")

Importing this module needs verl; `veristep.verifiers.adapters` does not.
"""

from __future__ import annotations

import importlib
import numbers
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from veristep.verifiers.core.text import eos_set, truncation_flag
from verl.experimental.reward_loop.reward_manager.dapo import DAPORewardManager
from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

_PACKAGE = "veristep.verifiers.verl_manager"


def eos_ids(tokenizer: Any, extra: Iterable[int] = ()) -> frozenset[int]:
    """The end-of-sequence token ids of `tokenizer` (its eos_token_id, one id or a list) plus `extra`."""
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, numbers.Integral):  # numpy's integers too
        eos = int(eos)
    elif isinstance(eos, (list, tuple)):
        eos = [int(e) for e in eos if isinstance(e, numbers.Integral)]
    else:
        eos = None
    return eos_set(eos) | eos_set(extra)


def response_truncated(data_item: Any, eos: frozenset[int]) -> bool:
    """Whether one `DataProtoItem`'s response filled its window without an end-of-sequence token."""
    response_ids = data_item.batch["responses"]
    width = response_ids.shape[-1]
    if width == 0:  # `[-0:]` below would be the whole mask, prompt included
        return False
    valid = int(data_item.batch["attention_mask"][-width:].sum())
    if valid == 0 or valid < width:
        return False
    return int(response_ids[valid - 1]) not in eos


def mark_truncated_rows(data: Any, tokenizer: Any, extra_eos: Iterable[int] = ()) -> Any:
    """`data` with each row's ``extra_info["truncated"]`` set from its token ids (copies, the
    dataset's own dicts are left alone); a row whose extra_info already says (``truncated``, or
    a ``finish_reason`` from the rollout) keeps what it says."""
    eos = eos_ids(tokenizer, extra_eos)
    infos = data.non_tensor_batch.get("extra_info")
    marked = np.empty(len(data), dtype=object)
    for i in range(len(data)):
        info = dict(infos[i]) if infos is not None and isinstance(infos[i], Mapping) else {}
        # a rollout's own "length" outranks the window test: a per-turn max_tokens can cut a
        # response short of the window (it read as finished, and a cut-off text scored 1.0)
        if truncation_flag(info) is None:
            info["truncated"] = response_truncated(data[i], eos)
        marked[i] = info
    data.non_tensor_batch["extra_info"] = marked
    return data


class _MarksTruncation:
    """Sets ``extra_info["truncated"]`` before the parent manager scores a response."""

    tokenizer: Any

    async def run_single(self, data: Any) -> dict:
        """Score like the parent manager, with the cut-off flag in `extra_info`."""
        # verl scores the last row only (multi-sequence outputs); the slice is a new DataProto,
        # so the caller's batch is left as it was
        return await super().run_single(mark_truncated_rows(data[-1:], self.tokenizer))  # type: ignore[misc]


class VeristepRewardManager(_MarksTruncation, NaiveRewardManager):
    """verl's reward-loop `naive` manager, plus the cut-off flag veristep reads."""


class VeristepDAPORewardManager(_MarksTruncation, DAPORewardManager):
    """verl's reward-loop `dapo` manager (overlong penalty), plus the cut-off flag veristep reads."""


__all__ = ["VeristepDAPORewardManager", "VeristepRewardManager", "eos_ids", "mark_truncated_rows",
           "response_truncated"]

if __name__ != _PACKAGE:
    # Loaded by file path (verl's importlib source): hand out the installed package's classes
    _installed = importlib.import_module(_PACKAGE)
    globals().update({name: getattr(_installed, name) for name in __all__})

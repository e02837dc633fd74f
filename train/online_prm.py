"""The implicit PRM as a trainer option (`--prm implicit:DIR[,beta=B,lr=L]`): updated online.

PRIME's implicit PRM (`veristep.prm.implicit`) scores the gated groups' steps like any scorer;
after that, each training step updates it with PRIME's cross-entropy on the step's own outcome
labels (the verifiers' rewards of every judged completion of the batch, not only the gated
ones; unjudged completions have no label and are left out). Its state (pi_phi's weights, its
optimizer, its cost counters) goes into the trainer's checkpoint and comes back on resume, so a
resumed run continues the same PRM. One process only for now: each rank would update its own
copy on its own completions, and the copies would drift apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from veristep.prm.options import spec_kind

from .distributed import DistInfo
from .lockstep import refuse_multi_process

#: The checkpoint key of the PRM's state.
STATE_KEY = "online_prm"


def is_online(scorer: Any | None) -> bool:
    """Whether `scorer` learns during training (the implicit PRM)."""
    return getattr(scorer, "kind", None) == "implicit" and callable(getattr(scorer, "update", None))


def is_implicit_spec(spec: str | None) -> bool:
    """Whether a `prm` spec names the implicit PRM."""
    return spec_kind(spec) == "implicit"


def check_online_prm(spec: str, info: DistInfo) -> None:
    """Refuse an online-updated PRM under several processes (before its model is loaded)."""
    refuse_multi_process(info, f"prm={spec!r}", "the implicit PRM is updated online from each "
                         "rank's own completions; the ranks' copies would drift apart")


def update_online_prm(scorer: Any | None, problem_texts: Sequence[str], completions: Sequence[str],
                      outcome: torch.Tensor, judged: torch.Tensor) -> dict[str, float]:
    """One PRIME update from this step's outcomes; its metrics ({} for a scorer that does not learn).

    `outcome` and `judged` are `[n, G]` (group-major, as `completions`); `problem_texts` has
    one text per group.
    """
    if not is_online(scorer):
        return {}
    G = outcome.shape[1]
    rows = [i for i, ok in enumerate(judged.reshape(-1).tolist()) if ok]
    flat = outcome.reshape(-1).tolist()
    out = scorer.update([problem_texts[i // G] for i in rows], [completions[i] for i in rows],
                        [flat[i] for i in rows])
    return {"prm/update_s": out["forward_s"] + out["backward_s"], "prm/update_forward_s": out["forward_s"],
            "prm/update_backward_s": out["backward_s"], "prm/update_loss": out["loss"],
            "prm/update_seqs": out["seqs"]}


def online_prm_state(scorer: Any | None) -> dict[str, Any]:
    """The entry the trainer's checkpoint state gets for a learning PRM ({} for any other)."""
    return {STATE_KEY: scorer.state_dict()} if is_online(scorer) else {}


def restore_online_prm(scorer: Any | None, run_state: dict[str, Any], ckpt: Path) -> None:
    """Load a learning PRM's state from a resumed checkpoint; one that lacks it is refused."""
    if not is_online(scorer):
        return
    state = run_state.get(STATE_KEY)
    if not isinstance(state, dict):
        raise ValueError(f"checkpoint {ckpt} holds no implicit PRM state (key {STATE_KEY!r}): it was written "
                         "by a run without --prm implicit:...; resuming would restart the PRM from its "
                         "folder. Start without --resume, or resume with that run's --prm")
    scorer.load_state_dict(state)

"""Advantage estimators, the VeriGate gate and collapse monitors (pure tensor functions).

Shapes: N prompts, G samples each, S steps, T completion tokens; padding is masked
(step_mask False, token_step -1). Every estimator is defined, with hand-computed cases, in
docs/gating-spec.md; docs/gating.md summarises the conventions.

Modules: options (option enums), checks (input validation), groups (group statistics on
checked tensors), outcome / verigate / prm_outcome / dapo (the estimators and DAPO's pieces),
token_steps (response <-> step <-> token maps), monitors (collapse rates), diagnostics
(which step a credit form blames, given true step labels), difficulty
(per-prompt easy / frontier / hard tracking), reference (a slow plain-Python oracle for tests).
"""

from .dapo import clipped_surrogate, dynamic_sampling_keep, overlong_penalty
from .diagnostics import STEP_KINDS, credit_diagnostics, step_kinds
from .difficulty import Difficulty, DifficultyTracker
from .monitors import collapse_mask, collapse_metrics, collapse_stats
from .options import Agg, Credit, Gate, OutcomeMethod, Std, VirtualValue
from .outcome import outcome_advantages
from .prm_outcome import prm_as_outcome_rewards
from .token_steps import broadcast_to_tokens, steps_to_tokens, token_step_from_offsets
from .verigate import (
    future_cumulated_rewards,
    gate_mask,
    prm_step_advantages,
    process_grpo_advantages,
    verigate_advantages,
)

__all__ = [
    "STEP_KINDS",
    "Agg",
    "Credit",
    "Difficulty",
    "DifficultyTracker",
    "Gate",
    "OutcomeMethod",
    "Std",
    "VirtualValue",
    "broadcast_to_tokens",
    "clipped_surrogate",
    "collapse_mask",
    "collapse_metrics",
    "collapse_stats",
    "credit_diagnostics",
    "dynamic_sampling_keep",
    "future_cumulated_rewards",
    "gate_mask",
    "outcome_advantages",
    "overlong_penalty",
    "prm_as_outcome_rewards",
    "prm_step_advantages",
    "process_grpo_advantages",
    "step_kinds",
    "steps_to_tokens",
    "token_step_from_offsets",
    "verigate_advantages",
]

"""Process reward models: split completions into steps, score each step, measure calibration."""

from .base import StepScorer, StepScores
from .loader import SCORER_KINDS, load_scorer
from .metrics import AGGREGATIONS, aggregate
from .precomputed import PrecomputedScorer
from .rule import ArithClaim, RuleScorer, StepCheck, check_claims, check_step
from .steps import DEFAULT_SEPARATOR, split_steps, step_texts, token_step_index

__all__ = [
    "AGGREGATIONS",
    "DEFAULT_SEPARATOR",
    "SCORER_KINDS",
    "ArithClaim",
    "PrecomputedScorer",
    "RuleScorer",
    "StepCheck",
    "StepScorer",
    "StepScores",
    "aggregate",
    "check_claims",
    "check_step",
    "load_scorer",
    "split_steps",
    "step_texts",
    "token_step_index",
]

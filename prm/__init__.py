"""Process reward models: split completions into steps and score each step."""

from .base import StepScorer, StepScores

__all__ = ["StepScorer", "StepScores"]

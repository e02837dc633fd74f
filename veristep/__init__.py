"""veristep: verifiers, process rewards and gated GRPO for RL of language models."""

__version__ = "0.1.0"

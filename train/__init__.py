"""The gated GRPO trainer and its building blocks."""

"""The gated GRPO trainer (gated_grpo.py) and its components; the demo assets are in `.demo`."""

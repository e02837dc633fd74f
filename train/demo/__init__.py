"""The trainer's built-in demo assets, kept apart from its components.

`task`: the seeded step-wise arithmetic task (problems, reference step solutions, noisy
demonstrations, the completion checker). `warmstart`: the recipe that trains a tiny model on
that task so RL starts from a policy that sometimes succeeds (`builtin:warmstart`). `tiny`: the
offline character tokenizer and tiny causal LM that tests and the CPU demo build on.
"""

"""Conventions every part shares, below all of them: JSONL I/O, exit codes, errors, text formats.

Nothing here imports `veristep.verifiers`, `veristep.gating`, `veristep.prm` or
`veristep.train` (docs/architecture.md, "Layers"), so any part and any edge may import it.
"""

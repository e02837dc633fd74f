"""What every verifier shares: result types, the kind registry, weighted combination, the one
killable worker pool (`workers.WorkerPool`) and its batch adapter, and completion text.

The public names are re-exported by `veristep.verifiers`; import them from there.
"""

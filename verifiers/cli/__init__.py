"""The command-line and JSONL edge: `veristep verify` (verify.py), `veristep audit` (audit.py),
the streamed batch runner, JSONL reading and writing, and the optional Ray backend."""

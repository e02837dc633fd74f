"""`ast.parse` that is safe to call from several threads of one process.

CPython before 3.12 keeps the AST builder's recursion counter in one place per interpreter. A
thread switch inside `ast.parse` (a garbage-collected object's `__del__` runs Python code and
gives up the GIL) lets another thread's parse reset that counter, and the first parse then
fails with `SystemError: AST constructor recursion depth mismatch`. The verifiers parse
references and completions in the caller's threads (a server's lanes, a trainer's reward
workers), so every such parse goes through `parse` here.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.RLock()
_TRIES = 3  # a parse outside this module (another library's thread) can still collide


def parse(source: str, mode: str = "exec") -> ast.AST:
    """`ast.parse(source, mode=mode)`, one at a time in this process; its own errors unchanged."""
    with _LOCK:
        for attempt in range(_TRIES):
            try:
                return ast.parse(source, mode=mode)
            except SystemError:
                if attempt == _TRIES - 1:
                    raise
    raise AssertionError("unreachable")

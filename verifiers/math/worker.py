"""The two functions the worker pool calls for MathVerifier, and the workers' warm-up.

A chunk shares one prepared reference (`reference_state`); each item is either a normalised
prediction that only sympy can judge, or a whole long completion (`RawCompletion`) whose
extraction runs here, under the item's time limit, instead of in the caller.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from ..core.result import Status
from ..core.text import mark_truncated
from .equiv import EquivConfig, ParsedAnswer, Verdict, compare_parsed, parse_answer
from .extract import Extraction, ExtractionMethod, ExtractionMode
from .sympy_free import Reference, decide

# Parsed references per worker process: a reference that comes back in a later chunk (the
# same prompt in the next batch, or a group cut in two) is not parsed again.
_REFERENCE_CACHE: OrderedDict[tuple[str, int | None, EquivConfig], ParsedAnswer] = OrderedDict()
_REFERENCE_CACHE_SIZE = 1024

#: What `judge` returns: status, detail, numeric_close, and the extraction a raw item found
#: (plain values, see `unpack`).
Judgement = tuple[str, str, bool, Any]


@dataclass(frozen=True)
class RawCompletion:
    """A completion handed over whole: its extraction runs in the worker, under the deadline."""

    text: str
    mode: ExtractionMode
    #: The generator cut it off (the mark does not survive every pickler: kept here too).
    truncated: bool = False


@dataclass
class ReferenceState:
    """One chunk's reference: prepared in the caller, parsed by sympy on first need."""

    reference: Reference
    config: EquivConfig
    _parsed: ParsedAnswer | None = None

    def parsed(self) -> ParsedAnswer:
        """The reference parsed by math-verify (once per worker, cached across chunks)."""
        if self._parsed is None:
            key = (self.reference.normalized, self.reference.decimals, self.config)
            cached = _REFERENCE_CACHE.get(key)
            if cached is None:
                cached = parse_answer(key[0], self.config, key[1])
                _REFERENCE_CACHE[key] = cached
                if len(_REFERENCE_CACHE) > _REFERENCE_CACHE_SIZE:
                    _REFERENCE_CACHE.popitem(last=False)
            else:
                _REFERENCE_CACHE.move_to_end(key)
            self._parsed = cached
        return self._parsed


def reference_state(shared: tuple[Reference, EquivConfig]) -> ReferenceState:
    """Prepare one chunk's reference for every item that shares it (worker side)."""
    reference, config = shared
    return ReferenceState(reference, config)


def judge(state: ReferenceState, item: str | RawCompletion) -> Judgement:
    """Judge one item against the chunk's reference (worker side)."""
    extraction = None
    try:
        if isinstance(item, RawCompletion):
            text = mark_truncated(item.text, item.truncated)
            decision = decide(text, state.reference, state.config, item.mode)
            extraction = _pack(decision.extraction)
            if decision.verdict is not None:
                v = decision.verdict
                return v.status.value, v.detail, v.numeric_close, extraction
            item = decision.prediction
        verdict = compare_parsed(state.parsed(), parse_answer(item, state.config), state.config)
    except (MemoryError, RecursionError) as exc:
        # the answer is too big or too deeply nested to evaluate: the model's doing, not ours
        verdict = Verdict(Status.PARSE_ERROR, f"{type(exc).__name__}: answer too large to evaluate")
    return verdict.status.value, verdict.detail, verdict.numeric_close, extraction


def _pack(ext: Extraction | None) -> tuple[str, int, int, str, tuple[tuple[int, int], ...], bool] | None:
    """An extraction as plain values for the trip back to the caller."""
    if ext is None:
        return None
    return ext.answer, ext.start, ext.end, ext.method.value, ext.parts, ext.plain


def unpack(packed: Any) -> Extraction | None:
    """The extraction `judge` sent back for a raw item."""
    if packed is None:
        return None
    answer, start, end, method, parts, plain = packed
    return Extraction(answer, start, end, ExtractionMethod(method), tuple(tuple(p) for p in parts), plain)


def preload() -> None:
    """Import the heavy modules the workers need and warm their caches, so forked workers start warm."""
    preload_imports()
    # Judge a few typical pairs once: the LaTeX parser (ANTLR) and sympy build their caches on
    # first use, which costs a cold worker tenths of a second per new kind of expression (whole
    # seconds on a loaded machine). Done here, in the parent before it forks, every worker (and
    # every replacement after a time-out) starts warm, and no item's time limit pays for it. A
    # one-worker run pays ~1 s CPU for it (benchmarks/math_verify_traces_bench.py); skipping it
    # there made a replacement worker's first item time out under load.
    cfg = EquivConfig()
    for gold, pred in _WARM_UP_PAIRS:
        try:
            compare_parsed(parse_answer(gold, cfg), parse_answer(pred, cfg), cfg)
        except Exception:
            pass


def preload_imports() -> None:
    """Import the heavy modules the workers need."""
    import math_verify.grader
    import math_verify.parser
    import sympy  # noqa: F401

    # we run math-verify without its signal timeouts on purpose (the worker pool enforces the
    # limit); silence its one-time warning about that
    math_verify.grader.TIMEOUT_WARNING_SHOWN = True
    math_verify.parser.TIMEOUT_WARNING_SHOWN = True


_WARM_UP_PAIRS = (
    ("x^2+2x+1", "(x+1)^2"),
    ("1", "\\sin^2x+\\cos^2x"),
    ("\\frac{\\sqrt{3}}{2}", "\\sqrt{3}/2"),
    ("(1,2]\\cup[3,\\infty)", "(1,2]"),
    ("\\{1,2\\}", "1,2"),
    ("x\\le5", "5\\ge x"),
    ("\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}"),
    ("y=2x+1", "2x+1"),
    ("e^{i\\pi}+\\ln2", "\\log_{2}8"),
)

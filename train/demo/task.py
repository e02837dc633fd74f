"""The built-in step-wise arithmetic task: seeded problems, reference step solutions, noisy demos.

A problem is a chain of operations applied left to right, written with the fewest
parentheses that make standard precedence agree with that order:

    prompt:   "Compute: (7+8)*5-3\\n"
    solution: "Step 1: 7+8=15\\nStep 2: 15*5=75\\nStep 3: 75-3=72\\nAnswer: 72"

Every step line holds one exact claim ``a op b = c`` that the rule PRM of `veristep.prm`
checks, and the final ``Answer:`` line is what the math verifier compares with the reference.
Sequences stay short (well under 120 characters) because the policy is a character-level model.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import asdict, dataclass, fields
from typing import Any

# The text format lives below the trainer and the PRM (the oracle scorer reads it too); its
# names stay importable from here, where they were first defined.
from veristep.common.arith_format import (
    ANSWER_PREFIX,
    OPS,
    PROMPT_PREFIX,
    STEP_SEPARATOR,
    StepCheck,
    apply_op,
    check_completion,
    format_step,
    parse_prompt,
    render_expression,
)

__all__ = [
    "ANSWER_PREFIX", "DEMO_SHARE", "LEVELS", "MIXED", "MIXED_LEVELS", "OPS", "PARTS",
    "PROMPT_PREFIX", "STEP_SEPARATOR", "NoisyDemo", "ProblemSpec", "StepCheck", "apply_op",
    "check_completion", "difficulty_from_kwargs", "format_step", "make_noisy_demonstrations",
    "make_problem", "make_problems", "make_splits", "parse_prompt", "problem_part",
    "render_expression",
]


@dataclass(frozen=True)
class ProblemSpec:
    """What problems a level draws: how many operations and how large their operands are.

    (Named apart from `veristep.gating.Difficulty`, a prompt's easy / frontier / hard band.)
    """

    min_steps: int = 2
    max_steps: int = 4
    #: start value and +/- operands are drawn from [1, max_operand]
    max_operand: int = 20
    #: multiplication operands are drawn from [2, max_factor]
    max_factor: int = 9
    ops: str = OPS

    def __post_init__(self) -> None:
        if not 1 <= self.min_steps <= self.max_steps:
            raise ValueError(
                f"need 1 <= min_steps <= max_steps, got min_steps={self.min_steps}, "
                f"max_steps={self.max_steps}"
            )
        if self.max_operand < 1:
            raise ValueError(f"max_operand must be >= 1, got {self.max_operand}")
        if self.max_factor < 2:
            raise ValueError(f"max_factor must be >= 2, got {self.max_factor}")
        if not self.ops or set(self.ops) - set(OPS):
            raise ValueError(f"ops must be a non-empty subset of {OPS!r}, got {self.ops!r}")


#: Named presets, from "often solved" to "rarely solved" by the warm-started model. A problem
#: set drawn with no difficulty keywords mixes them evenly (each problem names its level).
LEVELS: dict[str, ProblemSpec] = {
    "easy": ProblemSpec(min_steps=2, max_steps=2, max_operand=9, max_factor=3),
    "medium": ProblemSpec(min_steps=3, max_steps=3, max_operand=9, max_factor=5),
    "hard": ProblemSpec(min_steps=4, max_steps=4, max_operand=20, max_factor=9),
    # The step-credit condition (docs/experiment.md): long +/- chains whose every step is a
    # one-digit-operand sum, so each step is learnable on its own and the outcome is rarely right.
    "chain8": ProblemSpec(min_steps=8, max_steps=8, max_operand=9, ops="+-"),
}
#: The levels that `level="mixed"` (no difficulty keywords) draws evenly.
MIXED_LEVELS: tuple[str, ...] = ("easy", "medium", "hard")
MIXED = "mixed"


def difficulty_from_kwargs(**difficulty: Any) -> ProblemSpec | None:
    """Build a `ProblemSpec` from keywords: a `level` preset name, `steps` (int or (lo, hi)), or fields.

    Returns None for the even mix of the preset levels (no keywords, or ``level="mixed"``).
    """
    level = difficulty.pop("level", None)
    if level == MIXED or (level is None and not difficulty):
        if difficulty:
            raise ValueError(f"level={MIXED!r} takes no other difficulty options, got {sorted(difficulty)}")
        return None
    if level is not None:
        if level not in LEVELS:
            raise ValueError(f"unknown level {level!r}; choose one of {', '.join([*LEVELS, MIXED])}")
        difficulty = {**asdict(LEVELS[level]), **difficulty}
    steps = difficulty.pop("steps", None)
    if steps is not None:
        lo, hi = (steps, steps) if isinstance(steps, int) else tuple(steps)
        difficulty["min_steps"], difficulty["max_steps"] = lo, hi
    known = {f.name for f in fields(ProblemSpec)}
    unknown = set(difficulty) - known
    if unknown:
        raise ValueError(
            f"unknown difficulty option(s) {sorted(unknown)}; use level, steps or {sorted(known)}"
        )
    return ProblemSpec(**difficulty)


def _draw_chain(rng: random.Random, d: ProblemSpec) -> tuple[int, list[tuple[str, int]]]:
    """Draw a start value and a list of (op, operand) with every intermediate value >= 0."""
    n_steps = rng.randint(d.min_steps, d.max_steps)
    start = value = rng.randint(1, d.max_operand)
    chain: list[tuple[str, int]] = []
    for _ in range(n_steps):
        op = rng.choice(d.ops)
        if op == "-" and value < 1:
            op = "+"  # keep values non-negative so answers never carry a sign
        if op == "*":
            operand = rng.randint(2, d.max_factor)
        elif op == "-":
            operand = rng.randint(1, min(value, d.max_operand))
        else:
            operand = rng.randint(1, d.max_operand)
        chain.append((op, operand))
        value = apply_op(value, op, operand)
    return start, chain


def _solution_lines(
    start: int, chain: list[tuple[str, int]], wrong_steps: frozenset[int] = frozenset(),
    rng: random.Random | None = None,
) -> tuple[list[str], int]:
    """Step lines of the chain and the value they end with; steps in `wrong_steps` miscompute."""
    lines, value = [], start
    for k, (op, operand) in enumerate(chain):
        result = apply_op(value, op, operand)
        if k in wrong_steps:
            assert rng is not None
            result = _wrong_value(rng, result)
        lines.append(format_step(k + 1, value, op, operand, result))
        value = result  # later steps build on the (possibly wrong) value, as a real slip would
    return lines, value


def _wrong_value(rng: random.Random, value: int) -> int:
    """A plausible wrong result near `value`, never equal to it and never negative."""
    delta = rng.choice([d for d in range(-10, 11) if d != 0])
    wrong = value + delta
    return wrong if wrong >= 0 else value + abs(delta)


def make_problem(rng: random.Random, difficulty: ProblemSpec | None) -> dict[str, Any]:
    """Draw one problem with its reference answer and step-wise reference solution.

    `difficulty` None draws the level of the problem evenly from the presets.
    """
    if difficulty is None:
        level = rng.choice(MIXED_LEVELS)
        difficulty = LEVELS[level]
    else:
        level = next((name for name, d in LEVELS.items() if d == difficulty), "custom")
    start, chain = _draw_chain(rng, difficulty)
    lines, final = _solution_lines(start, chain)
    return {
        "prompt": f"{PROMPT_PREFIX}{render_expression(start, chain)}{STEP_SEPARATOR}",
        "answer": str(final),
        "solution": STEP_SEPARATOR.join([*lines, f"{ANSWER_PREFIX}{final}"]),
        "num_steps": len(chain),
        "level": level,
    }


#: The two parts of the problem space: warm-start demonstrations are drawn from "demo", the RL
#: training and held-out prompts of `builtin:arith` from "rl", so no prompt the warm start was
#: taught appears in training or evaluation, whatever the seeds and sizes.
PARTS = ("demo", "rl")
#: Share of prompts in the "demo" part (by a stable hash of the prompt text).
DEMO_SHARE = 0.25


def problem_part(prompt: str) -> str:
    """The part ("demo" or "rl") a prompt belongs to: a fixed function of its text."""
    digest = hashlib.sha256(f"veristep-arith-part:{prompt}".encode()).digest()
    return "demo" if int.from_bytes(digest[:4], "big") < DEMO_SHARE * 2**32 else "rl"


def make_problems(n: int, seed: int, part: str | None = None, **difficulty: Any) -> list[dict[str, Any]]:
    """Generate `n` problems deterministically from `seed` (keys prompt, answer, solution, num_steps, level).

    Difficulty keywords: ``level`` ("easy", "medium", "hard", "chain8", or "mixed": the default,
    an even mix of easy, medium and hard), ``steps`` (an int or a (min, max) pair), or any `ProblemSpec`
    field (min_steps, max_steps, max_operand, max_factor, ops). `part` ("demo" / "rl") keeps
    only prompts of that part of the problem space (None: all).
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if part is not None and part not in PARTS:
        raise ValueError(f"part must be one of {PARTS} or None, got {part!r}")
    d = difficulty_from_kwargs(**difficulty)
    rng = random.Random(f"veristep-arith:{seed}")
    if part is None:
        return [make_problem(rng, d) for _ in range(n)]
    out: list[dict[str, Any]] = []
    for _ in range(40 * n + 100):  # bounded: a part can be tiny for a tiny difficulty
        if len(out) == n:
            return out
        problem = make_problem(rng, d)
        if problem_part(problem["prompt"]) == part:
            out.append(problem)
    if len(out) < n:
        raise ValueError(f"difficulty {d} has too few problems in part {part!r} for {n} draws")
    return out


def make_splits(
    n_train: int, n_eval: int, seed: int, **difficulty: Any
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Generate a training set and a held-out set with no prompt in common."""
    d = difficulty_from_kwargs(**difficulty)
    rng = random.Random(f"veristep-arith-splits:{seed}")
    seen: set[str] = set()
    out: list[list[dict[str, Any]]] = [[], []]
    # A bounded number of draws: tiny difficulty spaces cannot loop forever.
    for _ in range(20 * (n_train + n_eval) + 100):
        if len(out[1]) == n_eval and len(out[0]) == n_train:
            break
        problem = make_problem(rng, d)
        if problem["prompt"] in seen:
            continue
        seen.add(problem["prompt"])
        target = 1 if len(out[1]) < n_eval else 0
        out[target].append(problem)
    if len(out[0]) < n_train or len(out[1]) < n_eval:
        raise ValueError(
            f"difficulty {d} has too few distinct problems for {n_train} + {n_eval}; "
            "raise max_operand or the number of steps"
        )
    return out[0], out[1]


@dataclass(frozen=True)
class NoisyDemo:
    """A demonstration for the warm start: a completion with known, injected mistakes."""

    prompt: str
    completion: str
    answer: str
    #: indices (0-based) of the steps whose claim was made wrong
    wrong_steps: tuple[int, ...]
    #: whether the answer line mis-copies the last step's value
    wrong_answer: bool
    #: whether the final answer equals the reference (two slips can in rare cases cancel)
    correct: bool


def make_noisy_demonstrations(
    problems: list[dict[str, Any]],
    seed: int,
    step_error_rate: float = 0.1,
    answer_error_rate: float = 0.05,
) -> list[NoisyDemo]:
    """Write one demonstration per problem; each step is miscomputed with `step_error_rate`.

    A wrong step propagates (later steps compute correctly from the wrong value), so the
    final answer is wrong too; independently, with `answer_error_rate` the final answer line
    mis-copies the last step's value although every step is right.
    """
    for name, rate in (("step_error_rate", step_error_rate), ("answer_error_rate", answer_error_rate)):
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {rate}")
    rng = random.Random(f"veristep-arith-demos:{seed}")
    demos = []
    for problem in problems:
        start, chain = parse_prompt(problem["prompt"])
        wrong = frozenset(k for k in range(len(chain)) if rng.random() < step_error_rate)
        lines, value = _solution_lines(start, chain, wrong, rng)
        wrong_answer = not wrong and rng.random() < answer_error_rate
        shown = _wrong_value(rng, value) if wrong_answer else value
        completion = STEP_SEPARATOR.join([*lines, f"{ANSWER_PREFIX}{shown}"])
        demos.append(
            NoisyDemo(
                prompt=problem["prompt"],
                completion=completion,
                answer=problem["answer"],
                wrong_steps=tuple(sorted(wrong)),
                wrong_answer=wrong_answer,
                correct=str(shown) == problem["answer"],
            )
        )
    return demos


def __getattr__(name: str) -> Any:
    """Deprecated names: `Difficulty` is `ProblemSpec` (removed in the next release)."""
    if name == "Difficulty":
        import warnings

        warnings.warn("veristep.train.demo.task.Difficulty is deprecated and removed in the next "
                      "release; use ProblemSpec", DeprecationWarning, stacklevel=2)
        return ProblemSpec
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""The text format of the built-in arithmetic task: prompts, step lines, the answer line.

    prompt:   "Compute: (7+8)*5-3\\n"
    solution: "Step 1: 7+8=15\\nStep 2: 15*5=75\\nStep 3: 75-3=72\\nAnswer: 72"

The demo task (`veristep.train.demo.task`) writes problems in it and the oracle step scorer
(`veristep.prm.oracle`) reads traces in it; it lives below both so that neither imports the
other (docs/architecture.md, "Layers").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Separator between the steps of a solution; configure the PRM splitter with it.
STEP_SEPARATOR: str = "\n"
ANSWER_PREFIX: str = "Answer: "
PROMPT_PREFIX: str = "Compute: "
OPS: str = "+-*"

#: One step line: (step number, a, op, b, claimed result).
STEP_RE = re.compile(r"^Step (\d+): (-?\d+)([+\-*])(\d+)=(-?\d+)$")
#: The final answer line: (answer).
ANSWER_RE = re.compile(r"^Answer: (-?\d+)$")
#: Longer numbers are never right in this task; refusing them keeps int() and * cheap and safe.
MAX_DIGITS = 30


def has_overlong_number(line: str) -> bool:
    """Whether `line` holds a run of more than MAX_DIGITS digits (never right, never parsed)."""
    return len(max(re.findall(r"\d+", line), key=len, default="")) > MAX_DIGITS


def apply_op(a: int, op: str, b: int) -> int:
    """Apply one of the task's integer operations."""
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    raise ValueError(f"unknown operation {op!r}")


def render_expression(start: int, chain: list[tuple[str, int]]) -> str:
    """Write the chain with the fewest parentheses under standard precedence."""
    expr, top_op = str(start), None
    for op, operand in chain:
        if op == "*" and top_op in ("+", "-"):
            expr = f"({expr})"
        expr, top_op = f"{expr}{op}{operand}", op
    return expr


def format_step(index: int, a: int, op: str, b: int, result: int) -> str:
    """Write one solution step, e.g. ``Step 2: 15*5=75``."""
    return f"Step {index}: {a}{op}{b}={result}"


def parse_prompt(prompt: str) -> tuple[int, list[tuple[str, int]]]:
    """Recover (start, chain) from a task prompt; raises ValueError if it is not one."""
    expr = prompt.removeprefix(PROMPT_PREFIX).strip().replace("(", "").replace(")", "")
    tokens = re.findall(r"\d+|[+\-*]", expr)
    if not tokens or "".join(tokens) != expr or len(tokens) % 2 == 0:
        raise ValueError(f"not a task prompt: {prompt!r}")
    start = int(tokens[0])
    chain = [(tokens[i], int(tokens[i + 1])) for i in range(1, len(tokens), 2)]
    return start, chain


@dataclass(frozen=True)
class StepCheck:
    """Exact check of a completion in the task's format (independent of the PRM)."""

    #: per step line: True if its claim ``a op b = c`` is arithmetically right
    steps_correct: list[bool]
    #: the integer after ``Answer:`` if the completion has such a line
    answer: int | None
    #: whether the answer equals the reference
    correct: bool


def check_completion(completion: str, reference: str) -> StepCheck:
    """Check every step claim and the final answer of a completion exactly; never raises."""
    steps_correct: list[bool] = []
    answer: int | None = None
    for line in completion.split(STEP_SEPARATOR):
        line = line.strip()
        if has_overlong_number(line):
            steps_correct.append(False)
            continue
        step = STEP_RE.match(line)
        if step:
            a, op, b, c = int(step[2]), step[3], int(step[4]), int(step[5])
            steps_correct.append(apply_op(a, op, b) == c)
            continue
        final = ANSWER_RE.match(line)
        if final:
            answer = int(final[1])
            break
        if line:
            steps_correct.append(False)  # a line that is neither a step nor the answer
    try:
        correct = answer is not None and answer == int(reference)
    except ValueError:
        correct = False
    return StepCheck(steps_correct, answer, correct)

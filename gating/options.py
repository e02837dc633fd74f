"""Option enums of the gating estimators and the parser that turns strings into them."""

from __future__ import annotations

from enum import Enum
from typing import TypeVar


class Std(str, Enum):
    """Which standard deviation divides a group: ddof=1 (`sample`) or ddof=0 (`population`)."""

    SAMPLE = "sample"
    POPULATION = "population"

    @property
    def ddof(self) -> int:
        """Delta degrees of freedom of this convention."""
        return 1 if self is Std.SAMPLE else 0


class OutcomeMethod(str, Enum):
    """Outcome-only advantage estimators of `outcome_advantages`."""

    GRPO = "grpo"
    DR_GRPO = "dr_grpo"
    SIGN = "sign"
    WAPO = "wapo"
    AVSPO = "avspo"


class Gate(str, Enum):
    """Which collapsed groups VeriGate sends to the PRM branch."""

    ALL_WRONG = "all_wrong"
    ANY_COLLAPSED = "any_collapsed"


class Credit(str, Enum):
    """How VeriGate's PRM branch turns a gated group's step scores into step advantages."""

    SUFFIX = "suffix"  # VeriGate as specified: suffix sums, normalised over the group
    MIN = "min"  # PURE's min form: the minimum score from a step onward, normalised
    PROGRESS = "progress"  # the drop of the running minimum across a step, not re-centred
    DELTA = "delta"  # the change of a value estimate (Monte-Carlo) across a step, not re-centred
    PREFIX = "prefix"  # the verified prefix rewarded, the first error charged, normalised


class Agg(str, Enum):
    """How `prm_as_outcome_rewards` folds step scores into one reward."""

    MIN = "min"
    PROD = "prod"
    MEAN = "mean"
    LAST = "last"


class VirtualValue(str, Enum):
    """Where AVSPO's virtual reward comes from."""

    OPPOSITE = "opposite"  # the released rule: the other label
    FIXED = "fixed"
    RANDOM = "random"


E = TypeVar("E", bound=Enum)


def parse_option(enum_cls: type[E], value: str | E, name: str) -> E:
    """Turn a string option into its enum member, or raise a ValueError listing the choices."""
    try:
        return enum_cls(value)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in enum_cls)
        raise ValueError(f"{name}={value!r} is not one of {choices}") from None

"""The option parser of scorer specs, shared by the oracle, the loader and the MC scorer."""

from __future__ import annotations

import pytest
from veristep.prm import oracle
from veristep.prm.loader import load_scorer
from veristep.prm.mc_values import parse_mc_spec
from veristep.prm.options import parse_options


def test_options_are_typed_and_blank_items_skipped():
    assert parse_options("", {"k": int}) == {}
    assert parse_options(" k = 8 , ,seed=1", {"k": int, "seed": int}) == {"k": 8, "seed": 1}
    assert parse_options("eps=0.25", {"eps": float, "seed": int}) == {"eps": 0.25}


@pytest.mark.parametrize("tail, match", [
    ("n=3", r"expected one of k=\.\.\., seed=\.\.\."),
    ("k", "expected one of"),
    ("k=two", "k='two': not a int"),
])
def test_bad_options_are_one_clear_error(tail, match):
    with pytest.raises(ValueError, match=match):
        parse_options(tail, {"k": int, "seed": int})


def test_every_user_reads_options_the_same_way():
    assert oracle.parse_options is parse_options  # the old import path keeps working
    assert parse_mc_spec("mc:k=8,seed=2") == {"k": 8, "seed": 2}
    scorer = load_scorer("oracle:eps=0.5,seed=3")
    assert (scorer.eps, scorer.seed) == (0.5, 3)
    with pytest.raises(ValueError, match="scorer option"):
        load_scorer("oracle:k=1")

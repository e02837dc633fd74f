"""WeightedVerifier: a weighted sum of verifiers that is a verifier of its own."""

from __future__ import annotations

import pytest
from veristep.verifiers import Status, Verifier, VerifyResult, get_verifier
from veristep.verifiers.core.combine import WeightedVerifier, combine


class LengthVerifier:
    """Rewards completions no longer than a limit (reference: the limit, default 20)."""

    kind = "length"

    def __init__(self, workers: int | None = None) -> None:
        self.closed = False

    def reference_from_record(self, record):
        return record.get("max_len")

    def verify(self, completion, reference):
        ok = len(completion) <= (reference or 20)
        status = Status.CORRECT if ok else Status.FORMAT_ERROR
        return VerifyResult(float(ok), ok, status, detail="" if ok else "too long")

    def verify_batch(self, completions, references):
        return [self.verify(c, r) for c, r in zip(completions, references, strict=True)]

    def close(self):
        self.closed = True


def test_weighted_reward_correctness_and_components(exact_cls):
    v = combine((exact_cls(), 1.0), (LengthVerifier(), 0.1))
    assert isinstance(v, Verifier) and v.kind == "weighted"
    right_short = v.verify("Answer: 4", "4")
    assert right_short.reward == pytest.approx(1.1) and right_short.correct
    assert right_short.status == Status.CORRECT and right_short.extracted == "4"
    assert right_short.extra["components"]["length"] == {
        "reward": 1.0,
        "status": "correct",
        "weight": 0.1,
    }
    right_long = v.verify("x" * 30 + " Answer: 4", "4")
    assert right_long.reward == pytest.approx(1.0) and right_long.correct
    assert "length: too long" in right_long.detail
    wrong_short = v.verify("Answer: 5", "4")
    assert wrong_short.reward == pytest.approx(0.1) and not wrong_short.correct
    assert wrong_short.status == Status.WRONG


def test_reference_mapping_per_component_or_primary_only(exact_cls):
    v = WeightedVerifier([(exact_cls(), 1.0), (LengthVerifier(), 1.0)])
    # Per-component mapping: the length limit applies.
    assert v.verify("Answer: 4", {"exact": "4", "length": 5}).reward == 1.0
    # A single value goes to the primary component only; length falls back to its default.
    assert v.verify("Answer: 4", "4").reward == 2.0
    assert v.reference_from_record({"answer": "4", "max_len": 3}) == {"exact": "4", "length": 3}


def test_unjudged_component_makes_the_item_unjudged(exact_cls):
    v = combine((LengthVerifier(), 0.1), (exact_cls(), 1.0))
    result = v.verify("Answer: 4", {"length": 50, "exact": None})
    assert result.status == Status.INTERNAL_ERROR and not result.correct


def test_batch_matches_single_items(exact_cls):
    v = combine((exact_cls(), 1.0), (LengthVerifier(), 0.5))
    completions = ["Answer: 1", "Answer: 2", "nothing", "y" * 40 + "Answer: 1"]
    refs = ["1", "1", "1", "1"]
    batch = v.verify_batch(completions, refs)
    assert [r.reward for r in batch] == [
        v.verify(c, r).reward for c, r in zip(completions, refs, strict=True)
    ]
    with pytest.raises(ValueError):
        v.verify_batch(["a"], [])


def test_registry_builds_weighted_from_kinds(exact_kind):
    v = get_verifier(
        "weighted", components={exact_kind: 1.0}, configs={exact_kind: {"rel_close": 0.5}}
    )
    assert v.components[0].verifier.rel_close == 0.5
    two = combine((v.components[0].verifier, 1.0), (get_verifier(exact_kind), 0.5))
    assert [c.name for c in two.components] == ["exact", "exact_2"]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"components": {}},
        {"components": {"exact": float("nan")}},
        {"components": {"exact": True}},
        {"components": {"exact": 1.0}, "configs": {"math": {}}},
        {"components": [("exact", 1.0), ("exact", 2.0)]},
        {"components": [("exact",)]},
        {"components": {"nope": 1.0}},
        {"components": [(object(), 1.0)]},
    ],
)
def test_bad_configuration_raises_value_error(kwargs):
    with pytest.raises(ValueError):
        WeightedVerifier(**kwargs)


def test_close_reaches_components(exact_cls):
    length = LengthVerifier()
    with combine((exact_cls(), 1.0), (length, 0.1)):
        pass
    assert length.closed


def test_math_plus_format():
    with combine(math=1.0, format=0.1, workers=1) as v:
        good = v.verify("<think>1+1=2</think> <answer>$\\boxed{2}$</answer>", "2")
        bad = v.verify("it is $\\boxed{3}$", "2")
    assert good.correct and good.reward > bad.reward
    assert not bad.correct and bad.status != Status.CORRECT

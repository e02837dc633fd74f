"""What a server changes about where work runs (never a verdict): math extracts in its workers."""

from __future__ import annotations

import pytest
from veristep.verifiers import get_verifier
from veristep.verifiers.core.text import mark_truncated

from veristep.serve.service import SERVE_DEFAULTS, ServeConfig, Service, verifier_options

ROWS = [
    ("so the answer is \\boxed{42}", {"answer": "42"}),
    ("\\boxed{\\frac{1}{2}}", {"answer": "0.5"}),
    ("The answer is $x^2+2x+1$.", {"answer": "(x+1)^2"}),
    ("\\boxed{7}", {"answer": "8"}),
    ("nothing here", {"answer": "3"}),
    ("We get 72. So the final answer is 7", {"answer": "72"}),
    ("\\boxed{5}", {"answer": None}),
]


def test_math_is_served_with_extraction_in_its_workers_unless_the_operator_says():
    assert verifier_options("math", {})["inline_chars"] == 0
    assert verifier_options("math", {"math": {"inline_chars": 100, "workers": 2}}) == {
        "inline_chars": 100, "workers": 2}
    assert verifier_options("tools", {"tools": {"workers": 1}}) == {"workers": 1}
    assert "math" in SERVE_DEFAULTS
    # a server builds math so, and the default stays out of its configuration (and hash): where
    # the work runs does not decide the rewards
    config = ServeConfig(kinds=["math"], configs={"math": {"workers": 1}})
    before = config.config_hash()
    service = Service(config)
    try:
        assert service.verifiers["math"].inline_chars == 0
        assert config.configs == {"math": {"workers": 1}} and service.config_hash == before
    finally:
        service.close()


def test_extraction_in_the_workers_gives_the_in_process_verdicts():
    inline = get_verifier("math", workers=1)
    pooled = get_verifier("math", workers=1, inline_chars=0)
    try:
        completions = [c for c, _ in ROWS] + [mark_truncated(c, True) for c, _ in ROWS]
        refs = []
        for _, record in ROWS * 2:
            try:
                refs.append(inline.reference_from_record(record))
            except (KeyError, ValueError):
                refs.append(None)
        a, b = inline.verify_batch(completions, refs), pooled.verify_batch(completions, refs)
        key = lambda r: (r.reward, r.correct, r.status, r.detail, r.extracted, r.extra)  # noqa: E731
        assert [key(r) for r in a] == [key(r) for r in b]
        assert [r.status.value for r in a[:5]] == ["correct", "correct", "correct", "wrong", "no_answer"]
    finally:
        inline.close()
        pooled.close()


@pytest.mark.parametrize("bad", [-1, 1.5, True, "0"])
def test_inline_chars_must_be_a_count(bad):
    with pytest.raises(ValueError, match="inline_chars must be an integer >= 0"):
        get_verifier("math", inline_chars=bad)

"""FormatVerifier: <think>...</think> then answer; configurable tags, well-formedness, exactly once."""

from __future__ import annotations

import json
import time

import pytest
from veristep.verifiers import Status, Verifier, get_verifier
from veristep.verifiers.format import FormatIssue, FormatSpec, FormatVerifier, check_format

GOOD = "<think>\n2 + 2 = 4\n</think>\n<answer>4</answer>"


def issue(text, **spec):
    return check_format(text, FormatSpec(**spec)).issue


def test_well_formed_completion():
    check = check_format(GOOD)
    assert check.ok and check.think == "\n2 + 2 = 4\n" and check.answer == "4"
    result = FormatVerifier(workers=0).verify(GOOD)
    assert result.status is Status.CORRECT and result.reward == 1.0 and result.extracted == "4"


@pytest.mark.parametrize(
    "text,expected",
    [
        ("<answer>4</answer>", FormatIssue.MISSING_THINK),
        ("Sure! <think>x</think><answer>4</answer>", FormatIssue.TEXT_BEFORE_THINK),
        ("<think>x<answer>4</answer>", FormatIssue.UNCLOSED_THINK),
        ("<think>x</think><think>y</think><answer>4</answer>", FormatIssue.REPEATED_THINK),
        ("<think>x</think></think><answer>4</answer>", FormatIssue.REPEATED_THINK),
        ("<think>  \n </think><answer>4</answer>", FormatIssue.EMPTY_THINK),
        ("</think>x<think><answer>4</answer>", FormatIssue.WRONG_ORDER),
        ("<think>x <answer>3</answer></think><answer>4</answer>", FormatIssue.WRONG_ORDER),
        ("<think>x</think>4", FormatIssue.MISSING_ANSWER),
        ("<think>x</think><answer>4", FormatIssue.UNCLOSED_ANSWER),
        ("<think>x</think><answer>4</answer><answer>5</answer>", FormatIssue.REPEATED_ANSWER),
        ("<think>x</think><answer> </answer>", FormatIssue.EMPTY_ANSWER),
        ("<think>x</think></answer>4<answer>", FormatIssue.WRONG_ORDER),
        ("<think>x</think>so: <answer>4</answer>", FormatIssue.TEXT_OUTSIDE_ANSWER),
        ("<think>x</think><answer>4</answer> done", FormatIssue.TEXT_OUTSIDE_ANSWER),
        ("<Think>x</Think><answer>4</answer>", FormatIssue.MALFORMED_TAG),
        ("<think>x</ think><answer>4</answer>", FormatIssue.MALFORMED_TAG),
        ('<think reason="1">x</think><answer>4</answer>', FormatIssue.MALFORMED_TAG),
        ("<think>x</think><ANSWER>4</ANSWER>", FormatIssue.MALFORMED_TAG),
        ("", FormatIssue.MISSING_THINK),
    ],
)
def test_each_rule(text, expected):
    assert issue(text) is expected
    result = FormatVerifier(workers=0).verify(text)
    assert result.status is Status.FORMAT_ERROR and result.reward == 0.0 and not result.correct
    assert result.extra["format_issue"] == expected.value and result.detail


def test_tags_that_merely_start_alike_are_ignored():
    assert issue("<think>use <thinking> and <answers></think><answer>4</answer>") is None


def test_configurable_tags():
    text = "<reasoning>x</reasoning><final>4</final>"
    assert issue(text, think_tag="reasoning", answer_tag="final") is None
    assert issue(text) is FormatIssue.MISSING_THINK


def test_free_text_answer_when_answer_tag_is_none():
    assert issue("<think>x</think>\nThe answer is 4.", answer_tag=None) is None
    assert issue("<think>x</think>\n  ", answer_tag=None) is FormatIssue.MISSING_ANSWER
    assert issue("<think>x</think>4<think>y</think>", answer_tag=None) is FormatIssue.REPEATED_THINK


def test_think_opened_by_the_chat_template():
    assert issue("2 + 2 = 4\n</think>\n<answer>4</answer>", think_open_in_prompt=True) is None
    assert issue(GOOD, think_open_in_prompt=True) is FormatIssue.REPEATED_THINK
    assert issue("<answer>4</answer>", think_open_in_prompt=True) is FormatIssue.UNCLOSED_THINK


def test_optional_think_and_relaxed_rules():
    assert issue("<answer>4</answer>", require_think=False) is None
    assert issue("<think>x<answer>4</answer>", require_think=False) is FormatIssue.UNCLOSED_THINK
    assert issue("<think></think><answer>4</answer>", allow_empty_think=True) is None
    assert issue("<think>x</think>so <answer>4</answer>!", allow_text_outside_answer=True) is None


def test_per_item_format_spec_overrides():
    v = FormatVerifier(workers=0)
    assert v.reference_from_record({"completion": GOOD}) is None
    spec = v.reference_from_record({"format_spec": {"answer_tag": None}})
    assert v.verify("<think>x</think>4", spec).status is Status.CORRECT
    with pytest.raises(ValueError, match="unknown format_spec"):
        v.verify(GOOD, {"tag": "x"})


@pytest.mark.parametrize("spec", [{"think_tag": 5}, "strict", {"colour": 1}])
def test_a_rows_malformed_format_spec_is_its_own_bad_reference(spec):
    # It raised out of verify_batch, and a TRL batch lost every row's reward.
    v = FormatVerifier(workers=1)
    try:
        results = v.verify_batch([GOOD, GOOD, GOOD], [None, spec, None])
        assert [r.status for r in results] == [Status.CORRECT, Status.BAD_REFERENCE, Status.CORRECT]
        assert results[1].judged is False and results[1].detail
    finally:
        v.close()
    with pytest.raises(ValueError):
        v.reference_from_record({"format_spec": spec})


@pytest.mark.parametrize(
    "config",
    [{"think_tag": ""}, {"think_tag": "a b"}, {"answer_tag": "think"}, {"answer_tag": "<x>"}],
)
def test_bad_configuration(config):
    with pytest.raises(ValueError):
        FormatVerifier(workers=0, **config)


def test_never_raises_and_huge_inputs_finish():
    v = FormatVerifier(workers=0)
    assert v.verify(None).status is Status.FORMAT_ERROR  # type: ignore[arg-type]
    for text in [
        "<" * 1_000_000,
        "<think" * 150_000,
        "<think>" + "x" * 1_000_000 + "</think><answer>4</answer>",
    ]:
        start = time.monotonic()
        result = v.verify(text)
        assert time.monotonic() - start < 30  # a hang bound, not a benchmark
        assert result.status in (Status.FORMAT_ERROR, Status.CORRECT)


def test_registry_and_batch():
    v = get_verifier("format", workers=2)
    assert isinstance(v, Verifier) and v.kind == "format"
    try:
        results = v.verify_batch(
            [GOOD, "<answer>4</answer>", GOOD], [None, None, {"require_think": False}]
        )
        only = v.verify_batch(["<think>x</think><answer>1</answer>"])
    finally:
        v.close()
    assert [r.status for r in results] == [Status.CORRECT, Status.FORMAT_ERROR, Status.CORRECT]
    assert only[0].status is Status.CORRECT


def test_sample_file_statuses(test_data_dir):
    v = FormatVerifier(workers=0)
    for line in (test_data_dir / "format_sample.jsonl").read_text().splitlines():
        record = json.loads(line)
        result = v.verify(record["completion"], v.reference_from_record(record))
        assert result.status.value == record["expected_status"], record["id"]
        assert result.extra.get("format_issue") == record.get("expected_issue"), record["id"]


@pytest.mark.parametrize("invisible", [
    "\u200b", "\u2060", "\x00", "\u00ad", "\ufeff", " \u200b\n",
    # letters and symbols to Unicode that show nothing: Hangul fillers, braille blank, combining
    # grapheme joiner, Khmer inherent vowel, variation selector, a lone combining accent
    "\u3164", "\u115f", "\uffa0", "\u2800", "\u034f", "\u17b4", "\ufe0f", "\U000e0100", "\u0301",
])
def test_invisible_characters_are_no_content(invisible):
    # Each passed the emptiness checks (str.strip keeps them) and scored 1.0.
    v = FormatVerifier(workers=0)
    assert v.verify(f"<think>{invisible}</think><answer>4</answer>").status is Status.FORMAT_ERROR
    assert v.verify(f"<think>x</think><answer>{invisible}</answer>").status is Status.FORMAT_ERROR
    assert v.verify("<think>x\u200by</think><answer>4\u00ad</answer>").status is Status.CORRECT

"""One status per meaning: WRONG_ANSWER is a deprecated alias of WRONG."""

from veristep.verifiers.core.result import Status, VerifyResult


def test_wrong_answer_is_an_alias_of_wrong():
    assert Status.WRONG_ANSWER is Status.WRONG and Status.WRONG.value == "wrong"
    assert [s for s in Status if s.value == "wrong"] == [Status.WRONG]  # listed once


def test_records_written_with_the_old_value_still_read():
    assert Status("wrong_answer") is Status.WRONG
    assert Status("wrong") is Status.WRONG
    try:
        Status("wrongish")
    except ValueError:
        pass
    else:
        raise AssertionError("an unknown status must not read as a status")


def test_a_wrong_result_is_judged_and_unrewarded():
    result = VerifyResult(reward=0.0, correct=False, status=Status.WRONG_ANSWER)
    assert result.status is Status.WRONG and result.judged

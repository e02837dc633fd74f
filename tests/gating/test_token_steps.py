"""Token <-> step maps, including the spec's boundary conventions, with the char tokenizer."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from veristep.gating import broadcast_to_tokens, steps_to_tokens, token_step_from_offsets


def test_broadcast_to_tokens():
    adv = torch.tensor([[1.5, -0.5]])
    mask = torch.tensor([[[1, 1, 0], [1, 0, 0]]])
    assert broadcast_to_tokens(adv, mask).tolist() == [[[1.5, 1.5, 0.0], [-0.5, 0.0, 0.0]]]
    with pytest.raises(ValueError, match="first 2 sizes"):
        broadcast_to_tokens(adv, torch.ones(1, 3, 2))


def test_steps_to_tokens():
    values = torch.tensor([[[1.0, 2.0, 3.0]]])
    token_step = torch.tensor([[[0, 0, 2, 1, -1]]])
    assert steps_to_tokens(values, token_step).tolist() == [[[1.0, 1.0, 3.0, 2.0, 0.0]]]


def test_steps_to_tokens_without_any_step():
    # S = 0 (no group reached the PRM): index 0 is legal and reads 0, like padding.
    token_step = torch.tensor([[[0, 0, -1]]])
    assert steps_to_tokens(torch.zeros(1, 1, 0), token_step).tolist() == [[[0.0, 0.0, 0.0]]]
    with pytest.raises(ValueError, match="step index"):
        steps_to_tokens(torch.zeros(1, 1, 0), torch.tensor([[[1]]]))


def _offsets(tokenizer, text):
    enc = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
    return [start for start, _ in enc.offset_mapping]


def test_token_step_from_offsets_with_char_tokenizer(char_tokenizer):
    steps = ["Step 1: 2+2=4.", "Step 2: 4*3=12.", "So the answer is 12."]
    text = "  " + "\n\n".join(steps) + "<eos>"
    step_starts = [text.index(s) for s in steps]
    starts = _offsets(char_tokenizer, text)
    n_tok = len(starts)
    token_step = token_step_from_offsets(
        torch.tensor([[starts + [0, 0]]]),
        torch.tensor([[[True] * n_tok + [False, False]]]),
        torch.tensor([[step_starts + [0]]]),
        torch.tensor([[[True, True, True, False]]]),
    )[0, 0].tolist()
    expected = []
    for pos in starts:
        # Leading text -> first step; separators -> the preceding step; EOS text -> the last.
        expected.append(max([0] + [j for j, s in enumerate(step_starts) if s <= pos]))
    assert token_step == expected + [-1, -1]
    assert token_step[text.index("\n\n")] == 0  # the separator after step 0 stays in step 0
    assert token_step[-3] == 2  # trailing "<eos>" characters belong to the last step


def test_straddling_token_goes_to_earlier_step():
    # Tokens start at chars 0, 4, 8; step 1 starts at char 6, inside the token at 4..8.
    token_step = token_step_from_offsets(
        torch.tensor([[[0, 4, 8]]]), torch.ones(1, 1, 3, dtype=torch.bool),
        torch.tensor([[[0, 6]]]), torch.ones(1, 1, 2, dtype=torch.bool),
    )
    assert token_step.tolist() == [[[0, 0, 1]]]


def test_response_without_steps_maps_to_masked_step_zero():
    token_step = token_step_from_offsets(
        torch.tensor([[[0, 1]]]), torch.ones(1, 1, 2, dtype=torch.bool),
        torch.tensor([[[0, 0]]]), torch.zeros(1, 1, 2, dtype=torch.bool),
    )
    assert token_step.tolist() == [[[0, 0]]]


def test_unsorted_steps_rejected():
    with pytest.raises(ValueError, match="must increase"):
        token_step_from_offsets(
            torch.tensor([[[0, 1]]]), torch.ones(1, 1, 2, dtype=torch.bool),
            torch.tensor([[[5, 0]]]), torch.ones(1, 1, 2, dtype=torch.bool),
        )


@settings(max_examples=40, deadline=None)
@given(data=st.data(), n_resp=st.integers(1, 4))
def test_token_step_from_offsets_matches_brute_force(data, n_resp):
    """Each token goes to the last valid step starting at or before it (first step if none)."""
    rows = []
    for _ in range(n_resp):
        step_starts = sorted(data.draw(st.sets(st.integers(0, 60), max_size=5)))
        token_starts = sorted(data.draw(st.lists(st.integers(0, 70), max_size=8)))
        rows.append((step_starts, token_starts))
    s = max(len(r[0]) for r in rows) + 1
    t = max(len(r[1]) for r in rows) + 1
    steps = torch.zeros(1, n_resp, s, dtype=torch.long)
    smask = torch.zeros(1, n_resp, s, dtype=torch.bool)
    toks = torch.zeros(1, n_resp, t, dtype=torch.long)
    tmask = torch.zeros(1, n_resp, t, dtype=torch.bool)
    for i, (st_, tk) in enumerate(rows):
        steps[0, i, : len(st_)] = torch.tensor(st_, dtype=torch.long)
        smask[0, i, : len(st_)] = True
        toks[0, i, : len(tk)] = torch.tensor(tk, dtype=torch.long)
        tmask[0, i, : len(tk)] = True
    out = token_step_from_offsets(toks, tmask, steps, smask)[0].tolist()
    for i, (st_, tk) in enumerate(rows):
        expected = [max([0] + [j for j, start in enumerate(st_) if start <= pos]) for pos in tk]
        assert out[i] == expected + [-1] * (t - len(tk))


def test_zero_width_eos_takes_the_last_step_not_step_zero():
    # "ab\n\ncd" + EOS: the EOS offset is (0, 0), so its start says 0; it must still belong
    # to the last step (spec: tokens after the last step belong to the last step).
    token_starts = torch.tensor([[[0, 1, 2, 3, 4, 5, 0]]])
    out = token_step_from_offsets(
        token_starts,
        torch.ones(1, 1, 7, dtype=torch.bool),
        torch.tensor([[[0, 4]]]),
        torch.ones(1, 1, 2, dtype=torch.bool),
    )
    assert out[0, 0].tolist() == [0, 0, 0, 0, 1, 1, 1]

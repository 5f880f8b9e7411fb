"""The screen's candidate search (``screen_candidates``) against a plain scan over the bfloat16 values."""

import naive
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from draftless.integration.fastpass import screen_candidates
from draftless.integration.fastpass.screen_candidates import BLOCK, candidates

# every bfloat16 bit pattern but NaN (exponent all ones, mantissa not zero): the infinities and both zeros included
_NOT_NAN = st.integers(-32768, 32767).filter(lambda x: (x & 0x7F80) != 0x7F80 or (x & 0x7F) == 0)


def _bfloat16(bits):
    return torch.tensor(bits, dtype=torch.int16).view(torch.bfloat16)


def _check(scores, slack, cap, rate=0.0):
    want = naive.screen_candidates(scores.float().tolist(), [float(s) for s in slack], cap, rate)
    # as the rows-major product lies, and as the weight-major one does (a contiguous tokens-by-rows tensor's
    # transpose, read column by column)
    for laid in (scores, scores.T.contiguous().T):
        listed, counts, best = candidates(laid, slack, cap, rate)
        got = [listed[i, : int(counts[i])].tolist() if counts[i] <= cap else [] for i in range(scores.shape[0])]
        assert (got, counts.tolist(), best.tolist()) == want


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_any_bit_patterns_match_the_plain_scan(data):
    rows = data.draw(st.integers(1, 4))
    n = data.draw(st.integers(1, 3 * BLOCK + 5))
    bits = data.draw(st.lists(st.lists(_NOT_NAN, min_size=n, max_size=n), min_size=rows, max_size=rows))
    slack = data.draw(st.lists(st.sampled_from([0.0, 1e-30, 0.5, 3.0, 1e6]), min_size=rows, max_size=rows))
    rate = data.draw(st.sampled_from([0.0, 0.0161, 0.5]))  # the screen's is 2u / ((1 - u) c), about 0.0079
    _check(_bfloat16(bits), slack, data.draw(st.integers(1, 40)), rate)


@settings(max_examples=100, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.integers(1, 5),
    st.integers(1, 4 * BLOCK + 3),
    st.floats(-50, 50),
    st.sampled_from([1e-3, 1.0, 30.0]),
    st.floats(0, 4),
    st.integers(1, 64),
    st.sampled_from([0.0, 0.0079, 0.1]),
)
def test_logit_like_rows_match_the_plain_scan(seed, rows, n, shift, scale, slack, cap, rate):
    # rows like an output layer's: a few high scores above a wide body, the maximum often negative (shift)
    g = torch.Generator().manual_seed(seed)
    scores = (torch.randn((rows, n), generator=g) * scale + shift).bfloat16()
    _check(scores, [slack * scale] * rows, cap, rate)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.sampled_from([6, 39, 40, 41, 65]),
    st.integers(1, 3 * BLOCK + 3),
    st.sampled_from([-5.0, 0.0, 5.0, 20.0]),
    st.floats(0, 4),
    st.sampled_from([1, 3, 64]),
)
def test_many_pass_rows_match_the_plain_scan(seed, rows, n, shift, slack, cap):
    # as many rows as a long draft's pass, on both sides of FLAT_COLUMNS; a few rows' maxima far above the rest,
    # so that blocks are skipped whole for some rows and read for others
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn((rows, n), generator=g) * 2 + shift
    spikes = torch.randint(0, n, (rows,), generator=g)
    scores[torch.arange(rows), spikes] += torch.rand(rows, generator=g) * 30
    _check(scores.bfloat16(), [slack] * rows, cap, 0.0079)


def test_the_maximum_raised_late_drops_the_candidates_kept_before_it():
    row = [1.0] * 600 + [3.0] + [1.0] * 10 + [2.9375]  # the 1.0s kept in the first blocks, then under 3.0 - 0.25
    listed, counts, best = candidates(torch.tensor([row]).bfloat16(), [0.25], 8)
    assert listed[0, : counts[0]].tolist() == [600, 611] and best.tolist() == [600]


def test_a_full_list_reads_the_row_again_under_the_final_threshold():
    # cap 2: the third 5.0 finds the list full of scores at the threshold, so it is lost; 10.0 then raises the
    # threshold past every 5.0, and the row read again lists its two 10.0s (not "more than cap")
    listed, counts, best = candidates(torch.tensor([[5.0, 5.0, 5.0, 10.0, 10.0]]).bfloat16(), [0.0], 2)
    assert counts.tolist() == [2] and listed[0, :2].tolist() == [3, 4] and best.tolist() == [3]
    _, counts, _ = candidates(torch.tensor([[5.0, 5.0, 5.0, 10.0, 10.0, 10.0]]).bfloat16(), [0.0], 2)
    assert counts.tolist() == [3]  # three at the maximum: more than cap


def test_a_row_that_opens_at_minus_infinity_keeps_its_later_maximum():
    # the maximum so far -inf: its threshold at rate 0 was -inf - 0 * inf, NaN, above every key (found by
    # Hypothesis ), so the row's real maximum was never kept
    row = torch.tensor([[-float("inf"), 1.0, 5.0, -float("inf"), 4.5]]).bfloat16()
    for rate in (0.0, 0.1):
        listed, counts, best = candidates(row, [1.0], 4, rate)
        assert best.tolist() == [2] and listed[0, : counts[0]].tolist() == [2, 4]
    listed, counts, best = candidates(_bfloat16([[-128, -128]]), [0.0], 4)  # every score -inf: all at the maximum
    assert listed[0, : counts[0]].tolist() == [0, 1] and best.tolist() == [0]


@pytest.mark.parametrize(
    "bits, rate, want",
    [
        ([[-128]], 0.0, [0]),  # a row all -inf: its maximum, so a candidate (the reference once took -inf - 0 * inf)
        ([[-129]], 0.0161, [0]),  # the most negative finite: its threshold rounds past fp32, to -inf
        ([[-129, -128]], 0.0161, [0, 1]),
    ],
)
def test_thresholds_at_or_past_the_end_of_fp32(bits, rate, want):
    _check(_bfloat16(bits), [0.0] * len(bits), 4, rate)
    listed, counts, _ = candidates(_bfloat16(bits), [0.0], 4, rate)
    assert listed[0, : counts[0]].tolist() == want


def test_a_zero_maximum_is_first_where_minus_zero_comes_before_plus_zero():
    row = _bfloat16([[-32768, -5, 0, -32768]])  # -0, a negative, +0, -0: -0 == +0, so position 0 is the first
    listed, counts, best = candidates(row, [0.0], 8)
    assert best.tolist() == [0] and listed[0, : counts[0]].tolist() == [0, 2, 3]


@pytest.mark.parametrize("weight_major", [False, True])
@pytest.mark.parametrize("n", [1, BLOCK - 1, BLOCK, BLOCK + 1, 5 * BLOCK])
def test_rows_of_any_length_around_the_block(n, weight_major):
    scores = torch.zeros((2, n))
    scores[0, n - 1] = 7.0  # the maximum in the tail (or the last block)
    scores[1, 0] = 7.0
    scores = scores.bfloat16().T.contiguous().T if weight_major else scores.bfloat16()
    listed, counts, best = candidates(scores, [1.0, 1.0], 4)
    assert counts.tolist() == [1, 1] and listed[:, 0].tolist() == [n - 1, 0] and best.tolist() == [n - 1, 0]


def test_the_kernels_are_compiled():
    scores = torch.ones((2, 3)).bfloat16()
    candidates(scores, [0.0, 0.0], 1)
    candidates(scores.T.contiguous().T, [0.0, 0.0], 1)
    assert screen_candidates.rows_candidates.signatures and screen_candidates.columns_candidates.signatures


@pytest.mark.parametrize(
    "scores, slack, cap, error, name",
    [
        (torch.ones((1, 3)), [0.0], 1, TypeError, "scores"),
        (np.ones((1, 3)), [0.0], 1, TypeError, "scores"),
        (torch.ones(3).bfloat16(), [0.0], 1, ValueError, "scores"),
        (torch.ones((1, 0)).bfloat16(), [0.0], 1, ValueError, "scores"),
        (torch.ones((2, 3)).bfloat16(), [0.0], 1, ValueError, "slack"),
        (torch.ones((1, 3)).bfloat16(), [-1.0], 1, ValueError, "slack"),
        (torch.ones((1, 3)).bfloat16(), [float("nan")], 1, ValueError, "slack"),
        (torch.ones((1, 3)).bfloat16(), [0.0], 0, ValueError, "cap"),
        (torch.ones((1, 3)).bfloat16(), [0.0], True, ValueError, "cap"),
        (torch.ones((1, 3)).bfloat16(), [0.0], 1, ValueError, "rate"),
    ],
)
def test_bad_input_is_refused_by_name(scores, slack, cap, error, name):
    with pytest.raises(error, match=name):
        candidates(scores, slack, cap, 1.0 if name == "rate" else 0.0)

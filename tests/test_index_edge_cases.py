"""Hand-made index cases, each with the reason beside the expectation, and input validation."""

import subprocess
import sys

import numpy as np
import pytest

from draftless.index import Match, SuffixIndex
from draftless.index.automaton import extend_automaton


def test_empty_index():
    idx = SuffixIndex()
    assert idx.longest_match() == Match(0, -1, -1)  # nothing to match
    assert idx.continuation(-1, 4).tolist() == []  # nothing follows
    assert idx.continuations().tokens.size == 0
    idx.check_invariants()


def test_no_match():
    assert SuffixIndex([1, 2, 3]).longest_match() == Match(0, -1, -1)  # no token repeats


def test_match_ends_at_last_earlier_token():
    idx = SuffixIndex([4, 9, 4])
    assert idx.longest_match() == Match(1, 0, 0)  # "4" occurred at 0; the current one (2) never counts
    assert idx.continuation(0, 5).tolist() == [9, 4]  # up to the end of the stream, no further


def test_recent_versus_first_occurrence():
    idx = SuffixIndex([1, 2, 8, 1, 2, 9, 1, 2])
    assert idx.longest_match() == Match(2, 4, 1)  # "1 2" ends at 1 and 4; 4 is the most recent
    assert idx.continuation(4, 1).tolist() == [9]  # not [8]: recency


def test_repeated_single_token_overlaps():
    idx = SuffixIndex([7] * 6)
    assert idx.longest_match() == Match(5, 4, 4)  # "7"*5 ends at 4 (overlapping the current suffix)
    cont = idx.continuations()
    assert (cont.tokens.tolist(), cont.counts.tolist()) == ([7], [1])  # only 0..4 is followed (by 7)


def test_top_ids_of_a_262k_vocabulary():
    top = 262143
    idx = SuffixIndex([top, 0, top, 0, top], vocab_size=262144)
    assert idx.longest_match() == Match(3, 2, 2)
    assert idx.continuation(2, 2).tolist() == [0, top]
    with pytest.raises(ValueError, match="vocab_size=262144"):
        idx.extend(262144)  # one past the vocabulary


def test_ids_up_to_int32_max():
    big = 2**31 - 2
    idx = SuffixIndex([big, 3, big, 3])
    assert idx.longest_match() == Match(2, 1, 1)
    idx.check_invariants()


def test_continuations_ranked_by_count_then_recency():
    idx = SuffixIndex([5, 1, 5, 2, 5, 2, 5, 3, 5])
    cont = idx.continuations(limit=3)
    assert cont.tokens.tolist() == [2, 3, 1]  # 2 twice; then 3 (position 7) is more recent than 1
    assert cont.counts.tolist() == [2, 1, 1]
    assert cont.ends.tolist() == [5, 7, 1]
    assert idx.continuations(limit=1).tokens.tolist() == [2]


@pytest.mark.parametrize(
    "bad, error, word",
    [
        ([1.5, 2.0], TypeError, "integer"),
        ([1, -3], ValueError, "negative"),
        ([[1, 2], [3, 4]], ValueError, "1-D"),
        (np.array([True, False]), TypeError, "bool"),
        ("abc", TypeError, "integer"),
        (True, TypeError, "bool"),
    ],
)
def test_bad_tokens_are_refused_before_any_kernel(bad, error, word):
    idx = SuffixIndex([1, 2])
    with pytest.raises(error, match=word):
        idx.extend(bad)
    assert idx.tokens.tolist() == [1, 2]  # untouched


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"vocab_size": 0}, ValueError),
        ({"vocab_size": 2.0}, TypeError),
        ({"vocab_size": 2**31}, ValueError),
        ({"recency_depth": 0}, ValueError),
        ({"recency_depth": "8"}, TypeError),
    ],
)
def test_bad_constructor_arguments(kwargs, error):
    with pytest.raises(error, match=next(iter(kwargs))):
        SuffixIndex(**kwargs)


def test_bad_query_arguments():
    idx = SuffixIndex([1, 2, 1])
    with pytest.raises(ValueError, match="end"):
        idx.continuation(3, 2)
    with pytest.raises(ValueError, match="k"):
        idx.continuation(0, -1)
    with pytest.raises(ValueError, match="limit"):
        idx.continuations(limit=0)
    with pytest.raises(ValueError, match="state"):
        idx.continuations(state=99)
    for call, word in (
        (lambda: idx.continuation(0, 2.0), "k"),
        (lambda: idx.continuation(True, 2), "end"),
        (lambda: idx.continuation("0", 2), "end"),
        (lambda: idx.frequent_path(0, 1.5), "max_len"),
        (lambda: idx.continuations(state=1.0), "state"),
    ):
        with pytest.raises(TypeError, match=word):
            call()
    assert idx.continuation(np.int64(-1), np.int32(2)).tolist() == [1, 2]


def test_tokens_view_is_read_only_and_tensors_are_accepted():
    idx = SuffixIndex(np.arange(5, dtype=np.uint16))
    with pytest.raises(ValueError):
        idx.tokens[0] = 3
    assert len(idx) == 5


def test_kernels_are_really_compiled():
    SuffixIndex([1, 2, 1])
    assert extend_automaton.signatures  # Numba compiled it (not silently falling back)


def test_importing_index_and_lookup_leaves_torch_out():
    code = "import sys, draftless.index, draftless.lookup; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"

"""Every index query against the brute-force reference in ``naive.py``, after every append."""

import naive
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streams import any_stream, code_like, edited_repeats, large_vocab, one_token, periodic, small_vocab

from draftless.index import SuffixIndex

UNBOUNDED = 10**9  # refresh whole suffix-link chains: every figure exact


def assert_index_matches(stream, recency_depth=UNBOUNDED, chunk=1):
    idx = SuffixIndex(recency_depth=recency_depth)
    for start in range(0, len(stream), chunk):
        idx.extend(stream[start : start + chunk])
        prefix = stream[: start + chunk]
        assert tuple(idx.longest_match()) == naive.longest_match(prefix), prefix
        got = idx.continuations(limit=1000)
        want = naive.ranked_continuations(prefix, idx.longest_match().length)
        assert list(zip(got.tokens.tolist(), got.counts.tolist(), got.ends.tolist())) == want, prefix
        idx.check_invariants()
    assert idx.tokens.tolist() == stream


@settings(max_examples=60, deadline=None)
@given(any_stream)
def test_match_and_continuations_exact_with_full_refresh(stream):
    assert_index_matches(stream)


@settings(max_examples=40, deadline=None)
@given(st.one_of(small_vocab, large_vocab, edited_repeats()), st.integers(1, 9))
def test_chunked_appends_equal_single_appends(stream, chunk):
    assert_index_matches(stream, chunk=chunk)


@settings(max_examples=40, deadline=None)
@given(st.one_of(one_token, periodic, small_vocab))
def test_bounded_refresh_stays_truthful(stream):
    """With a tiny refresh depth the figures may be stale, but never wrong: the length and first end are
    exact, the recent end is a real earlier occurrence, counts never overstate."""
    idx = SuffixIndex(recency_depth=2)
    for i, tok in enumerate(stream):
        idx.extend(tok)
        prefix = stream[: i + 1]
        length, recent, first = naive.longest_match(prefix)
        got = idx.longest_match()
        assert (got.length, got.first_end) == (length, first)
        if length:
            assert first <= got.recent_end <= recent
            assert prefix[got.recent_end - length + 1 : got.recent_end + 1] == prefix[-length:]
        truth = naive.continuations(prefix, length)
        cont = idx.continuations(limit=1000)
        for tok_, count, end in zip(cont.tokens.tolist(), cont.counts.tolist(), cont.ends.tolist()):
            assert 1 <= count <= truth[tok_][0] and prefix[end] == tok_
    idx.check_invariants()


def test_code_like_stream_default_depth_is_exact():
    assert_index_matches(code_like(), recency_depth=64, chunk=5)


@settings(max_examples=60, deadline=None)
@given(st.one_of(small_vocab, edited_repeats(), periodic), st.lists(st.integers(0, 5), max_size=40))
def test_streaming_matcher_matches_naive(doc, live):
    idx = SuffixIndex(doc, recency_depth=UNBOUNDED)
    m = idx.matcher()
    for i, tok in enumerate(live):
        m.feed(tok)
        assert (m.length, m.recent_end, m.first_end) == naive.stream_match(doc, live[: i + 1])


@settings(max_examples=40, deadline=None)
@given(small_vocab, small_vocab, st.lists(st.integers(0, 3), max_size=30))
def test_matcher_survives_a_growing_reference(doc, more, live):
    """The reference grows between feeds (clones split states the matcher sits on). The match stays a
    real occurrence; it extends from where it was, it does not re-read tokens fed before the growth."""
    idx = SuffixIndex(doc, recency_depth=UNBOUNDED)
    m = idx.matcher()
    half = len(live) // 2
    m.feed(live[:half])
    idx.extend(more)
    m.feed(live[half:])
    want = naive.incremental_stream_match([(doc, live[:half]), (doc + more, live[half:])])
    assert (m.length, m.recent_end, m.first_end) == want
    if m.length:
        cont = m.continuations(limit=100)
        want = {}
        for e in naive.occurrence_ends(doc + more, live[len(live) - m.length :]):
            if e + 1 < len(doc + more):
                want[(doc + more)[e + 1]] = want.get((doc + more)[e + 1], 0) + 1
        assert dict(zip(cont.tokens.tolist(), cont.counts.tolist())) == want


@pytest.mark.parametrize("vocab", [5, 262144])
def test_long_random_stream_against_naive_at_checkpoints(vocab):
    rng = np.random.default_rng(vocab)
    base = rng.integers(0, vocab, 400).tolist()
    stream = base + base[50:250] + rng.integers(0, vocab, 100).tolist() + base[:120]
    idx = SuffixIndex(recency_depth=64)
    for start in range(0, len(stream), 37):
        idx.extend(np.array(stream[start : start + 37], dtype=np.int64))
        prefix = stream[: start + 37]
        assert tuple(idx.longest_match()) == naive.longest_match(prefix)
    idx.check_invariants()


@settings(max_examples=60, deadline=None)
@given(st.one_of(small_vocab, edited_repeats(), periodic, one_token), st.integers(0, 12))
def test_suffix_states_and_frequent_paths_match_naive(stream, max_len):
    idx = SuffixIndex(stream, recency_depth=UNBOUNDED)
    rows = idx.suffix_states()
    length = idx.longest_match().length
    # the rows cover every suffix length 1..length once, longest first
    assert [n for _, shortest, longest in rows for n in range(longest, shortest - 1, -1)] == list(range(length, 0, -1))
    for state, shortest, longest in rows:
        tokens, counts = idx.frequent_path(state, max_len)
        want = naive.frequent_path(stream, int(longest), max_len)
        assert (tokens.tolist(), counts.tolist()) == want, (stream, longest)
        assert naive.frequent_path(stream, int(shortest), max_len) == want  # one state, one set of followers
        assert all(a >= b for a, b in zip(counts.tolist(), counts.tolist()[1:]))
        for n in range(int(shortest), int(longest) + 1):
            assert idx.suffix_state(n) == state
            assert idx.state_ends(state)[1] == min(naive.occurrence_ends(stream, stream[len(stream) - n :]))
    for bad, error in ((0, ValueError), (length + 1, ValueError), (1.0, TypeError)):
        with pytest.raises(error, match="length"):
            idx.suffix_state(bad)
    with pytest.raises(ValueError, match="max_len"):
        idx.frequent_path(0, -1)
    with pytest.raises(ValueError, match="state"):
        idx.frequent_path(idx.num_states, 3)


def test_frequent_path_docstring_example():
    idx = SuffixIndex([1, 2, 3, 1, 2, 4, 1, 2, 3, 1, 2])
    tokens, counts = idx.frequent_path(idx.suffix_state(2), 4)
    assert tokens.tolist() == [3, 1, 2, 4] and counts.tolist() == [2, 2, 2, 1]
    assert SuffixIndex([5, 6, 7]).suffix_states().shape == (0, 3)

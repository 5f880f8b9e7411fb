"""The drafting layer: the suffix proposer's choices, the peers' rules against a brute-force reference."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from draftless.lookup import DraftConfig, NgramRule, NullProposer, PromptLookupRule, SuffixProposer
from draftless.lookup.peer_rules import oldest_continuation


def test_default_config_and_validation():
    assert DraftConfig() == DraftConfig(min_match=2, max_draft=16, occurrence="recent")
    for kwargs, error in [({"min_match": 0}, ValueError), ({"max_draft": 2.0}, TypeError),
                          ({"occurrence": "oldest"}, ValueError), ({"min_match": True}, TypeError)]:
        with pytest.raises(error, match=next(iter(kwargs))):
            DraftConfig(**kwargs)
    with pytest.raises(TypeError, match="config"):
        SuffixProposer(config={"max_draft": 3})


@pytest.mark.parametrize("stream, occurrence, expected", [
    ([1, 2, 8, 1, 2, 9, 1, 2], "recent", [9, 1]),  # "1 2" last occurred at 3-4, followed by 9
    ([1, 2, 8, 1, 2, 9, 1, 2], "first", [8, 1]),  # the first "1 2", followed by 8
    ([1, 2, 8, 1, 2, 9, 1, 2], "frequent", [9, 1]),  # 8 and 9 once each: the more recent wins the tie
    ([5, 1, 8, 5, 1, 8, 6, 1, 9, 7, 1], "frequent", [8, 6]),  # "1": followed by 8 twice, 9 once
    ([5, 1, 8, 5, 1, 8, 6, 1, 9, 7, 1], "recent", [9, 7]),  # ... but 9 most recently
])
def test_occurrence_choice(stream, occurrence, expected):
    p = SuffixProposer(DraftConfig(min_match=1, max_draft=2, occurrence=occurrence))
    p.reset(np.array(stream))
    assert p.propose(10).tolist() == expected


def test_min_match_budget_and_update():
    p = SuffixProposer(DraftConfig(min_match=3, max_draft=8))
    p.reset(np.array([4, 5, 6, 7, 4, 5]))
    assert p.propose(10).size == 0  # "4 5" is only 2 tokens long
    p.update(np.array([6]))
    assert p.propose(10).tolist() == [7, 4, 5, 6]  # "4 5 6" matched: what followed, to the stream's end
    assert p.propose(2).tolist() == [7, 4]  # never more than the budget
    assert p.propose(0).size == 0
    assert NullProposer().propose(5).size == 0


def naive_oldest(tokens, n, k):
    tokens = list(tokens)
    for start in range(len(tokens) - n):
        if tokens[start:start + n] == tokens[len(tokens) - n:]:
            return tokens[start + n: start + n + k]
    return None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 4), max_size=60), st.integers(1, 4), st.integers(1, 6))
def test_oldest_continuation_matches_naive(tokens, n, k):
    got = oldest_continuation(np.array(tokens, dtype=np.int64), n, k)
    want = naive_oldest(tokens, n, k)
    assert (got is None and want is None) or got.tolist() == want


def test_peer_rules_as_their_originals_describe():
    stream = np.array([1, 2, 9, 1, 2, 8, 3, 3, 1, 2], dtype=np.int64)
    pld = PromptLookupRule()
    pld.reset(stream)
    assert pld.propose(50).tolist() == [9, 1, 2, 8, 3, 3, 1, 2]  # oldest "1 2", up to 10 tokens
    ngram = NgramRule()
    ngram.reset(stream[:-1])
    ngram.update(stream[-1:])
    assert ngram.propose(3).tolist() == [9, 1, 2]
    solo = PromptLookupRule()
    solo.reset(np.array([5, 6, 7]))
    assert solo.propose(5).size == 0  # nothing repeats
    with pytest.raises(ValueError, match="ngram"):
        NgramRule(min_ngram=3, max_ngram=2)

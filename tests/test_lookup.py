"""The drafting layer: the suffix proposer's choices, the peers' rules against a brute-force reference."""

import naive
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.peer_rules import NgramRule, PromptLookupRule, SuffixDecodingRule, oldest_continuation
from benchmarks.peer_rules_retrieval import LlamaCppLookupRule, RestRule, SamDecodingRule
from draftless.lookup import AdaptiveProposer, DraftConfig, NullProposer, SuffixProposer


def test_default_config_and_validation():
    assert DraftConfig() == DraftConfig(min_match=2, max_draft=16, occurrence="recent")
    for kwargs, error in [
        ({"min_match": 0}, ValueError),
        ({"max_draft": 2.0}, TypeError),
        ({"occurrence": "oldest"}, ValueError),
        ({"min_match": True}, TypeError),
        ({"max_draft": 10**9}, ValueError),
    ]:  # not a run that allocates by it
        with pytest.raises(error, match=next(iter(kwargs))):
            DraftConfig(**kwargs)
    with pytest.raises(TypeError, match="config"):
        SuffixProposer(config={"max_draft": 3})


@pytest.mark.parametrize(
    "stream, occurrence, expected",
    [
        ([1, 2, 8, 1, 2, 9, 1, 2], "recent", [9, 1]),  # "1 2" last occurred at 3-4, followed by 9
        ([1, 2, 8, 1, 2, 9, 1, 2], "first", [8, 1]),  # the first "1 2", followed by 8
        ([1, 2, 8, 1, 2, 9, 1, 2], "frequent", [9, 1]),  # 8 and 9 once each: the more recent wins the tie
        ([5, 1, 8, 5, 1, 8, 6, 1, 9, 7, 1], "frequent", [8, 6]),  # "1": followed by 8 twice, 9 once
        ([5, 1, 8, 5, 1, 8, 6, 1, 9, 7, 1], "recent", [9, 7]),  # ... but 9 most recently
    ],
)
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
        if tokens[start : start + n] == tokens[len(tokens) - n :]:
            return tokens[start + n : start + n + k]
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


def naive_suffix_decoding(stream, budget, depth=24, cap=32, factor=1.0, min_prob=0.1):
    """SuffixDecoding's path speculation as its description reads, with brute-force occurrence counts."""
    best, best_score = [], 0.0
    longest = naive.longest_match(stream)[0]
    for m in range(1, min(longest, depth - 1) + 1):
        limit = min(budget, cap, int(m * factor + 1e-6), depth - m)
        total = len(naive.occurrence_ends(stream, stream[len(stream) - m :]))
        tokens, counts = naive.frequent_path(stream, m, limit)
        draft, score = [], 0.0
        for tok, count in zip(tokens, counts):
            if count / total < min_prob:
                break
            draft.append(tok)
            score += count / total
        if score >= best_score:
            best, best_score = draft, score
    return best


@settings(max_examples=150, deadline=None)
@given(
    st.one_of(st.lists(st.integers(0, 3), max_size=80), st.lists(st.integers(0, 30), max_size=80)),
    st.integers(1, 40),
    st.sampled_from([(24, 32, 1.0), (6, 32, 1.0), (24, 4, 2.0)]),
)
def test_suffix_decoding_rule_matches_its_description(stream, budget, knobs):
    depth, cap, factor = knobs
    rule = SuffixDecodingRule(max_depth=depth, max_spec_tokens=cap, max_spec_factor=factor)
    rule.reset(np.array(stream[:5], dtype=np.int64))
    rule.update(np.array(stream[5:], dtype=np.int64))
    assert rule.propose(budget).tolist() == naive_suffix_decoding(stream, budget, depth, cap, factor)


def test_suffix_decoding_rule_drafts_no_longer_than_its_match():
    rule = SuffixDecodingRule()
    rule.reset(np.array([1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3], dtype=np.int64))
    # "1 2 3" occurred once before (and ends the stream: 2 occurrences), so each path token has share 1/2
    assert rule.propose(10).tolist() == [4, 5, 6]
    rule.update(np.array([4]))
    assert rule.propose(10).tolist() == [5, 6, 7, 8] and rule.propose(2).tolist() == [5, 6]
    rule.reset(np.array([5, 6, 7]))
    assert rule.propose(5).size == 0 and rule.propose(0).size == 0
    with pytest.raises(ValueError, match="max_depth"):
        SuffixDecodingRule(max_depth=1)
    with pytest.raises(ValueError, match="min_token_prob"):
        SuffixDecodingRule(min_token_prob=1.5)


@pytest.mark.parametrize(
    "make",
    [
        NullProposer,
        SuffixProposer,
        AdaptiveProposer,
        PromptLookupRule,
        NgramRule,
        SuffixDecodingRule,
        SamDecodingRule,
        RestRule,
        LlamaCppLookupRule,
    ],
)
def test_every_proposer_refuses_a_bad_budget(make):
    p = make()
    p.reset(np.array([1, 2, 3, 1, 2]))
    for bad, error in ((-1, ValueError), (2.5, TypeError), ("3", TypeError), (True, TypeError)):
        with pytest.raises(error, match="max_tokens"):
            p.propose(bad)
    assert p.propose(np.int64(0)).size == 0


def test_adaptive_proposer_refuses_bad_updates_and_pass_times_before_learning():
    p = AdaptiveProposer()
    p.reset(np.array([1, 2, 3, 1, 2]))
    p.propose(4)
    for bad, error in ((np.array([1.5]), TypeError), (np.array([-3]), ValueError), ([[1, 2]], ValueError)):
        with pytest.raises(error, match="tokens"):
            p.update(bad)
    assert len(p.index) == 5 and p._pending is not None  # nothing learned from the refused updates
    for k, seconds, error in (
        (-1, 0.1, ValueError),
        (2, float("nan"), ValueError),
        (2, float("inf"), ValueError),
        (2, -0.1, ValueError),
        (2, "0.1", TypeError),
    ):
        with pytest.raises(error):
            p.record_pass(k, seconds)
    assert p.cost.scale == 1.0
    p.record_pass(2, 0.0)  # a clock too coarse to see the pass: ignored
    assert p.cost.scale == 1.0

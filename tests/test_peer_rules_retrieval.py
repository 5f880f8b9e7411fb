"""llama.cpp's lookup, SAM-Decoding and REST as proposers, each against a brute-force reading of its
description (``draftless.lookup.peer_rules_retrieval``)."""

import naive
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.peer_rules_retrieval import (
    LAX_MIN_PERCENT,
    LAX_MIN_SAMPLES,
    LlamaCppLookupRule,
    RestRule,
    SamDecodingRule,
)

STREAMS = st.one_of(
    st.lists(st.integers(0, 2), max_size=60),
    st.lists(st.integers(0, 4), max_size=60),
    st.lists(st.integers(0, 30), max_size=60),
)


def naive_llamacpp(stream, budget, n_draft=16, max_n=4):
    """The draft grown token by token; each n-gram's successors counted by scanning the stream, ties to the
    successor that reached the top count first."""
    draft = []
    while len(draft) < min(budget, n_draft):
        context = list(stream) + draft
        token = None
        for n in range(min(max_n, len(context)), 0, -1):
            gram = context[len(context) - n :]
            seen, first_at = {}, {}
            for i in range(n, len(stream)):  # successors within the stream only, never the draft
                if stream[i - n : i] == gram:
                    seen[stream[i]] = seen.get(stream[i], 0) + 1
                    first_at[(stream[i], seen[stream[i]])] = i
            if not seen:
                continue
            top = max(seen.values())
            best = min((t for t in seen if seen[t] == top), key=lambda t: first_at[(t, top)])
            total = sum(seen.values())
            if total >= LAX_MIN_SAMPLES[n - 1] and 100 * top >= LAX_MIN_PERCENT[n - 1] * total:
                token = best
                break
        if token is None:
            break
        draft.append(token)
    return draft


def naive_sam(stream, budget, max_predicts=60, alpha=4.0):
    length, _, first = naive.longest_match(stream)
    k = min(budget, max_predicts - 1, int(length * alpha))
    return list(stream[first + 1 : first + 1 + k]) if k > 0 else []


def naive_rest(stream, budget, max_span=16, min_span=2, depth=10):
    span = min(naive.longest_match(stream)[0], max_span)
    if span < min_span:
        return []
    return naive.frequent_path(stream, span, min(budget, depth))[0]


def _split_feed(rule, stream, cut):
    rule.reset(np.array(stream[:cut], dtype=np.int64))
    rule.update(np.array(stream[cut:], dtype=np.int64))
    return rule


@settings(max_examples=150, deadline=None)
@given(STREAMS, st.integers(0, 40), st.integers(0, 10))
def test_llamacpp_rule_matches_its_description(stream, budget, cut):
    rule = _split_feed(LlamaCppLookupRule(), stream, cut)
    assert rule.propose(budget).tolist() == naive_llamacpp(stream, budget)


@settings(max_examples=150, deadline=None)
@given(STREAMS, st.integers(0, 80), st.integers(0, 10))
def test_sam_rule_matches_its_description(stream, budget, cut):
    rule = _split_feed(SamDecodingRule(), stream, cut)
    assert rule.propose(budget).tolist() == naive_sam(stream, budget)


@settings(max_examples=150, deadline=None)
@given(STREAMS, st.integers(0, 20), st.integers(0, 10))
def test_rest_rule_matches_its_description(stream, budget, cut):
    rule = _split_feed(RestRule(), stream, cut)
    assert rule.propose(budget).tolist() == naive_rest(stream, budget)


def test_rules_on_a_worked_stream():
    stream = np.array([1, 2, 3, 4, 5, 1, 2, 3, 4, 6, 1, 2, 3], dtype=np.int64)
    lookup = LlamaCppLookupRule()
    lookup.reset(stream)
    # "1 2 3" -> 4 (twice of twice); "1 2 3 4" -> 5 and 6 once each: 5 got there first, 50 % passes for n = 4
    assert lookup.propose(3).tolist() == [4, 5, 1]
    sam = SamDecodingRule()
    sam.reset(stream)
    # match "1 2 3" (3 tokens: 12 allowed), drafted from its earliest occurrence, up to the stream's end
    assert sam.propose(50).tolist() == [4, 5, 1, 2, 3, 4, 6, 1, 2, 3]
    rest = RestRule()
    rest.reset(stream)
    # both earlier "1 2 3" go on with 4; then 5 and 6 once each: the later occurrence wins the tie
    assert rest.propose(50).tolist() == [4, 6, 1, 2, 3]
    short = SamDecodingRule(alpha=1.0)
    short.reset(stream)
    assert short.propose(50).tolist() == [4, 5, 1]  # no longer than the match itself


def test_nothing_repeats_nothing_drafted():
    for rule in (LlamaCppLookupRule(), SamDecodingRule(), RestRule()):
        rule.reset(np.array([5, 6, 7, 8]))
        assert rule.propose(10).size == 0 and rule.propose(0).size == 0
    rest = RestRule()
    rest.reset(np.array([5, 6, 7, 5]))  # a 1-token match is below REST's shortest span
    assert rest.propose(10).size == 0


@pytest.mark.parametrize(
    "make, error",
    [
        (lambda: LlamaCppLookupRule(ngram_min=3, ngram_max=2), "ngram_min"),
        (lambda: LlamaCppLookupRule(n_draft=0), "n_draft"),
        (lambda: LlamaCppLookupRule(ngram_max=5), "min_samples"),
        (lambda: SamDecodingRule(max_predicts=1), "max_predicts"),
        (lambda: SamDecodingRule(alpha=0), "alpha"),
        (lambda: RestRule(min_span=3, max_span=2), "min_span"),
        (lambda: RestRule(max_depth=0), "max_depth"),
    ],
)
def test_bad_settings_are_refused_by_name(make, error):
    with pytest.raises(ValueError, match=error):
        make()


@pytest.mark.parametrize("make", [LlamaCppLookupRule, SamDecodingRule, RestRule])
def test_bad_token_ids_are_refused_by_name(make):
    rule = make()
    for bad, error in (([1, -2], ValueError), ([1.5, 2.0], TypeError), (["a"], TypeError)):
        with pytest.raises(error, match="tokens"):
            rule.reset(bad)
    rule.reset([1, 2, 1])
    with pytest.raises(ValueError, match="tokens"):
        rule.update([-1])

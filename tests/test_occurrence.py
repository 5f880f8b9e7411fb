"""Which earlier occurrence supplies the draft: the "frequent" rule against brute force, agreement's arithmetic,
and the copied passage's earliest occurrence while the output is copying."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from naive import followers, longest_match, occurrence_ends
from streams import edited_repeats, periodic, small_vocab

from draftless.index import SuffixIndex
from draftless.lookup import AdaptiveConfig, AdaptiveProposer
from draftless.lookup.cost_model import CostCurve
from draftless.lookup.occurrence import agreement, source_end


def naive_frequent_end(stream):
    """The latest occurrence of the majority follower of the longest match (ties to the more recent), by brute
    force."""
    length, recent, _ = longest_match(stream)
    n = len(stream)
    ends = [e for e in occurrence_ends(stream, stream[n - length :]) if e < n - 1]
    table = followers(stream, ends)
    return max(table.values())[1] - 1 if table else recent


@settings(max_examples=150, deadline=None)
@given(st.one_of(small_vocab, edited_repeats(), periodic))
def test_the_frequent_rule_matches_brute_force(stream):
    index = SuffixIndex(stream)
    match = index.longest_match()
    if match.length == 0:
        return
    assert source_end(index, match, "frequent") == naive_frequent_end(stream)
    assert source_end(index, match, "recent") == match.recent_end
    assert source_end(index, match, "first") == match.first_end


def test_agreement_counts_leading_equal_tokens():
    a = np.array([1, 2, 3, 4])
    assert agreement(a, np.array([1, 2, 9])) == 2
    assert agreement(a, np.array([1, 2])) == 2  # compared over the shorter
    assert agreement(a[:0], np.array([1])) == 0 and agreement(a, np.array([7, 2])) == 0


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"occurrence": "oldest"}, ValueError),
        ({"occurrence": "learned"}, ValueError),  # retired: the "frequent" rule served as well
        ({"earliest_in_prompt": -1}, ValueError),
        ({"earliest_in_prompt": "2"}, TypeError),
        ({"earliest_in_prompt": True}, TypeError),
    ],
)
def test_config_fields_are_validated(kwargs, error):
    with pytest.raises(error, match=next(iter(kwargs))):
        AdaptiveConfig(**kwargs)


PASSAGE = [10, 11, 12, 13, 14, 15]  # the prompt's passage, then an instruction quoting "12 13", then 99
PROMPT = PASSAGE + [7, 12, 13, 99, 7]
FLAT = CostCurve((0, 64), (1.0, 1.05))


def copying_policy(prompt, **config):
    p = AdaptiveProposer(AdaptiveConfig(**config), cost=FLAT)
    p.reset(prompt)
    p.regime.copied = p.regime.weight  # every token so far copied: the output is copying
    return p


@pytest.mark.parametrize("occurrence", ["frequent"])
def test_a_copy_from_the_prompt_drafts_the_earliest_occurrence_of_its_match(occurrence):
    """ "12 13" was followed once by 14 (the passage) and once by 99 (the instruction); "frequent" takes the latest
    of equals, the instruction. While the output is copying, the copied passage is the earliest occurrence."""
    assert copying_policy(PROMPT + [5, 12, 13], occurrence=occurrence).propose(4).tolist() == [14, 15, 7, 12]
    off = copying_policy(PROMPT + [5, 12, 13], occurrence=occurrence, earliest_in_prompt=0)
    assert off.propose(4).tolist() == [99, 7, 5, 12]
    too_short = copying_policy(PROMPT + [5, 12, 13], occurrence=occurrence, earliest_in_prompt=3)  # a 2-token match
    assert too_short.propose(4)[0] == 99
    writing = copying_policy(PROMPT + [5, 12, 13], occurrence=occurrence)
    writing.regime.copied = 0.0  # nothing copied lately: the output is writing
    assert writing.propose(4)[0] == 99
    recent = copying_policy(PROMPT + [5, 12, 13], occurrence="recent")  # the other fixed rules stay as they are
    assert recent.propose(4)[0] == 99


def test_the_earliest_occurrence_stays_out_of_a_match_the_output_repeats():
    """Where the "frequent" occurrence lies in generated text, the output repeats itself, not the prompt."""
    p = copying_policy(PROMPT)
    p.update([12, 13, 42, 8, 12, 13, 42, 6, 12, 13])  # "12 13" now followed by 42 twice, both generated
    p.regime.copied = p.regime.weight
    assert p.index.longest_match().length == 2 and p.propose(4)[0] == 42

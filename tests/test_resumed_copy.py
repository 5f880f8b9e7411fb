"""The resumed copy (``lookup/resumed_copy.py``): after the target replaces a token of a copied source, the policy
drafts the copy from right after that token where it would otherwise take a plain step."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proposers import drive_drafts as run
from streams import any_stream, edited_repeats

from draftless.lookup.adaptive import AdaptiveConfig, AdaptiveProposer
from draftless.lookup.cost_model import CostCurve
from draftless.lookup.resumed_copy import PRIOR, ResumedCopy

CPU = CostCurve((0, 1, 16, 32, 64), (1.0, 1.05, 2.3, 3.1, 4.8))


def edited_copy(seed=0, length=300, every=30, run_length=1):
    """A prompt of distinct random tokens, then the output: a copy of it with ``run_length`` tokens replaced by
    tokens never seen before, every ``every`` tokens. Returns ``(stream, prompt_len, replaced source positions)``."""
    rng = np.random.default_rng(seed)
    source = rng.permutation(1000)[:length]
    copy = source.copy()
    replaced = [p for start in range(every, length - every, every) for p in range(start, start + run_length)]
    copy[replaced] = 1000 + np.arange(len(replaced))
    return np.concatenate([source, copy]), length, replaced


def test_a_copy_resumes_after_the_replaced_token_with_no_plain_step():
    stream, prompt_len, replaced = edited_copy()
    on = run(AdaptiveProposer(AdaptiveConfig(), cost=CPU), stream, prompt_len)
    off = run(AdaptiveProposer(AdaptiveConfig(resume_horizon=0), cost=CPU), stream, prompt_len)
    # the pass right after each replaced token: the match ends there (the token is new), and the draft is the copy
    # from the next source token on
    after = {prompt_len + p + 1 for p in replaced}
    resumed = [(pos, draft) for pos, draft in on if pos in after]
    assert len(resumed) >= len(replaced) - 1
    for pos, draft in resumed[1:]:  # the first break teaches the resumed copy's cell nothing yet
        assert draft.size > 0 and draft[0] == stream[pos - prompt_len]
    assert sum(d.size == 0 for pos, d in off if pos in after) == len(replaced)  # without it, plain steps
    assert sum(d.size == 0 for _, d in on) < sum(d.size == 0 for _, d in off)
    assert len(on) < len(off)


def test_a_longer_replacement_resumes_as_long_after_it():
    stream, prompt_len, replaced = edited_copy(seed=1, every=40, run_length=3)
    on = run(AdaptiveProposer(AdaptiveConfig(), cost=CPU), stream, prompt_len)
    off = run(AdaptiveProposer(AdaptiveConfig(resume_horizon=0), cost=CPU), stream, prompt_len)
    ends = {prompt_len + p + 1 for p in replaced[2::3]}  # right after each three-token replacement
    hits = [draft for pos, draft in on if pos in ends and draft.size and draft[0] == stream[pos - prompt_len]]
    assert len(hits) >= len(ends) - 2
    assert sum(d.size == 0 for _, d in on) < sum(d.size == 0 for _, d in off) / 2


def test_text_that_never_repeats_still_falls_to_plain_steps():
    rng = np.random.default_rng(3)
    stream = rng.integers(0, 50, size=400)  # short chance matches everywhere, nothing copied
    passes = run(AdaptiveProposer(AdaptiveConfig(), cost=CPU), stream, 40)
    tail = passes[len(passes) // 2 :]
    assert sum(d.size == 0 for _, d in tail) >= 0.8 * len(tail)


def test_the_resumed_position_moves_on_with_the_output_and_is_forgotten_after_the_horizon():
    r = ResumedCopy(horizon=8)
    assert r.end is None and r.available(100) == 0
    r.after_pass(source_end=None, drafted=0, appended=1, stream_length=50)  # a plain step: nothing broke
    assert r.end is None
    r.after_pass(source_end=10, drafted=5, appended=3, stream_length=50)  # tokens 11, 12 kept, 13 replaced
    assert r.end == 13 and r.available(53) == 39
    r.after_pass(source_end=None, drafted=0, appended=1, stream_length=53)
    assert r.end == 14
    r.after_pass(source_end=20, drafted=4, appended=5, stream_length=54)  # a draft held whole: nothing broke
    assert r.end == 19
    r.after_pass(source_end=None, drafted=0, appended=2, stream_length=59)
    assert r.end == 21  # 8 tokens since it broke: the horizon
    r.after_pass(source_end=None, drafted=0, appended=1, stream_length=61)
    assert r.end is None
    r.after_pass(source_end=60, drafted=8, appended=2, stream_length=62)  # the rejected token lay past the stream
    assert r.end is None
    r.after_pass(source_end=30, drafted=8, appended=1, stream_length=64)
    assert r.end == 31


def test_the_resumed_copy_learns_from_its_drafts():
    r = ResumedCopy(horizon=16)
    before = r.expected(8)
    assert before[1] == pytest.approx(PRIOR[0])
    for _ in range(5):
        r.observe(accepted=8, drafted=8)
    after = r.expected(8)
    assert after[8] > before[8] and after[1] > 0.5
    failing = ResumedCopy(horizon=16)
    for _ in range(20):
        failing.observe(accepted=0, drafted=8)
    assert failing.expected(8)[8] < before[8] / 3


@settings(max_examples=150, deadline=None)
@given(st.one_of(any_stream, edited_repeats()), st.sampled_from([1, 4, 16, 64]))
def test_every_draft_copies_the_stream_within_its_budget(tokens, horizon):
    tokens = np.asarray(tokens + [0, 0], dtype=np.int64)
    prompt_len = tokens.size // 3
    for pos, draft in run(AdaptiveProposer(AdaptiveConfig(resume_horizon=horizon), cost=CPU), tokens, prompt_len):
        assert set(draft.tolist()) <= set(tokens[:pos].tolist())


def test_bad_horizons_are_refused_by_name():
    with pytest.raises(ValueError, match="resume_horizon"):
        AdaptiveConfig(resume_horizon=-1)
    for bad in (2.5, True, "16"):
        with pytest.raises(TypeError, match="resume_horizon"):
            AdaptiveConfig(resume_horizon=bad)
    for bad in (0, -3):
        with pytest.raises(ValueError, match="horizon"):
            ResumedCopy(bad)
    for bad in (1.5, True, None):
        with pytest.raises(TypeError, match="horizon"):
            ResumedCopy(bad)

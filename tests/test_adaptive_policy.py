"""The adaptive drafting policy's arithmetic on synthetic acceptance streams (no model, no timing)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from proposers import drive

from draftless.lookup.acceptance_model import AcceptanceModel, bucket, expected_accepted
from draftless.lookup.adaptive import AdaptiveConfig, AdaptiveProposer, best_draft_length
from draftless.lookup.copy_regime import CopyRegime
from draftless.lookup.cost_model import FLAT, CostCurve, OnlineCost

CPU = CostCurve((0, 1, 16, 32, 64), (1.0, 1.05, 2.3, 3.1, 4.8))


def test_expected_accepted_is_the_sum_of_survivals():
    assert expected_accepted([0.5, 0.5]).tolist() == [0.0, 0.5, 0.75]
    assert expected_accepted([1.0, 1.0, 1.0]).tolist() == [0.0, 1.0, 2.0, 3.0]
    assert expected_accepted([0.5, 1.0, 0.0]).tolist() == [0.0, 0.5, 1.0, 1.0]
    assert [bucket(x) for x in (1, 2, 3, 4, 5, 6, 8, 11, 12, 64, 1000)] == [0, 1, 2, 3, 3, 4, 5, 5, 6, 11, 11]
    assert bucket(np.array([1, 3, 70])).tolist() == [0, 2, 11]


def test_rates_grow_along_a_draft_with_the_matched_length():
    m = AcceptanceModel()
    rates = m.rates(1 + np.arange(64), True)
    assert np.all(np.diff(rates) >= 0) and rates[0] < 0.5 < 0.95 < rates[-1]
    e = m.expected(1, True, 64)
    assert e.shape == (65,) and e[0] == 0 and np.all(np.diff(e) > 0)
    assert m.expected(40, True, 64)[-1] > 4 * e[-1] / 2  # a long match is worth a longer draft


def constant(a, k):
    return expected_accepted(np.full(k, a))


def test_best_length_follows_cost_and_rate():
    assert best_draft_length(constant(0.995, 64), CPU.at) >= 56  # nearly certain: (almost) as long as allowed
    assert best_draft_length(constant(0.02, 64), CPU.at) == 0  # hopeless: a plain step
    assert best_draft_length(constant(0.3, 64), FLAT.at) >= 30  # free passes: long drafts never hurt
    assert 0 < best_draft_length(constant(0.8, 64), CPU.at) < 64  # in between


def test_a_longer_pass_that_costs_less_is_drafted_rather_than_a_shorter_one():
    # a CPU stair: a pass over 16 rows (k = 15) cheaper than one over 15 (k = 14), as calibrated
    stair = CostCurve((0, 7, 8, 14, 15, 16, 64), (1.0, 1.7, 1.9, 3.9, 2.6, 3.2, 7.5))
    expected = constant(0.97, 15)  # a continuation of 15 tokens, each nearly always right
    assert best_draft_length(expected, stair.at) == 15
    assert best_draft_length(expected[:15], stair.at) == 7  # 14 at most: the stair's top costs more than it pays


def test_drafts_long_when_everything_is_accepted():
    block = list(range(100, 180))
    ks = drive(AdaptiveProposer(cost=CPU), block * 5, prompt_len=len(block))
    assert max(ks) == 64 and ks[-3] >= 32  # grows to the cap while copying


def test_periodic_text_is_drafted_past_the_end_of_the_stream():
    """A 16-token cycle: the latest occurrence of the match lies one period back, so only 16 tokens follow it in the
    stream; the draft goes on with the cycle (as long as the cost pays), and every token of it is right."""
    cycle = list(range(200, 216))
    truth = list(range(10, 40)) + cycle * 12
    flat = CostCurve((0, 1, 16, 32, 64), (1.0, 1.01, 1.05, 1.1, 1.2))  # long drafts pay once they are trusted
    proposer = AdaptiveProposer(cost=flat)
    ks = drive(proposer, truth, prompt_len=30 + 16)
    assert max(ks) > 16
    proposer.reset(np.asarray(truth[: 30 + 16 * 3 + 5]))
    draft = proposer.propose(100)
    assert draft.size > 16 and list(draft) == truth[30 + 16 * 3 + 5 :][: draft.size]


def test_periodic_continuation_matches_an_overlapping_copy():
    from draftless.index import SuffixIndex
    from draftless.lookup.occurrence import periodic_continuation

    rng = np.random.default_rng(0)
    for _ in range(200):
        stream = rng.integers(0, 4, int(rng.integers(2, 30)))
        index = SuffixIndex(stream)
        end, k = int(rng.integers(0, stream.size - 1)), int(rng.integers(0, 70))
        out = list(stream)  # plain-Python reference: copy token after token, reading what was just written
        for i in range(k):
            out.append(out[end + 1 + i])
        assert list(periodic_continuation(index, end, k)) == out[stream.size :]


def test_never_drafts_an_excluded_length():
    # lengths whose verification is not exact on the device (integration.pass_check): the next best is taken
    assert best_draft_length(constant(0.995, 64), FLAT.at, excluded=(64,)) == 63
    assert best_draft_length(constant(0.995, 8), FLAT.at, excluded=(3, 70)) == 8  # past the array: ignored
    assert best_draft_length(constant(0.995, 2), FLAT.at, excluded=(1, 2)) == 0
    block = list(range(100, 180))
    ks = drive(AdaptiveProposer(cost=FLAT, excluded=(32, 64)), block * 5, prompt_len=len(block))
    assert 63 in ks and not {32, 64} & set(ks)


@pytest.mark.parametrize(
    "excluded, error",
    [(5, TypeError), ("64", TypeError), ((0,), ValueError), ((True,), ValueError), ((2.0,), ValueError)],
)
def test_excluded_lengths_are_validated(excluded, error):
    with pytest.raises(error, match="excluded"):
        AdaptiveProposer(cost=FLAT, excluded=excluded)


def test_falls_to_plain_steps_when_nothing_is_accepted():
    rng = np.random.default_rng(0)
    # random tokens over 50 ids: matches are 1-token coincidences whose continuation is right 1 time in 50,
    # below the 5% that a 1-token draft costs on this curve
    stream = rng.integers(0, 50, 800).tolist()
    p = AdaptiveProposer(cost=CPU)
    ks = drive(p, stream, prompt_len=50)
    assert np.mean(np.array(ks[-100:]) == 0) > 0.8


def test_recovers_when_the_text_starts_repeating():
    rng = np.random.default_rng(1)
    noise = rng.integers(0, 50, 400).tolist()
    block = list(range(100, 160))
    ks = drive(AdaptiveProposer(cost=CPU), noise + block + block + block, prompt_len=50)
    assert np.mean(np.array(ks[-30:-10]) == 0) > 0.5  # mostly plain steps in the noise
    assert max(ks[-10:]) >= 20 and sum(ks[-10:]) >= 60  # long drafts again once the block repeats


def test_online_cost_follows_a_slower_machine():
    cost = OnlineCost(CPU, weight=0.5)
    for _ in range(20):
        cost.observe(16, 2 * CPU.at(16))
    assert cost.cost(0) == pytest.approx(2.0, rel=1e-3)


def test_acceptance_model_learns_and_forgets():
    m = AcceptanceModel(forgetting=0.9)
    prior = m.rate(20, True)
    for _ in range(30):
        m.observe(20, True, accepted=0, drafted=8)
    assert m.rate(20, True) < 0.3 < prior
    for _ in range(30):
        m.observe(20, True, accepted=8, drafted=8)
    assert m.rate(20, True) > 0.8 and m.rate(27, True) > 0.8  # positions 20..27 were all judged
    assert m.rate(20, False) == pytest.approx(prior)  # the other source is untouched


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"max_draft": 0}, ValueError),
        ({"max_draft": 1025}, ValueError),
        ({"min_match": 1.5}, TypeError),
        ({"occurrence": "nearest"}, ValueError),
        ({"prior_strength": 0}, ValueError),
        ({"prior_strength": float("inf")}, ValueError),
        ({"prior_strength": float("nan")}, ValueError),
        ({"prior": (0.5,) * 3}, ValueError),
        ({"prior": (1.0,) * 12}, ValueError),
        ({"copy_share": 1.5}, ValueError),
        ({"reflow": 1}, TypeError),
        ({"stepped_copy": "yes"}, TypeError),
    ],
)
def test_config_is_validated(kwargs, error):
    with pytest.raises(error, match=next(iter(kwargs))):
        AdaptiveConfig(**kwargs)
    assert type(AdaptiveConfig(reflow=np.False_).reflow) is bool  # recorded in a run's JSON as is


def test_cost_curve_is_validated_and_interpolates():
    with pytest.raises(ValueError, match="start at 0"):
        CostCurve((1, 2), (1.0, 2.0))
    with pytest.raises(ValueError, match="positive"):
        CostCurve((0, 2), (1.0, 0.0))
    with pytest.raises(ValueError, match="finite"):  # a corrupt cache's inf would interpolate to NaN
        CostCurve((0, 2), (1.0, float("inf")))
    with pytest.raises(TypeError, match="ks"):
        CostCurve((0, 2.5), (1.0, 2.0))
    with pytest.raises(TypeError, match="seconds"):
        CostCurve((0, 2), (1.0, "2.0"))
    with pytest.raises(ValueError, match="strength"):
        AcceptanceModel(strength=float("nan"))
    assert CPU.at(8) == pytest.approx(1.05 + (2.3 - 1.05) * 7 / 15)
    assert CPU.at(128) == pytest.approx(4.8 + (4.8 - 3.1) / 32 * 64)
    assert CPU.relative().at(0) == 1.0
    # past the last knot: the trend from half the last length, not the last stair's edge (k = 63 to 64)
    stairs = CostCurve((0, 32, 63, 64), (1.0, 4.0, 6.5, 7.5))
    assert stairs.at(63) == 6.5 and stairs.at(128) == pytest.approx(7.5 + (7.5 - 4.0) / 32 * 64)


def test_adaptive_proposer_in_the_verification_loop_is_exact_and_learns_cost():
    import torch
    from tiny_models import repetitive_prompt, tiny_model

    from draftless.integration import SpeculativeGenerator

    model = tiny_model("gemma3")
    ids = repetitive_prompt(30)
    proposer = AdaptiveProposer(cost=CostCurve((0, 64), (1e-3, 2e-3)))  # a deliberately wrong scale
    gen = SpeculativeGenerator(model, proposer=proposer)
    out = gen.generate(ids, max_new_tokens=40, eos_token_id=None)
    assert torch.equal(out, model.generate(ids, do_sample=False, max_new_tokens=40, eos_token_id=None))
    assert proposer.cost.scale != 1.0  # the loop reported its passes' real durations
    assert len(proposer.chosen) == gen.last_stats.passes and gen.last_stats.accepted > 0


def naive_share(copied_flags, memory, start=0.5, weight=8.0):
    """The copy regime's share after the given tokens, one at a time, as its docstring defines it."""
    num, den = start * weight, weight
    for flag in copied_flags:
        num, den = num * memory + flag, den * memory + 1.0
    return num / den


@given(st.lists(st.tuples(st.integers(1, 40), st.integers(0, 60)), max_size=12), st.sampled_from([1.0, 0.98, 0.9]))
def test_copy_regime_counts_the_newest_tokens_of_a_match_as_copied(runs, memory):
    regime, flags = CopyRegime(copy_share=0.4, memory=memory), []
    for appended, length in runs:  # within a run the match grew by one a token: token j ended at length - (n-1-j)
        regime.observe(appended, length)
        flags += [length - (appended - 1 - j) >= 6 for j in range(appended)]
        assert regime.share == pytest.approx(naive_share(flags, memory))
        assert regime.copying == (regime.share >= 0.4)
    lengths, one_at_a_time = [3, 7, 9, 0, 6], CopyRegime(copy_share=0.4, memory=memory)
    for i, length in enumerate(lengths):  # told one token at a time, as acceptance_features tells it
        assert one_at_a_time.share == pytest.approx(naive_share([x >= 6 for x in lengths[:i]], memory))
        one_at_a_time.observe(1, length)


def test_writing_regime_gives_unverified_draft_tokens_no_credit():
    m = AcceptanceModel()
    writing = m.expected(3, True, 10, copying=False)
    assert writing.tolist() == pytest.approx(expected_accepted(np.full(10, m.rate(3, True))).tolist())
    assert writing[-1] < m.expected(3, True, 10, copying=True)[-1]  # copying: rates rise along the draft
    for _ in range(20):  # a writing draft's positions are all judged at the length it started from
        m.observe(3, True, accepted=4, drafted=10, copying=False)
    assert m.rate(3, True, copying=False) > 0.75 > m.rate(3, True, copying=True)
    assert m.rate(6, True, copying=False) == pytest.approx(m.rate(6, True, copying=True))  # untouched
    assert (
        m.trials[0, 1, bucket(3)] > 0 and m.trials[1].sum() == 0 and m.trials[0, 1].sum() == m.trials[0, 1, bucket(3)]
    )


def test_regime_follows_the_output_and_writing_drafts_stay_short():
    rng = np.random.default_rng(2)
    block = list(range(100, 160))
    # a prompt that holds the block, then generated text that copies 5-token phrases of it between new words
    phrases = [x for s in rng.integers(0, 55, 60) for x in block[s : s + 5] + rng.integers(0, 1000, 3).tolist()]
    p = AdaptiveProposer(cost=CPU)
    ks = drive(p, block + phrases, prompt_len=len(block))
    # writing: no long drafts from short matches (at most a 5-token phrase and the token after it)
    assert not p.regime.copying and max(ks[-60:]) <= 6
    p2 = AdaptiveProposer(AdaptiveConfig(copy_share=0.0), cost=CPU)  # the policy before
    assert max(drive(p2, block + phrases, prompt_len=len(block))[-60:]) >= 32
    ks = drive(p, block + phrases[:200] + block + block, prompt_len=len(block))
    assert p.regime.copying and max(ks[-5:]) >= 32  # copying again once the block comes back


def test_frequent_occurrence_drafts_the_majority_follower():
    stream = np.array([5, 6, 1, 9, 5, 6, 1, 8, 5, 6, 2, 7, 5, 6])  # after "5 6": 1 twice, then 2 last
    for occurrence, first in (("frequent", 1), ("recent", 2), ("first", 1)):
        p = AdaptiveProposer(AdaptiveConfig(occurrence=occurrence), cost=FLAT)
        p.reset(stream)
        draft = p.propose(4)
        assert draft[0] == first
    p = AdaptiveProposer(AdaptiveConfig(occurrence="frequent", earliest_in_prompt=0), cost=FLAT)
    p.reset(stream)
    assert p.propose(3).tolist()[:2] == [1, 8]  # the latest occurrence of the majority follower
    p = AdaptiveProposer(AdaptiveConfig(occurrence="frequent"), cost=FLAT)
    p.reset(stream)  # all of it the prompt, and a request starts on the copying side: the copied passage
    assert p.propose(3).tolist()[:2] == [1, 9]


def test_an_offer_taken_at_zero_teaches_nothing():
    """A batch row that drafts nothing this step (``take(0)`` after ``offer``) did not have its offer rejected: the
    next ``update`` leaves the acceptance evidence as it was, as after a plain ``propose`` step."""
    taken, plain = AdaptiveProposer(), AdaptiveProposer()
    stream = np.array([5, 6, 7, 8, 9, 5, 6, 7], dtype=np.int64)
    taken.reset(stream)
    plain.reset(stream)
    draft, _ = taken.offer(8)
    assert draft.size > 0
    assert taken.take(0).size == 0
    taken.update([8])
    plain.update([8])
    for a, b in zip(vars(taken.acceptance).values(), vars(plain.acceptance).values()):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

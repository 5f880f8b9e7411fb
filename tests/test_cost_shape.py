"""The cost model's learned shape (``OnlineCost`` at ``shape_rate`` > 0): it takes the shape of the passes it is
told, moves only the knots around each pass's length, keeps k = 0 pinned to the scale and stays bounded; at rate
0 nothing but the scale moves, which changes no draft length."""

import numpy as np
import pytest

from draftless.lookup import AdaptiveConfig, AdaptiveProposer
from draftless.lookup.adaptive import best_draft_length
from draftless.lookup.cost_model import SHAPE_BOUND, CostCurve, OnlineCost

CURVE = CostCurve((0, 8, 16, 32, 64), (1.0, 1.5, 2.0, 3.0, 5.0))


def true_cost(k):  # the machine's passes: 16 and up half as dear again as the calibration says
    return CURVE.at(k) * (1.5 if k >= 16 else 1.0)


def test_the_shape_of_the_passes_is_learned_and_k0_stays_pinned():
    cost = OnlineCost(CURVE, shape_rate=0.1)
    for _ in range(300):
        for k in (0, 16, 32, 64):
            cost.observe(k, 2.0 * true_cost(k))  # a machine twice as slow, too
    for k in (16, 32, 64):
        assert cost.cost(k) / cost.cost(0) == pytest.approx(true_cost(k), rel=0.03)
    assert cost.log_shape[0] == 0.0 and cost.cost(0) == pytest.approx(2.0, rel=0.03)
    assert np.allclose(cost.cost(np.array([0, 16])), [cost.cost(0), cost.cost(16)])  # arrays as ints


def test_a_pass_between_knots_moves_the_two_around_it_by_their_weights():
    # first_level off: the first pass moves the knots too (with it on, the first pass sets the level only)
    cost = OnlineCost(CURVE, shape_rate=0.1, first_level=False)
    cost.observe(12, 2 * CURVE.at(12))  # half way from 8 to 16
    moved = cost.log_shape.copy()
    assert moved[1] > 0 and moved[2] > 0 and moved[1] == pytest.approx(moved[2])  # 12 is half way
    assert moved[0] == moved[3] == moved[4] == 0.0
    cost = OnlineCost(CURVE, shape_rate=0.1, first_level=False)
    cost.observe(10, 2 * CURVE.at(10))
    assert cost.log_shape[1] == pytest.approx(3 * cost.log_shape[2])  # 10: three quarters to 8
    cost.observe(100, 2 * CURVE.at(100))  # past the last knot: the last knot learns it
    assert cost.log_shape[4] > 0


def test_an_outlier_moves_a_knot_a_little_and_a_run_of_them_no_further_than_the_bound():
    cost = OnlineCost(CURVE, shape_rate=0.1, first_level=False)
    cost.observe(32, 1000 * CURVE.at(32))
    assert 0 < cost.log_shape[3] <= np.log(SHAPE_BOUND)
    for _ in range(1000):
        cost.observe(32, 1000 * CURVE.at(32))
        cost.observe(64, 1e-6)
    assert cost.shape(32) == pytest.approx(SHAPE_BOUND) and cost.shape(64) == pytest.approx(1 / SHAPE_BOUND)


def test_at_rate_zero_only_the_scale_moves_and_no_draft_length_changes():
    cost = OnlineCost(CURVE)
    expected = np.array([0.0] + [min(k, 20) * 0.9 for k in range(1, 65)])
    before = best_draft_length(expected, cost.cost)
    for _ in range(50):
        cost.observe(64, 3 * true_cost(64))
    assert not cost.log_shape.any() and cost.scale > 2
    assert best_draft_length(expected, cost.cost) == before


def test_a_learned_shape_changes_the_drafts_the_policy_chooses():
    """Drafts judged all-accepted up to 20 tokens: under the calibration 16+ tokens are worth it; once the passes
    say long passes cost three times the calibration, shorter drafts win."""
    expected = np.array([0.0] + [min(k, 20) * 0.95 for k in range(1, 65)])
    cost = OnlineCost(CURVE, shape_rate=0.2)
    before = best_draft_length(expected, cost.cost)
    for _ in range(200):
        for k in (0, 8, 16, 32):
            cost.observe(k, CURVE.at(k) * (3.0 if k >= 16 else 1.0))
    assert before >= 16 and best_draft_length(expected, cost.cost) < 16


def test_shape_rate_is_checked_and_reaches_the_cost_model():
    assert AdaptiveProposer(AdaptiveConfig(shape_rate=0.2), cost=CURVE).cost.shape_rate == 0.2
    given = OnlineCost(CURVE, shape_rate=0.3)
    assert AdaptiveProposer(AdaptiveConfig(shape_rate=0.2), cost=given).cost is given  # the caller's own
    for bad, error in (
        (1.0, ValueError),
        (-0.1, ValueError),
        ("0.1", TypeError),
        (True, TypeError),
        (float("nan"), ValueError),
    ):
        with pytest.raises(error, match="shape_rate"):
            AdaptiveConfig(shape_rate=bad)
        with pytest.raises(error, match="shape_rate"):
            OnlineCost(CURVE, shape_rate=bad)


def _loop_passes_made(monkeypatch, models=()):
    """This process's generation loops as if they had made passes with ``models`` alone."""
    import weakref

    from draftless.integration import pass_timing

    monkeypatch.setattr(pass_timing, "_PASSED", weakref.WeakSet(models))


def test_the_loop_tells_each_pass_and_records_it_for_replay(monkeypatch):
    import torch
    from tiny_models import repetitive_prompt, tiny_model

    from draftless.integration import SpeculativeGenerator

    model = tiny_model("llama")
    _loop_passes_made(monkeypatch, [model])
    ids = repetitive_prompt(30)
    proposer = AdaptiveProposer(cost=CostCurve((0, 8, 64), (1.0, 1.0, 1.0)))  # flat: far from a CPU's shape
    gen = SpeculativeGenerator(model, proposer=proposer)
    out = gen.generate(ids, max_new_tokens=40, eos_token_id=None)
    assert torch.equal(out, model.generate(ids, do_sample=False, max_new_tokens=40, eos_token_id=None))
    stats = gen.last_stats
    assert len(stats.pass_seconds) == stats.passes and min(stats.pass_seconds) > 0
    assert proposer.cost.observed == stats.passes
    assert proposer.cost.log_shape.any()  # the default rate learned from the passes the loop told it


def test_a_model_first_loop_pass_in_a_process_teaches_the_cost_model_nothing(monkeypatch):
    # its one-time work made it slow: with ``first_level`` it set the scale too high, and every short process
    # lowered the multipliers of the lengths it drafted next, kept on disk, a little further
    from tiny_models import repetitive_prompt, tiny_model

    from draftless.integration import SpeculativeGenerator, pass_timing

    model, other = tiny_model("llama"), tiny_model("llama")
    _loop_passes_made(monkeypatch)
    assert pass_timing.seconds_to_learn_from(0.5, other) == 0.0 and pass_timing.seconds_to_learn_from(0.5, other) == 0.5
    _loop_passes_made(monkeypatch, [other])  # another model's passes: this one's first is still its first
    ids = repetitive_prompt(30)
    proposer = AdaptiveProposer(cost=CostCurve((0, 8, 64), (1.0, 1.0, 1.0)))
    gen = SpeculativeGenerator(model, proposer=proposer)
    first, later = [], []
    for stats in (first, later):
        gen.generate(ids, max_new_tokens=24, eos_token_id=None)
        stats.append(gen.last_stats)
    seconds = first[0].pass_seconds
    assert seconds[0] == 0.0 and min(seconds[1:]) > 0  # told (and recorded for replay) as nothing
    assert first[0].verify_s > sum(seconds)  # the time itself still counted where the run's time is
    assert min(later[0].pass_seconds) > 0  # the process's first pass only, not each generate's
    assert proposer.cost.observed == first[0].passes - 1 + later[0].passes
    assert pass_timing.seconds_to_learn_from(0.5, tiny_model("llama")) == 0.0  # a model that made none: its first


def test_the_first_pass_sets_the_level_so_a_curve_off_by_a_factor_learns_no_shape():
    for factor in (0.5, 2.0):
        cost = OnlineCost(CURVE, shape_rate=0.1)
        for _ in range(30):
            for k in (8, 32):  # no plain steps to pin the level
                cost.observe(k, factor * CURVE.at(k))
        assert cost.scale == pytest.approx(factor) and np.allclose(cost.log_shape, 0.0)
        averaged = OnlineCost(CURVE, shape_rate=0.1, first_level=False)
        for _ in range(30):
            for k in (8, 32):
                averaged.observe(k, factor * CURVE.at(k))
        assert abs(averaged.log_shape[1]) > 0.05  # averaged up from 1, the knots took part of the level
    assert AdaptiveProposer(AdaptiveConfig(first_level=False), cost=CURVE).cost.first_level is False
    with pytest.raises(TypeError, match="first_level"):
        AdaptiveConfig(first_level="yes")


def test_at_knots_only_a_pass_between_knots_moves_the_scale_but_no_knot():
    # the loop's stairs: a pass at 12 (between the knots 8 and 16) costs more than the line between them says
    cost = OnlineCost(CURVE, shape_rate=0.1, first_level=False, knots_only=True)
    cost.observe(12, 1.3 * CURVE.at(12))
    assert not cost.log_shape.any() and cost.scale > 1  # the level followed, the shape not
    cost.observe(16, 1.3 * CURVE.at(16))
    assert cost.log_shape[2] > 0 and cost.log_shape[1] == cost.log_shape[3] == 0.0  # a knot's own pass
    everywhere = OnlineCost(CURVE, shape_rate=0.1, first_level=False)
    everywhere.observe(12, 1.3 * CURVE.at(12))
    assert everywhere.log_shape[1] > 0 and everywhere.log_shape[2] > 0
    # the config reaches the cost model the proposer builds (off by default: replayed, it recovers less of a
    # stale shape's loss than learning from every pass)
    assert AdaptiveProposer(cost=CURVE).cost.knots_only is False
    assert AdaptiveProposer(AdaptiveConfig(shape_at_knots=True), cost=CURVE).cost.knots_only is True
    with pytest.raises(TypeError, match="shape_at_knots"):
        AdaptiveConfig(shape_at_knots=1)

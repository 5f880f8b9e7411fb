"""The cost of a pass whose output layer is computed in two stages (``OnlineCost.staged``): against a plain-Python
reference, its choice (staged where a draft is likely to fail early and the output layer is dear, whole where it
holds), what a staged pass teaches the curve, and the proposer's ``first_rows``."""

import numpy as np
import pytest

from draftless.lookup import AdaptiveConfig, AdaptiveProposer
from draftless.lookup.acceptance_model import expected_accepted
from draftless.lookup.cost_model import STAGE_ROWS, CostCurve, OnlineCost, check_head_rows, head_products

# a pass like Gemma 3 270M's on a 2-core CPU: the output layer most of it, dearer per row than the body
CURVE = CostCurve((0, 8, 16, 32, 64), (1.0, 2.5, 3.5, 5.0, 8.0), (0.5, 1.6, 2.3, 3.2, 5.0))


def reference_staged(cost, expected):
    """Per k, the cheapest of the whole pass and every first stage of ``STAGE_ROWS`` rows up to k, by loops."""
    costs, rows = [], []
    for k in range(len(expected)):
        best, best_rows = cost.cost(k), k + 1
        level = cost.cost(k) / CURVE.at(k)
        for f in STAGE_ROWS:
            if f > k:
                continue
            survive = expected[f] - expected[f - 1]  # P(the first f draft tokens accepted)
            body = CURVE.at(k) - CURVE.head_at(k)
            second = max(CURVE.head_at(k - f), CURVE.head_at(k) - CURVE.head_at(f - 1) + CURVE.head_at(0))
            staged = level * (body + CURVE.head_at(f - 1) + survive * second)
            if staged < best:
                best, best_rows = staged, f
        costs.append(best)
        rows.append(best_rows)
    return np.array(costs), np.array(rows)


@pytest.mark.parametrize("seed", range(6))
def test_staged_cost_matches_the_reference(seed):
    rng = np.random.default_rng(seed)
    cost = OnlineCost(CURVE, shape_rate=0.1, staged=True)
    for k in rng.integers(0, 64, 20):  # a learned scale and shape, which the staged cost follows
        cost.observe(int(k), float(CURVE.at(k) * rng.uniform(0.8, 1.6)))
    expected = expected_accepted(rng.uniform(0.0, 1.0, 64) ** rng.uniform(0.2, 3.0))
    got, rows = cost.staged(expected)
    want, want_rows = reference_staged(cost, expected)
    assert np.allclose(got, want) and np.array_equal(rows, want_rows)
    assert np.all(got <= cost.cost(np.arange(65)) + 1e-12)  # never dearer than the whole pass


def test_a_draft_that_holds_is_verified_whole_and_one_likely_to_fail_in_stages():
    cost = OnlineCost(CURVE, staged=True)
    held, rows = cost.staged(expected_accepted(np.ones(64)))
    assert np.array_equal(rows, np.arange(65) + 1) and np.allclose(held, cost.cost(np.arange(65)))
    doubtful, rows = cost.staged(expected_accepted(np.full(64, 0.3)))
    assert np.all(rows[8:] < np.arange(65)[8:] + 1) and np.all(doubtful[8:] < cost.cost(np.arange(8, 65)))
    # a curve without the output layer's times, or staging off: every pass whole
    for plain in (OnlineCost(CostCurve(CURVE.ks, CURVE.seconds), staged=True), OnlineCost(CURVE)):
        got, rows = plain.staged(expected_accepted(np.full(64, 0.3)))
        assert np.array_equal(rows, np.arange(65) + 1) and np.allclose(got, plain.cost(np.arange(65)))


def test_head_products_and_what_a_staged_pass_costs():
    assert head_products(10, None, 3) == (11,) and head_products(10, 11, 0) == (11,)
    assert head_products(10, 4, 3) == (4,) and head_products(10, 4, 4) == (4, 7) and head_products(10, 4, 10) == (4, 7)
    assert CURVE.staged_at(32, (33,)) == CURVE.at(32)
    assert CURVE.staged_at(32, (8,)) == pytest.approx(5.0 - 3.2 + CURVE.head_at(7))
    # the second stage: at least the whole product past the first stage's rows and a one-row product
    second = max(CURVE.head_at(24), 3.2 - CURVE.head_at(7) + CURVE.head_at(0))
    assert CURVE.staged_at(32, (8, 25)) == pytest.approx(5.0 - 3.2 + CURVE.head_at(7) + second)
    assert CURVE.staged_at(32, (8, 25)) > CURVE.at(32)
    for bad, error in (
        ((), ValueError),
        ((0,), ValueError),
        ((20, 20), ValueError),
        ("8", TypeError),
        ((2.0,), ValueError),
    ):
        with pytest.raises(error, match="head_rows"):
            check_head_rows(bad, 32)


def test_a_staged_pass_teaches_the_curve_as_the_whole_pass_would():
    staged, whole = OnlineCost(CURVE, shape_rate=0.1, staged=True), OnlineCost(CURVE, shape_rate=0.1)
    for _ in range(3):  # passes 1.4 times the calibration, one of them staged
        staged.observe(32, 1.4 * CURVE.staged_at(32, (8,)), (8,))
        whole.observe(32, 1.4 * CURVE.at(32))
    assert staged.scale == pytest.approx(whole.scale) and np.allclose(staged.log_shape, whole.log_shape)


def test_the_output_layer_times_are_validated_and_scaled_with_the_curve():
    for head, error in (
        ((0.5, 0.6), ValueError),
        ((0.5, 2.5, 2.3, 3.2, 5.0), ValueError),
        ((0.5, 1.6, 2.3, 3.2, "5"), TypeError),
        ((0.0, 1.6, 2.3, 3.2, 5.0), ValueError),
    ):
        with pytest.raises(error, match="head"):
            CostCurve(CURVE.ks, CURVE.seconds, head)
    with pytest.raises(ValueError, match="head"):
        CostCurve(CURVE.ks, CURVE.seconds).head_at(3)
    relative = CostCurve(CURVE.ks, tuple(2 * s for s in CURVE.seconds), tuple(2 * h for h in CURVE.head)).relative()
    assert relative == CURVE


def test_the_proposer_asks_for_stages_on_a_doubtful_draft_only():
    text = np.array(list(range(5, 21)) * 3 + [5, 6], dtype=np.int64)  # a copy to continue
    drafts = {}
    for rate, staged_head in ((0.9, True), (0.9, False), (0.999, True)):  # off by default (by replay)
        proposer = AdaptiveProposer(AdaptiveConfig(prior=(rate,) * 12), cost=CURVE, staged_head=staged_head)
        proposer.reset(text)
        drafts[rate, staged_head] = proposer.propose(64).size, proposer.first_rows
    size, first_rows = drafts[0.9, True]  # one token in ten fails: the first stage checks the likely part
    assert first_rows is not None and 1 <= first_rows < size
    assert drafts[0.9, False][1] is None and drafts[0.9, False][0] <= size  # whole passes: no longer a draft
    assert drafts[0.999, True] == (64, None)  # a draft that holds: one product

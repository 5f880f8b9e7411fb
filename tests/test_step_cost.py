"""The step cost model (``lookup.step_cost``): rows and draft tokens priced apart from the steps it times, its prior
where they did not vary, and a prior shaped like a calibrated curve."""

import numpy as np
import pytest

from draftless.lookup.step_cost import StepCost


def test_step_cost_learns_rows_and_drafts_apart():
    rng = np.random.default_rng(0)
    cost = StepCost()
    for _ in range(400):
        rows, drafts = int(rng.integers(1, 16)), int(rng.integers(0, 120))
        cost.observe(rows, drafts, 0.05 + 0.03 * rows + 0.002 * drafts + rng.normal(0, 0.001))
    a, b_row, b_draft = cost.coefficients()
    assert a == pytest.approx(0.05, rel=0.1)
    assert b_row == pytest.approx(0.03, rel=0.05) and b_draft == pytest.approx(0.002, rel=0.1)


def test_a_row_dear_engine_does_not_price_drafts_at_the_rows_rate():
    """Requests that come and go move the step's time by a row's price; drafts by theirs. One price a position
    would mix them; two keep a draft token cheap where it is."""
    rng = np.random.default_rng(1)
    cost = StepCost()
    for _ in range(300):
        rows = int(rng.integers(4, 9))
        drafts = int(rng.integers(0, 3)) * rows
        cost.observe(rows, drafts, 0.16 + 0.037 * rows + 0.005 * drafts)
    assert cost.coefficients()[2] == pytest.approx(0.005, rel=0.3)  # a row costs 0.037: far from it


def test_step_cost_keeps_its_prior_shape_where_only_one_width_was_timed():
    cost = StepCost(prior_slope=1 / 16)
    for _ in range(200):
        cost.observe(8, 0, 0.3)
    assert cost(8, 0) == pytest.approx(0.3)
    a, b_row, b_draft = cost.coefficients()
    one = a + b_row  # a one-position step at the level learned
    assert b_draft / one == pytest.approx(1 / 16, rel=0.05)  # the slope still the prior's share of it
    cost.observe(0, 0, 1.0)
    cost.observe(4, 0, -1.0)  # untimed steps are ignored
    assert cost(8, 0) == pytest.approx(0.3)


def test_before_any_step_a_one_position_step_costs_one():
    cost = StepCost(prior_slope=0.25)
    assert cost(1, 0) == pytest.approx(1.0) and cost(1, 4) == pytest.approx(2.0)


@pytest.mark.parametrize(
    "kwargs", [{"prior_slope": -1}, {"prior_weight": float("inf")}, {"memory": 0}, {"memory": 1.5}]
)
def test_step_cost_refuses_bad_settings(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        StepCost(**kwargs)


def test_a_step_cost_shaped_like_a_curve_takes_its_slope_not_its_level():
    curve = lambda k: 0.05 + 0.001 * np.asarray(k, dtype=float)  # noqa: E731 (a 50 ms pass, 1 ms a draft token)
    cost = StepCost.shaped_like(curve)
    assert cost.prior_slope == pytest.approx(0.001 / 0.05)
    for _ in range(50):  # a batch's plain passes over long contexts: six times the curve's one-row pass
        cost.observe(8, 0, 0.3)
    assert cost(8, 0) == pytest.approx(0.3)
    assert cost(8, 24) > 0.3 * 1.3  # wider passes priced from the level the batch showed


def test_a_batch_that_never_timed_wide_passes_does_not_find_them_cheap():
    """Unseen widths are priced by the line through the seen ones: no width looks cheaper than plain decoding
    because it was never timed."""
    cost = StepCost.shaped_like(lambda k: 0.05 + 0.0005 * np.asarray(k, dtype=float))
    for _ in range(20):
        cost.observe(8, 0, 0.33)
    drafts = np.arange(0, 400, 8)
    assert np.all(np.diff(cost(8, drafts)) > 0) and cost(8, 0) == pytest.approx(0.33)


@pytest.mark.parametrize(
    ("curve", "span", "error"),
    [
        (None, 64, TypeError),
        (lambda k: np.zeros(2), 64, ValueError),
        (lambda k: np.array([0.05, np.inf]), 64, ValueError),
        (lambda k: np.ones(2), 0, ValueError),
    ],
)
def test_a_shaped_step_cost_refuses_bad_curves(curve, span, error):
    with pytest.raises(error, match="curve_at|span"):
        StepCost.shaped_like(curve, span=span)

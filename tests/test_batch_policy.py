"""The batch's draft-length choices (``lookup.batch_policy``): the ragged choice against an exhaustive search,
and the step cost model learning a linear cost from the steps it times."""

import itertools

import numpy as np
import pytest

from draftless.lookup.batch_policy import StepCost, common_width, ragged_lengths


def naive_ragged(expected, cost):
    """Every combination of draft lengths, the first best in order of total length."""
    best, best_value = None, -np.inf
    for ks in sorted(itertools.product(*(range(e.size) for e in expected)), key=sum):
        tokens = sum(1 + e[k] for e, k in zip(expected, ks))
        value = tokens / cost(len(expected) + sum(ks))
        if value > best_value + 1e-12:
            best, best_value = ks, value
    return best_value, best


def concave_rows(rng, rows):
    out = []
    for _ in range(rows):
        survival = np.cumprod(rng.uniform(0.2, 1.0, size=int(rng.integers(0, 6))))
        out.append(np.concatenate([[0.0], np.cumsum(survival)]))
    return out


@pytest.mark.parametrize("seed", range(30))
def test_ragged_lengths_match_the_exhaustive_search(seed):
    rng = np.random.default_rng(seed)
    expected = concave_rows(rng, int(rng.integers(1, 4)))
    slope = rng.uniform(0.0, 0.5)
    cost = lambda positions: 1.0 + slope * np.asarray(positions, dtype=np.float64)
    ks = ragged_lengths(expected, cost)
    value = sum(1 + e[k] for e, k in zip(expected, ks)) / cost(len(expected) + sum(ks))
    assert value == pytest.approx(naive_ragged(expected, cost)[0], rel=1e-9)
    assert all(0 <= k < e.size for e, k in zip(expected, ks))


def test_free_positions_draft_everything_and_dear_ones_nothing():
    expected = [np.array([0.0, 0.9, 1.7]), np.array([0.0, 0.5]), np.array([0.0])]
    assert ragged_lengths(expected, lambda n: np.ones_like(n, dtype=float)).tolist() == [2, 1, 0]
    assert ragged_lengths(expected, lambda n: np.asarray(n, dtype=float)).tolist() == [0, 0, 0]
    assert common_width(expected, lambda n: np.asarray(n, dtype=float)) == 1  # the padded choice agrees


def test_ragged_lengths_refuse_bad_rows():
    with pytest.raises(ValueError, match="expected"):
        ragged_lengths([], lambda n: n)
    with pytest.raises(ValueError, match=r"expected\[1\]"):
        ragged_lengths([np.zeros(2), np.zeros((2, 2))], lambda n: n)


def test_step_cost_learns_a_linear_cost():
    rng = np.random.default_rng(0)
    cost = StepCost()
    for _ in range(400):
        n = int(rng.integers(1, 120))
        cost.observe(n, 0.05 + 0.002 * n + rng.normal(0, 0.001))
    a, b = cost.coefficients()
    assert a == pytest.approx(0.05, rel=0.1) and b == pytest.approx(0.002, rel=0.1)


def test_step_cost_keeps_its_prior_shape_where_only_one_width_was_timed():
    cost = StepCost(prior_slope=1 / 16)
    for _ in range(200):
        cost.observe(8, 0.3)
    assert cost(np.array([8]))[0] == pytest.approx(0.3)
    a, b = cost.coefficients()
    assert b / a == pytest.approx(1 / 16, rel=0.05)  # the level learned, the slope still the prior's share
    cost.observe(0, 1.0)
    cost.observe(4, -1.0)  # untimed steps are ignored
    assert cost(np.array([8]))[0] == pytest.approx(0.3)


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
        cost.observe(8, 0.3)
    a, b = cost.coefficients()
    assert cost(np.array([8]))[0] == pytest.approx(0.3)
    assert b / a == pytest.approx(0.02, rel=0.05)  # wider passes priced from the level the batch showed
    assert cost(np.array([32]))[0] > 0.3 * 1.3


def test_a_batch_that_never_timed_wide_passes_does_not_find_them_cheap():
    """Unseen widths are priced by the line through the seen ones: no width looks cheaper than plain decoding
    because it was never timed."""
    cost = StepCost.shaped_like(lambda k: 0.05 + 0.0005 * np.asarray(k, dtype=float))
    for _ in range(20):
        cost.observe(8, 0.33)
    widths = np.arange(8, 400, 8)
    assert np.all(np.diff(cost(widths)) > 0) and cost(widths)[0] == pytest.approx(0.33)


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

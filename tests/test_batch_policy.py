"""The batch's draft-length choices (``lookup.batch_policy``): the ragged choice against an exhaustive search, the
padded one at its extremes."""

import itertools

import numpy as np
import pytest

from draftless.lookup.batch_policy import common_width, ragged_lengths


def naive_ragged(expected, cost):
    """Every combination of draft lengths, the first best in order of total length."""
    best, best_value = None, -np.inf
    for ks in sorted(itertools.product(*(range(e.size) for e in expected)), key=sum):
        tokens = sum(1 + e[k] for e, k in zip(expected, ks))
        value = tokens / cost(len(expected), sum(ks))
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
    row_price = rng.uniform(0.0, 0.5)
    cost = lambda rows, drafts: 1.0 + row_price * rows + slope * np.asarray(drafts, dtype=np.float64)  # noqa: E731
    ks = ragged_lengths(expected, cost)
    value = sum(1 + e[k] for e, k in zip(expected, ks)) / cost(len(expected), sum(ks))
    assert value == pytest.approx(naive_ragged(expected, cost)[0], rel=1e-9)
    assert all(0 <= k < e.size for e, k in zip(expected, ks))


def test_free_positions_draft_everything_and_dear_ones_nothing():
    expected = [np.array([0.0, 0.9, 1.7]), np.array([0.0, 0.5]), np.array([0.0])]
    free = lambda rows, drafts: np.ones_like(drafts, dtype=float)  # noqa: E731
    dear = lambda rows, drafts: rows + np.asarray(drafts, dtype=float)  # noqa: E731 (a draft token costs a row)
    assert ragged_lengths(expected, free).tolist() == [2, 1, 0]
    assert ragged_lengths(expected, dear).tolist() == [0, 0, 0]
    assert common_width(expected, dear) == 1  # the padded choice agrees
    assert common_width(expected, free) == 3


def test_ragged_lengths_refuse_bad_rows():
    with pytest.raises(ValueError, match="expected"):
        ragged_lengths([], lambda rows, drafts: drafts)
    with pytest.raises(ValueError, match=r"expected\[1\]"):
        ragged_lengths([np.zeros(2), np.zeros((2, 2))], lambda rows, drafts: drafts)

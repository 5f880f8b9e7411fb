"""The cost of one verification step over a batch, learned from the steps timed: ``a + b_row * rows + b_draft *
drafts``, where ``drafts`` is the positions past one a row.

Rows and draft positions are priced apart because they cost apart: a serving engine's step pays per request for
scheduling, sampling and bookkeeping that a draft token does not add (vLLM's CPU build at 8 requests: about 37 ms
a row against 3-10 ms a draft token), so one price per position would price drafts at the rows' rate and draft too
little.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


class StepCost:
    """Seconds of a step over ``rows`` rows carrying ``drafts`` draft positions in all, ``a + b_row * rows + b_draft
    * drafts``, learned from the steps it times.

    A step is measured only as a whole, and a slope shows only where its feature varied (rows as requests come and
    go, drafts as the policy drafts). So both slopes are a ridge regression pulled towards ``prior_slope`` times the
    level (a position costing that share of a one-position step) with the weight of ``prior_weight`` steps, spread
    over one row for the rows' and over ``prior_spread`` positions for the drafts'; the evidence decays by
    ``memory`` a step, so the model follows a machine that gets busier or quieter.

    Invariant: ``count, mean_x, mean_s, cov_xx, cov_xs`` are the decayed weight, the means of the features (rows,
    drafts) and seconds, the features' covariance and their covariance with the seconds, over the timed steps;
    ``__call__`` is positive and non-decreasing in both features.

    >>> cost = StepCost()
    >>> for rows, drafts in [(8, 0), (7, 0), (8, 16), (6, 30), (8, 40)] * 20:
    ...     cost.observe(rows, drafts, 0.16 + 0.037 * rows + 0.005 * drafts)
    >>> round(float(cost(8, 40) - cost(8, 0)), 1)       # 40 draft tokens priced near their own rate, not a row's
    0.2
    """

    def __init__(
        self, prior_slope: float = 1 / 32, prior_weight: float = 2.0, prior_spread: float = 16.0, memory: float = 0.98
    ) -> None:
        for name, value in (
            ("prior_slope", prior_slope),
            ("prior_weight", prior_weight),
            ("prior_spread", prior_spread),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < np.inf:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if isinstance(memory, bool) or not isinstance(memory, (int, float)) or not 0 < memory <= 1:
            raise ValueError(f"memory must be in (0, 1], got {memory!r}")
        self.prior_slope, self.prior_weight = float(prior_slope), float(prior_weight)
        self.prior_spread, self.memory = float(prior_spread), float(memory)
        self.count = self.mean_s = 0.0
        self.mean_x = np.zeros(2)
        self.cov_xx = np.zeros((2, 2))
        self.cov_xs = np.zeros(2)

    @classmethod
    def shaped_like(cls, curve_at: Callable[[np.ndarray], np.ndarray], span: int = 64) -> StepCost:
        """A ``StepCost`` whose prior slope is that of a calibrated single-row curve (``curve_at(k)``: seconds of a
        pass with k draft tokens): what ``span`` more positions add to a one-position pass, per position, as a share
        of it. Only the shape is borrowed; the level comes from the passes observed, since a batch's pass over long
        contexts costs several times what one short row's does."""
        if not callable(curve_at):
            raise TypeError(f"curve_at must be callable, got {type(curve_at).__name__}")
        if isinstance(span, bool) or not isinstance(span, int) or span < 1:
            raise ValueError(f"span must be an int >= 1, got {span!r}")
        first, last = (float(x) for x in np.asarray(curve_at(np.array([0, span])), dtype=np.float64))
        if not 0 < first < np.inf or not 0 <= last < np.inf:
            raise ValueError(f"curve_at must give finite positive seconds, got {first} and {last}")
        return cls(prior_slope=max(last - first, 0.0) / (span * first))

    def coefficients(self) -> tuple[float, float, float]:
        """``(a, b_row, b_draft)``; before any step, a one-position step costs 1 (the unit cancels out of every
        choice)."""
        if self.count == 0:
            return max(1.0 - self.prior_slope, 1e-3), self.prior_slope, self.prior_slope
        # the prior's one-position step at the level seen, and its price of a position
        level = self.mean_s / (1.0 + self.prior_slope * (self.mean_x.sum() - 1.0))
        pull = self.prior_weight * np.array([1.0, self.prior_spread**2])
        prior = np.full(2, self.prior_slope * level)
        slopes = np.linalg.solve(self.count * self.cov_xx + np.diag(pull), self.count * self.cov_xs + pull * prior)
        slopes = np.maximum(slopes, 0.0)
        a = max(self.mean_s - float(slopes @ self.mean_x), 1e-3 * self.mean_s)
        return a, float(slopes[0]), float(slopes[1])

    def __call__(self, rows, drafts) -> np.ndarray:
        """Seconds of steps over ``rows`` rows carrying ``drafts`` draft positions (numbers or arrays)."""
        a, b_row, b_draft = self.coefficients()
        return a + b_row * np.asarray(rows, dtype=np.float64) + b_draft * np.asarray(drafts, dtype=np.float64)

    def observe(self, rows: int, drafts: int, seconds: float) -> None:
        """A step over ``rows`` rows carrying ``drafts`` draft positions took ``seconds`` (no rows, or 0 seconds or
        less: not timed, ignored)."""
        if rows < 1 or drafts < 0 or not seconds > 0:
            return
        count = self.memory * self.count + 1.0
        share = 1.0 / count
        dx = np.array([rows, drafts], dtype=np.float64) - self.mean_x
        ds = seconds - self.mean_s
        self.mean_x += share * dx
        self.mean_s += share * ds
        # Welford's update, the old moments decayed with their weight
        self.cov_xx = (1 - share) * (self.cov_xx + share * np.outer(dx, dx))
        self.cov_xs = (1 - share) * (self.cov_xs + share * dx * ds)
        self.count = count

"""Draft lengths for a batch: one verification pass carries every row's draft, padded to a common width.

A pass over ``B`` rows of width ``w`` (each row's last token, then up to ``w - 1`` draft tokens) computes
``B * w`` token positions whatever the drafts hold, so its cost is that of ``B * w`` positions in all
(``StepCost``: a line learned from the passes timed, shaped like the calibrated curve until they show its slope),
and within that width every row may as well draft as far as its continuation goes. The batch then chooses the
width that maximises its expected tokens per second,

    w* = argmax_w  sum_r (1 + E_r[accepted | min(w - 1, h_r)]) / cost(B * w),   w = 1 .. 1 + max_r h_r,

where ``E_r`` is row r's expected accepted tokens (``AdaptiveProposer.offer``) and ``h_r`` how far its draft goes.
w = 1 is plain batched decoding, chosen wherever no draft pays for the positions it adds to every row: on a CPU a
pass's cost grows with its positions, so the wider the batch the shorter its drafts.

>>> flat = lambda positions: 1.0 + 0.0 * positions      # an accelerator far from saturation: drafting is free
>>> common_width([np.array([0.0, 0.9, 1.7]), np.array([0.0])], flat)
3
>>> linear = lambda positions: positions / 2.0           # every position costs as much as the next
>>> common_width([np.array([0.0, 0.9, 1.7]), np.array([0.0])], linear)
1
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def common_width(expected: Sequence[np.ndarray], cost: Callable[[np.ndarray], np.ndarray]) -> int:
    """The pass width ``w`` (1 + the longest draft any row carries) that maximises the batch's expected tokens per
    unit of cost. ``expected[r][k]`` is row r's E[accepted | k draft tokens] for k = 0 .. its draft's length
    (``expected[r][0] == 0``); ``cost(positions)`` the seconds (or any unit) of a pass over that many positions in
    all, for an array of them."""
    if not expected:
        raise ValueError("expected must hold one row at least")
    rows = len(expected)
    widths = np.arange(1, 1 + max(int(np.size(e)) for e in expected))
    gained = np.zeros(widths.size)
    for e in expected:  # row r gains E_r at min(w - 1, h_r): a width past its draft adds nothing to it
        e = np.asarray(e, dtype=np.float64)
        gained += 1.0 + e[np.minimum(widths - 1, e.size - 1)]
    value = gained / np.asarray(cost(rows * widths), dtype=np.float64)
    return int(widths[int(np.argmax(value))])  # the narrowest of equals


def ragged_lengths(expected: Sequence[np.ndarray], cost: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Each row's draft length for a pass that carries drafts of different lengths (an engine that packs rows
    without padding, as vLLM does): ``k`` maximising

        sum_r (1 + E_r[k_r]) / cost(R + sum_r k_r),

    where ``expected[r][k]`` = row r's E[accepted | k draft tokens] (``expected[r][0] == 0``) and ``cost(positions)``
    the seconds of a pass over that many positions in all. For a fixed total the best split takes the largest
    marginal gains ``E_r[j] - E_r[j - 1]`` (a draft's j-th token counts only if the j - 1 before it held, so the
    gains fall along a row: taken as their running minimum, they keep a row's tokens in order); the total is then
    the one worth most tokens per second. All zeros: plain decoding.

    >>> linear = lambda positions: 1.0 + positions / 8.0          # each position costs an eighth of a plain step
    >>> ragged_lengths([np.array([0.0, 0.95, 1.85, 2.1]), np.array([0.0, 0.1])], linear).tolist()
    [2, 0]
    """
    if not expected:
        raise ValueError("expected must hold one row at least")
    rows, gains = [], []
    for r, e in enumerate(expected):
        e = np.asarray(e, dtype=np.float64)
        if e.ndim != 1 or e.size < 1:
            raise ValueError(f"expected[{r}] must be a 1-D array starting at k = 0, got shape {e.shape}")
        gain = np.minimum.accumulate(np.diff(e)) if e.size > 1 else np.empty(0)
        rows.append(np.full(gain.size, r))
        gains.append(gain)
    gain, row = np.concatenate(gains), np.concatenate(rows)
    order = np.argsort(-gain, kind="stable")  # stable: a row's equal gains stay in their order
    n_rows = len(expected)
    tokens = n_rows + np.concatenate([[0.0], np.cumsum(gain[order])])
    value = tokens / np.asarray(cost(n_rows + np.arange(tokens.size)), dtype=np.float64)
    total = int(np.argmax(value))  # the fewest of equals
    return np.bincount(row[order[:total]], minlength=n_rows)


class StepCost:
    """Seconds of an engine step over ``n`` positions in all, ``a + b * n``, learned from the steps it times.

    A serving engine's step (scheduling, one forward pass over every row's positions, sampling) is measured only
    as a whole, and only where the rows' drafts gave it positions past one a row does its slope show. So the slope
    is a ridge regression pulled towards ``prior_slope`` times the level (a position costing that share of a
    one-position step) with the weight of ``prior_weight`` steps spread over ``prior_spread`` positions; the
    evidence decays by ``memory`` a step, so the model follows a machine that gets busier or quieter.

    Invariant: ``count, mean_n, mean_s, var_n, cov`` are the decayed weight, means, variance and covariance of the
    timed steps' positions and seconds; ``__call__`` is positive and non-decreasing in ``n``.
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
        self.prior_slope, self.prior_weight, self.prior_spread = float(prior_slope), float(prior_weight), prior_spread
        self.memory = float(memory)
        self.count = self.mean_n = self.mean_s = self.var_n = self.cov = 0.0

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

    def coefficients(self) -> tuple[float, float]:
        """``(a, b)``; before any step, a one-position step costs 1 (the unit cancels out of every choice)."""
        if self.count == 0:
            return 1.0, self.prior_slope
        level = self.mean_s / (1.0 + self.prior_slope * self.mean_n)  # the prior's one-position step at this level
        pull = self.prior_weight * self.prior_spread**2
        slope = (self.count * self.cov + pull * self.prior_slope * level) / (self.count * self.var_n + pull)
        slope = max(slope, 0.0)
        return max(self.mean_s - slope * self.mean_n, 1e-3 * self.mean_s), slope

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        a, b = self.coefficients()
        return a + b * np.asarray(positions, dtype=np.float64)

    def observe(self, positions: int, seconds: float) -> None:
        """A step over ``positions`` positions in all took ``seconds`` (0 or less: not timed, ignored)."""
        if positions < 1 or not seconds > 0:
            return
        count = self.memory * self.count + 1.0
        share = 1.0 / count
        dn, ds = positions - self.mean_n, seconds - self.mean_s
        self.mean_n += share * dn
        self.mean_s += share * ds
        # Welford's update, the old moments decayed with their weight
        self.var_n = (1 - share) * (self.var_n + share * dn * dn)
        self.cov = (1 - share) * (self.cov + share * dn * ds)
        self.count = count

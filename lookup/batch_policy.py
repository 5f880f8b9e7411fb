"""Draft lengths for a batch: one verification pass carries every row's draft, padded to a common width.

A pass over ``B`` rows of width ``w`` (each row's last token, then up to ``w - 1`` draft tokens) computes
``B * w`` token positions whatever the drafts hold, so its cost is the cost curve's at ``B * w`` positions in all,
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


class BatchCost:
    """Seconds of a pass over ``n`` positions in all: the calibrated single-row curve at ``n - 1`` draft tokens
    (a pass's products grow with its positions however they are split into rows), times a factor per
    power-of-two band of ``n`` that follows this machine's measured batch passes (``observe``), since attention
    over several rows' contexts and the batch's padding cost what one row's curve does not hold.

    Invariant: ``ratios[b]`` is the running mean (weight ``rate`` for the newest) of measured / curve seconds of the
    passes whose positions fall in band b (``2**b <= n < 2**(b + 1)``), 1 before any; it is clamped to [1/4, 4]."""

    BANDS = 16

    def __init__(self, curve_at: Callable[[np.ndarray], np.ndarray], rate: float = 0.3) -> None:
        if not callable(curve_at):
            raise TypeError(f"curve_at must be callable, got {type(curve_at).__name__}")
        if not 0 < rate <= 1:
            raise ValueError(f"rate must be in (0, 1], got {rate}")
        self.curve_at = curve_at
        self.rate = float(rate)
        self.ratios = np.ones(self.BANDS)

    def _band(self, positions):
        return np.clip(np.floor(np.log2(np.maximum(positions, 1))).astype(np.int64), 0, self.BANDS - 1)

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        positions = np.asarray(positions)
        return np.asarray(self.curve_at(positions - 1), dtype=np.float64) * self.ratios[self._band(positions)]

    def observe(self, positions: int, seconds: float) -> None:
        """A pass over ``positions`` positions in all took ``seconds`` (0 or less: not timed, ignored)."""
        if positions < 1 or not seconds > 0:
            return
        band = int(self._band(np.asarray(positions)))
        measured = seconds / float(self.curve_at(np.asarray(positions - 1)))
        mixed = (1 - self.rate) * self.ratios[band] + self.rate * measured
        self.ratios[band] = float(np.clip(mixed, 0.25, 4.0))

"""Draft lengths for a batch: one verification pass carries every row's draft, padded to a common width.

A pass over ``B`` rows of width ``w`` (each row's last token, then up to ``w - 1`` draft tokens) computes
``B * w`` token positions whatever the drafts hold, so its cost is that of ``B`` rows carrying ``B * (w - 1)`` draft
positions (``step_cost.StepCost``, learned from the passes timed),
and within that width every row may as well draft as far as its continuation goes. The batch then chooses the
width that maximises its expected tokens per second,

    w* = argmax_w  sum_r (1 + E_r[accepted | min(w - 1, h_r)]) / cost(B, B * (w - 1)),   w = 1 .. 1 + max_r h_r,

where ``E_r`` is row r's expected accepted tokens (``AdaptiveProposer.offer``) and ``h_r`` how far its draft goes.
w = 1 is plain batched decoding, chosen wherever no draft pays for the positions it adds to every row: on a CPU a
pass's cost grows with its positions, so the wider the batch the shorter its drafts.

>>> flat = lambda rows, drafts: 1.0 + 0.0 * drafts      # an accelerator far from saturation: drafting is free
>>> common_width([np.array([0.0, 0.9, 1.7]), np.array([0.0])], flat)
3
>>> linear = lambda rows, drafts: (rows + drafts) / 2.0  # every position costs as much as the next
>>> common_width([np.array([0.0, 0.9, 1.7]), np.array([0.0])], linear)
1
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def common_width(expected: Sequence[np.ndarray], cost: Callable[[int, np.ndarray], np.ndarray]) -> int:
    """The pass width ``w`` (1 + the longest draft any row carries) that maximises the batch's expected tokens per
    unit of cost. ``expected[r][k]`` is row r's E[accepted | k draft tokens] for k = 0 .. its draft's length
    (``expected[r][0] == 0``); ``cost(rows, drafts)`` the seconds (or any unit) of a pass over ``rows`` rows carrying
    ``drafts`` draft positions in all, for an array of them."""
    if not expected:
        raise ValueError("expected must hold one row at least")
    rows = len(expected)
    widths = np.arange(1, 1 + max(int(np.size(e)) for e in expected))
    gained = np.zeros(widths.size)
    for e in expected:  # row r gains E_r at min(w - 1, h_r): a width past its draft adds nothing to it
        e = np.asarray(e, dtype=np.float64)
        gained += 1.0 + e[np.minimum(widths - 1, e.size - 1)]
    value = gained / np.asarray(cost(rows, rows * (widths - 1)), dtype=np.float64)
    return int(widths[int(np.argmax(value))])  # the narrowest of equals


def ragged_lengths(expected: Sequence[np.ndarray], cost: Callable[[int, np.ndarray], np.ndarray]) -> np.ndarray:
    """Each row's draft length for a pass that carries drafts of different lengths (an engine that packs rows
    without padding, as vLLM does): ``k`` maximising

        sum_r (1 + E_r[k_r]) / cost(R, sum_r k_r),

    where ``expected[r][k]`` = row r's E[accepted | k draft tokens] (``expected[r][0] == 0``) and
    ``cost(rows, drafts)`` the seconds of a pass over ``rows`` rows carrying ``drafts`` draft tokens. For a fixed
    total the best split takes the largest marginal gains ``E_r[j] - E_r[j - 1]`` (a draft's j-th token counts only
    if the j - 1 before it held, so the gains fall along a row: taken as their running minimum, they keep a row's
    tokens in order); the total is then the one worth most tokens per second. All zeros: plain decoding.

    >>> linear = lambda rows, drafts: 1.0 + drafts / 8.0          # a draft token costs an eighth of a plain step
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
    value = tokens / np.asarray(cost(n_rows, np.arange(tokens.size)), dtype=np.float64)
    total = int(np.argmax(value))  # the fewest of equals
    return np.bincount(row[order[:total]], minlength=n_rows)

"""The calibrated cost curve: seconds of one verification pass as a function of the draft length k, and the row
counts of the output layer's products in a pass that computes it in stages.

``CostCurve`` holds a calibration (measured for the actual model, dtype, device and thread count by
``draftless.integration.calibration``); ``cost_model.OnlineCost`` scales and shapes it by the run's own passes.
"""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class CostCurve:
    """Pass time in seconds at draft lengths ``ks`` (``ks[0] == 0``: a plain decode step), interpolated
    linearly between them and extrapolated with the slope from the last knot at or below half the last length
    to the last: a span wider than one 8-row stair, whose edge (k = 63 to 64) is no trend."""

    ks: tuple
    seconds: tuple
    # the output layer's share of each pass (seconds of the product over the pass's ``1 + k`` rows, within
    # ``seconds``), where the calibration timed it: a pass may then compute the output layer in two stages
    # (``OnlineCost.staged``). Empty where unknown: every pass computes it whole
    head: tuple = ()

    def __post_init__(self):
        if len(self.ks) != len(self.seconds) or len(self.ks) < 2:
            raise ValueError("ks and seconds must have the same length, at least 2")
        if any(isinstance(k, bool) or not isinstance(k, (int, np.integer)) for k in self.ks):
            raise TypeError(f"ks must hold int draft lengths, got {self.ks}")
        if self.ks[0] != 0 or any(b <= a for a, b in zip(self.ks, self.ks[1:])):
            raise ValueError(f"ks must start at 0 and increase, got {self.ks}")
        if any(isinstance(s, bool) or not isinstance(s, (int, float, np.integer, np.floating)) for s in self.seconds):
            raise TypeError(f"seconds must hold numbers, got {self.seconds}")
        if any(not 0 < s < np.inf for s in self.seconds):  # an infinite time would interpolate to NaN
            raise ValueError(f"seconds must be positive and finite, got {self.seconds}")
        if self.head:
            if len(self.head) != len(self.ks):
                raise ValueError(f"head must hold one time per knot ({len(self.ks)}) or none, got {len(self.head)}")
            if any(isinstance(h, bool) or not isinstance(h, (int, float, np.integer, np.floating)) for h in self.head):
                raise TypeError(f"head must hold numbers, got {self.head}")
            if any(not 0 < h < s for h, s in zip(self.head, self.seconds)):
                raise ValueError(f"head must be positive and below each pass's seconds, got {self.head}")

    def at(self, k):
        """c(k) for an int or an array of ints."""
        return self._interpolated(self.seconds, k)

    def head_at(self, k):
        """The output layer's seconds within c(k) (over ``1 + k`` rows), for an int or an array of ints; a
        ValueError where the curve holds no ``head``."""
        if not self.head:
            raise ValueError("this curve holds no output-layer times (head)")
        return self._interpolated(self.head, k)

    def staged_at(self, k, head_rows):
        """The seconds of a pass over ``1 + k`` tokens whose output layer took products over ``head_rows`` rows
        (one or two stages): c(k) less the output layer over ``1 + k`` rows, plus it over the first stage's rows,
        plus for a second stage at least what the whole product costs past the first stage's rows and a one-row
        product (``OnlineCost.staged``); ``c(k)`` where that is one product over all ``1 + k``, or the curve holds no
        ``head``."""
        rows = check_head_rows(head_rows, k)
        if not self.head or rows == (k + 1,):
            return self.at(k)
        whole, first = self.head_at(k), self.head_at(rows[0] - 1)
        seconds = self.at(k) - whole + first
        for later in rows[1:]:
            seconds += max(self.head_at(later - 1), whole - first + self.head_at(0))
        return float(seconds)

    def _interpolated(self, values, k):
        ks = np.asarray(self.ks, dtype=np.float64)
        secs = np.asarray(values, dtype=np.float64)
        k = np.asarray(k, dtype=np.float64)
        base = int(np.searchsorted(ks, ks[-1] / 2, side="right")) - 1  # ks[0] == 0 <= half: base >= 0
        slope = (secs[-1] - secs[base]) / (ks[-1] - ks[base])
        out = np.where(k <= ks[-1], np.interp(k, ks, secs), secs[-1] + slope * (k - ks[-1]))
        return float(out) if out.ndim == 0 else out

    def relative(self):
        """The curve divided by c(0): what a k-token draft costs in plain steps."""
        c0 = self.seconds[0]
        return CostCurve(self.ks, tuple(s / c0 for s in self.seconds), tuple(h / c0 for h in self.head))


FLAT = CostCurve((0, 64), (1.0, 1.0))  # an accelerator far from saturation: drafting is free


def head_products(k, first_rows, accepted):
    """The row counts of the output layer's products in a pass over ``1 + k`` tokens staged at ``first_rows``
    (None or ``1 + k``: one product) in which ``accepted`` draft tokens were accepted: the second stage runs only
    where the first stage's rows accepted every draft token they checked."""
    if first_rows is None or first_rows >= k + 1:
        return (k + 1,)
    return (first_rows, k + 1 - first_rows) if accepted >= first_rows else (first_rows,)


def check_head_rows(head_rows, k):
    """``head_rows`` as a tuple of positive ints that together cover at most the ``1 + k`` rows of a pass."""
    if isinstance(head_rows, (str, bytes)) or not hasattr(head_rows, "__iter__"):
        raise TypeError(f"head_rows must be a sequence of row counts, got {type(head_rows).__name__}")
    rows = tuple(head_rows)
    if not rows or any(isinstance(r, bool) or not isinstance(r, (int, np.integer)) or r < 1 for r in rows):
        raise ValueError(f"head_rows must hold positive row counts, got {rows!r}")
    if sum(rows) > k + 1:
        raise ValueError(f"head_rows {rows!r} cover more than the pass's {k + 1} rows")
    return tuple(int(r) for r in rows)

"""A cost model of the target: seconds of one verification pass as a function of the draft length k.

``CostCurve`` holds a calibration (measured for the actual model, dtype, device and thread count by
``draftless.integration.calibration``); ``OnlineCost`` scales it by what the run's own passes take, so a
machine that gets busier or quieter mid-run moves the whole curve.
"""

from dataclasses import dataclass

import numpy as np

from draftless.index.validation import check_positive_int


@dataclass(frozen=True, slots=True)
class CostCurve:
    """Pass time in seconds at draft lengths ``ks`` (``ks[0] == 0``: a plain decode step), interpolated
    linearly between them and extrapolated with the slope from the last knot at or below half the last length
    to the last: a span wider than one 8-row stair, whose edge (k = 63 to 64) is no trend."""

    ks: tuple
    seconds: tuple

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

    def at(self, k):
        """c(k) for an int or an array of ints."""
        ks = np.asarray(self.ks, dtype=np.float64)
        secs = np.asarray(self.seconds, dtype=np.float64)
        k = np.asarray(k, dtype=np.float64)
        base = int(np.searchsorted(ks, ks[-1] / 2, side="right")) - 1  # ks[0] == 0 <= half: base >= 0
        slope = (secs[-1] - secs[base]) / (ks[-1] - ks[base])
        out = np.where(k <= ks[-1], np.interp(k, ks, secs), secs[-1] + slope * (k - ks[-1]))
        return float(out) if out.ndim == 0 else out

    def relative(self):
        """The curve divided by c(0): what a k-token draft costs in plain steps."""
        return CostCurve(self.ks, tuple(s / self.seconds[0] for s in self.seconds))


FLAT = CostCurve((0, 64), (1.0, 1.0))  # an accelerator far from saturation: drafting is free


class OnlineCost:
    """``c(k) = scale * curve.at(k)``, with ``scale`` an exponential moving average of observed/predicted."""

    def __init__(self, curve, weight=0.2):
        if not isinstance(curve, CostCurve):
            raise TypeError(f"curve must be a CostCurve, got {type(curve).__name__}")
        if not 0 < weight <= 1:
            raise ValueError(f"weight must be in (0, 1], got {weight}")
        self.curve = curve
        self.weight = weight
        self.scale = 1.0

    def observe(self, k, seconds):
        """One pass over ``1 + k`` tokens took ``seconds`` (0, a clock too coarse to see it, is ignored)."""
        k = check_positive_int(k, "k", minimum=0)
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float, np.integer, np.floating)):
            raise TypeError(f"seconds must be a number, got {type(seconds).__name__}")
        if not (np.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"seconds must be finite and >= 0, got {seconds}")
        if seconds > 0:
            ratio = seconds / self.curve.at(k)
            self.scale += self.weight * (ratio - self.scale)

    def cost(self, k):
        return self.scale * self.curve.at(k)

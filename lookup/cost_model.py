"""A cost model of the target: seconds of one verification pass as a function of the draft length k.

``CostCurve`` (``cost_curve``) holds a calibration (measured for the actual model, dtype, device and thread count by
``draftless.integration.calibration``); ``OnlineCost`` scales it by what the run's own passes take, so a
machine that gets busier or quieter mid-run moves the whole curve, and learns its shape from them, so a curve
measured on another host of the same processor, or while the machine was in another state, comes to draft as
the machine now runs.
"""

import numpy as np

from draftless.index.validation import check_positive_int

from .cost_curve import FLAT, CostCurve, check_head_rows, head_products  # noqa: F401 (importable from here)

# a knot's learned multiplier stays within this factor of the calibration either way: one pass stalled by another
# process (a swap, a page fault storm) moves a knot by the learning rate's share of its log-residual only, and
# a run of them can bend the curve by no more than this
SHAPE_BOUND = 3.0
# a knot counts as timed (``OnlineCost.follow_timed``) once its learning has come this far from where it started:
# 1 - (1 - shape_rate) ** evidence, 0.5 after about 6.6 passes at rate 0.1
TIMED_TRUST = 0.5
# the row counts a pass's first stage of the output layer may take (``OnlineCost.staged``): a few tokens that tell
# a draft failing early from one that holds (powers of two, where a CPU's products are cheapest for their rows)
STAGE_ROWS = (1, 2, 4, 8, 16)


class OnlineCost:
    """``c(k) = scale * curve.at(k) * shape(k)``: ``scale`` an exponential moving average of observed/predicted,
    which changes no draft length (a common factor leaves the best k as it is), and ``shape(k)`` a multiplier
    learned at each knot of the curve at ``shape_rate`` (0: none), interpolated between knots, which does. A
    pass's log-residual against the prediction moves the two knots around its length, each by its
    interpolation weight (the knot at k = 0 stays pinned: plain steps are what the scale tracks), so a curve
    measured quickly, or while the machine was in another state, takes the shape of the run's own passes.

    With ``first_level`` the first pass sets the scale outright, and the average takes over from the second: a
    curve measured on a faster or slower host is then off in level for one pass only, not for the several the
    average needs, during which the knots of the lengths drafted would take up part of the level as shape (and
    keep it until plain steps came to pin it). Under a curve off by a factor alone, the learned shape then drafts
    as under the right one.

    With ``knots_only`` the shape is learned from passes at a knot's length only: on a CPU a pass between two
    knots costs more than the line between them says (the 8-row stairs: 27-33 % more in the loop),
    which raises both knots, though passes at them cost what they did (``AdaptiveConfig.shape_at_knots``: off,
    by replay).

    With ``staged`` (and a curve that holds the output layer's times, ``CostCurve.head``), ``staged`` prices a
    pass whose output layer is computed in two stages and says where to split it; a staged pass's time is learned
    from as the whole pass's at the same ratio to the curve (``observe``'s ``head_rows``).

    ``log_shape`` starts the learning from a shape learned before (``learned_shape()``: one log-multiplier per
    knot, the first 0), ``evidence`` with the passes behind each knot (``learned_evidence()``: the interpolation
    weights of the passes that moved it). The integration layer keeps both on disk beside the calibration, so that
    a process does not learn a stale or quickly measured curve's shape over again.

    With ``follow_timed``, the knots above the longest timed one (whose learning has come ``TIMED_TRUST`` of the
    way: 1 - (1 - shape_rate) ** evidence) start their learning from that knot's multiplier where it is below 1,
    not from the calibration: each is read as its learned log-multiplier plus the part of the timed knot's that
    its own passes have not yet replaced. Lengths the policy never drafts are never timed, so a calibration that
    the loop's passes find too dear at the lengths it drafts would otherwise keep the longer ones dear for good
    (: Gemma's knots at 47-48 learned at 0.85-0.93, at 63-64 hardly moved, every first draft held at 48
    tokens). Only downwards, and a knot the policy then drafts is learned as any other.
    """

    def __init__(
        self,
        curve,
        weight=0.2,
        shape_rate=0.0,
        first_level=True,
        log_shape=None,
        knots_only=False,
        staged=False,
        evidence=None,
        follow_timed=False,
    ):
        if not isinstance(curve, CostCurve):
            raise TypeError(f"curve must be a CostCurve, got {type(curve).__name__}")
        if not 0 < weight <= 1:
            raise ValueError(f"weight must be in (0, 1], got {weight}")
        if isinstance(shape_rate, bool) or not isinstance(shape_rate, (int, float, np.integer, np.floating)):
            raise TypeError(f"shape_rate must be a number, got {type(shape_rate).__name__}")
        if not 0 <= shape_rate < 1:
            raise ValueError(f"shape_rate must be in [0, 1), got {shape_rate}")
        self.curve = curve
        self.weight = weight
        self.shape_rate = float(shape_rate)
        self.scale = 1.0
        self.first_level = bool(first_level)
        self.knots_only = bool(knots_only)
        self.staged_head = bool(staged) and bool(curve.head)  # passes may compute the output layer in two stages
        self.observed = 0  # passes observed (those with a time)
        self.log_shape = np.zeros(len(curve.ks)) if log_shape is None else checked_log_shape(log_shape, curve)
        self.evidence = np.zeros(len(curve.ks)) if evidence is None else checked_evidence(evidence, curve)
        self.follow_timed = bool(follow_timed)
        self._ks = np.asarray(curve.ks, dtype=np.float64)
        self._refresh()

    def _refresh(self):
        """The log-multipliers ``shape`` interpolates: ``log_shape``, with ``follow_timed`` each knot above the
        longest timed one started from that knot's (where below 0) rather than from 0."""
        self._effective = self.log_shape
        if not self.follow_timed or self.shape_rate <= 0:
            return
        trust = self.knot_trust()
        timed = np.flatnonzero(trust[1:] >= TIMED_TRUST) + 1
        if timed.size and self.log_shape[timed[-1]] < 0:
            top = timed[-1]
            self._effective = self.log_shape.copy()
            self._effective[top + 1 :] += (1.0 - trust[top + 1 :]) * self.log_shape[top]

    def snapshot(self):
        """What the passes observed so far taught (the scale, the learned shape and its evidence), copied: for
        ``restore`` after passes that should teach nothing beyond their own run."""
        return (self.scale, self.observed, self.log_shape.copy(), self.evidence.copy())

    def restore(self, snapshot):
        """Back to what ``snapshot`` (an earlier ``snapshot()`` of this model) held."""
        scale, observed, log_shape, evidence = snapshot
        self.scale, self.observed = scale, observed
        self.log_shape, self.evidence = checked_log_shape(log_shape, self.curve), checked_evidence(evidence, self.curve)
        self._refresh()

    def knot_trust(self):
        """How far each knot's learning has come from where it started: 1 - (1 - shape_rate) ** evidence (0 for a
        knot no pass moved, near 1 once many have)."""
        return 1.0 - (1.0 - self.shape_rate) ** self.evidence

    def shape(self, k):
        """The learned multiplier at ``k`` (an int or an array), 1 where nothing was learned."""
        return np.exp(np.interp(np.asarray(k, dtype=np.float64), self._ks, self._effective))

    def observe(self, k, seconds, head_rows=None):
        """One pass over ``1 + k`` tokens took ``seconds`` (0, a clock too coarse to see it, is ignored).
        ``head_rows``: the row counts of each product of the output layer the pass computed, where it computed
        it in stages (``staged``; by default once over all ``1 + k``): the time is then learned from as the time
        a whole pass would have taken at the same ratio to the curve's."""
        k = check_positive_int(k, "k", minimum=0)
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float, np.integer, np.floating)):
            raise TypeError(f"seconds must be a number, got {type(seconds).__name__}")
        if not (np.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"seconds must be finite and >= 0, got {seconds}")
        if head_rows is not None:
            seconds *= self.curve.at(k) / self.curve.staged_at(k, head_rows)
        if seconds <= 0:
            return
        self.observed += 1
        if self.first_level and self.observed == 1:  # the level from the first pass, the shape from none yet
            self.scale = seconds / self._shaped(k)
            return
        if self.shape_rate > 0 and k > 0 and (not self.knots_only or k in self.curve.ks):
            residual = np.log(seconds / self.cost(k))
            upper = min(int(np.searchsorted(self._ks, k)), len(self._ks) - 1)  # the knot at or above k
            lower = max(upper - 1, 0)
            span = self._ks[upper] - self._ks[lower]
            w_upper = 1.0 if span == 0 or k >= self._ks[upper] else (k - self._ks[lower]) / span
            for knot, w in ((lower, 1.0 - w_upper), (upper, w_upper)):
                if knot > 0 and w > 0:
                    self.log_shape[knot] += self.shape_rate * w * residual
                    self.evidence[knot] += w
            np.clip(self.log_shape, -np.log(SHAPE_BOUND), np.log(SHAPE_BOUND), out=self.log_shape)
            self._refresh()
        self.scale += self.weight * (seconds / self._shaped(k) - self.scale)

    def _shaped(self, k):
        """The curve times the learned shape at ``k`` (an int or an array): the cost before the scale."""
        return self.curve.at(k) * self.shape(k)

    def cost(self, k):
        return self.scale * self._shaped(k)

    def staged(self, expected):
        """``(cost, first_rows)`` at each draft length k = 0 .. ``len(expected) - 1``, given ``expected[k]`` =
        E[accepted | k]: the expected seconds of the pass when its output layer is computed first over
        ``first_rows[k]`` rows, and over the rest only where the draft tokens those rows check were all accepted
        (``first_rows[k]`` = ``1 + k``: in one product, ``cost(k)``). Staging costs one more product where the draft
        holds and saves the rows after the first stage where it fails early; it is taken where the curve's
        output-layer times (``head``) and the acceptance model make it cheaper on average."""
        expected = np.asarray(expected, dtype=np.float64)
        k = np.arange(expected.size)
        full = self.cost(k)
        rows = k + 1
        if not self.staged_head or expected.size < 2:
            return full, rows
        first = np.asarray([f for f in STAGE_ROWS if f < expected.size], dtype=np.int64)
        survive = np.diff(expected)  # survive[i - 1]: P(the first i draft tokens all accepted)
        calibrated = self.curve.at(k)
        whole = self.curve.head_at(k)
        body = calibrated - whole
        head_first = self.curve.head_at(first - 1)[None, :]
        rest = np.clip(k[:, None] - first[None, :], 0, None)  # rows of the second stage: 1 + k - f, minus one
        # the second stage streams the output layer's weights again: it costs at least what the whole product
        # costs past the first stage's rows plus a one-row product, so that splitting a draft that holds always
        # costs more than computing it whole (the in-pass times at two row counts do not add up to that: a
        # 33-row pass split 32 + 1, modelled 3 % cheaper, ran 11 % dearer than a 32-row one)
        second = np.maximum(self.curve.head_at(rest), whole[:, None] - head_first + self.curve.head_at(0))
        staged = body[:, None] + head_first + survive[first - 1][None, :] * second
        staged = np.where(first[None, :] <= k[:, None], staged, np.inf) * (full / calibrated)[:, None]
        best = np.argmin(staged, axis=1)
        cheaper = staged[k, best] < full
        return np.where(cheaper, staged[k, best], full), np.where(cheaper, first[best], rows)

    def learned_shape(self):
        """The log-multiplier learned at each knot of the curve (a copy; the first is 0)."""
        return self.log_shape.copy()

    def learned_evidence(self):
        """The passes behind each knot's multiplier (a copy): the interpolation weights of those that moved it."""
        return self.evidence.copy()


def _per_knot(values, name, curve):
    """``values`` as a float array of one number per knot of ``curve``; a TypeError or ValueError naming it."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise TypeError(f"{name} must be a sequence of numbers, got {type(values).__name__}")
    try:
        out = np.array(values, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} must hold numbers: {error}") from None
    if out.shape != (len(curve.ks),):
        raise ValueError(f"{name} must hold one value per knot of the curve ({len(curve.ks)}), got shape {out.shape}")
    return out


def checked_log_shape(log_shape, curve):
    """``log_shape`` as a float array of one finite log-multiplier per knot of ``curve``, the first 0 (plain steps
    are what the scale tracks) and each within ``SHAPE_BOUND`` either way; a ValueError or TypeError naming it
    otherwise."""
    out = _per_knot(log_shape, "log_shape", curve)
    if not np.all(np.isfinite(out)) or out[0] != 0 or np.any(np.abs(out) > np.log(SHAPE_BOUND) + 1e-9):
        raise ValueError(
            f"log_shape must be finite, 0 at k = 0 and within log({SHAPE_BOUND:g}) either way, got {out.tolist()}"
        )
    return out


def checked_evidence(evidence, curve):
    """``evidence`` as a float array of one finite, non-negative pass weight per knot of ``curve``; a ValueError or
    TypeError naming it otherwise."""
    out = _per_knot(evidence, "evidence", curve)
    if not np.all(np.isfinite(out)) or np.any(out < 0):
        raise ValueError(f"evidence must hold finite, non-negative weights, got {out.tolist()}")
    return out


# c(k)/c(0) calibrated for Gemma 3 270M, fp32, on a 2-core CPU (MKL, every linear layer in its fastest form,
# integration/fastpass/linear_plan.py): a stand-in for replays of runs that recorded no curve, and for callers that
# pass none
CPU_SMALL_MODEL = CostCurve((0, 1, 2, 3, 4, 8, 16, 32, 64), (1.0, 1.02, 1.34, 1.34, 1.63, 3.16, 4.25, 6.46, 9.41))


def cost_model(config, curve, log_shape=None, evidence=None, staged=False):
    """The ``OnlineCost`` that ``config`` (an ``AdaptiveConfig``) learns ``curve`` with, from ``log_shape`` and
    ``evidence`` if given (a shape learned before and the passes behind each knot); ``staged``: passes may compute
    the output layer in two stages (``FastPassOptions.staged_head``)."""
    return OnlineCost(
        curve,
        shape_rate=config.shape_rate,
        first_level=config.first_level,
        log_shape=log_shape,
        knots_only=config.shape_at_knots,
        staged=staged,
        evidence=evidence,
        follow_timed=config.follow_timed,
    )


def best_draft_length(expected, cost, excluded=()):
    """The k that maximises (1 + E[accepted | k]) / cost(k), given ``expected[k] = E[accepted | k]``, among the
    lengths not in ``excluded`` (draft lengths >= 1 whose verification is not exact on the device)."""
    return best_draft(expected, cost, excluded)[0]


def best_draft(expected, cost, excluded=()):
    """``(k, value)``: ``best_draft_length``'s k and its expected tokens per unit of cost."""
    expected = np.asarray(expected, dtype=np.float64)
    value = (1.0 + expected) / np.asarray(cost(np.arange(expected.size)), dtype=np.float64)
    for k in excluded:
        if k < value.size:
            value[k] = -np.inf
    k = int(np.argmax(value))
    return k, float(value[k])

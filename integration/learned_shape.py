"""The cost curve's shape as the loop learned it, kept on disk beside the calibration it was learned against.

``OnlineCost`` learns a log-multiplier per knot of the calibrated curve from the passes a run makes
(``AdaptiveConfig.shape_rate``). A ``SpeculativeGenerator`` keeps what it learned across its own requests; this
module keeps it across processes, so that a one-request CLI call or a benchmark that builds a generator per
request starts from what the requests before it learned, not from the calibration alone. That matters where the
calibration's shape is wrong: measured on another host whose processor has the same name (they share a cache
key), or while the machine was busy. Replayed on recorded runs under such a curve, learning within each request
alone recovers a quarter to three fifths of the loss, across requests three quarters or more
(``benchmarks/recorded/README.md``, "The curve's shape, learned").

The file names the curve it was learned against: a remeasured curve (``draftless calibrate``, which removes the
file too) starts from no learned shape. Read and written as JSON, atomically; an unreadable or mismatched file
is ignored with a warning, never trusted.
"""

import json
import logging

import numpy as np

from draftless.lookup.cost_model import CostCurve, OnlineCost, checked_evidence, checked_log_shape

from .atomic_file import write_text_atomically
from .calibration import cache_file, calibration_key

logger = logging.getLogger(__name__)

# bumped when what the multipliers mean changes, so that shapes learned the old way are dropped: 2 since session 58,
# the shapes kept before learned from each process's first pass (``pass_timing.told_seconds``) and drifted low; 3
# since session 60, those kept before learned from sampled runs and unscreened passes too
# (``screened_head.timed_like_calibration``), which priced short drafts low
SHAPE_VERSION = 3


def shape_path(model, curve):
    """Where the shape learned against ``curve`` (at its draft lengths) is kept for this model/device/dtype."""
    return cache_file(model, f"shape-v{SHAPE_VERSION}-" + "-".join(map(str, curve.ks)))


def load_learned_shape(model, curve):
    """The log-multipliers per knot of ``curve`` learned by earlier runs on this model/device/dtype/threads, or
    None where none were kept, or were learned against another curve (a remeasured one)."""
    return load_learned_state(model, curve)[0]


def load_learned_state(model, curve):
    """``(log-multipliers, evidence)``: ``load_learned_shape``'s shape and the passes behind each of its knots
    (``OnlineCost.learned_evidence``), each None where none was kept (evidence: a file written before session
    55)."""
    if not isinstance(curve, CostCurve):
        raise TypeError(f"curve must be a CostCurve, got {type(curve).__name__}")
    path = shape_path(model, curve)
    if not path.exists():
        return None, None
    try:
        data = json.loads(path.read_text())
        if not np.allclose(data["curve"], curve.seconds, rtol=1e-9, atol=0.0):
            logger.info("ignoring %s: learned against another calibration of this model", path)
            return None, None
        evidence = checked_evidence(data["evidence"], curve) if "evidence" in data else None
        return checked_log_shape(data["log_shape"], curve), evidence
    except (ValueError, KeyError, TypeError) as error:
        logger.warning("ignoring an unreadable learned cost-curve shape %s (%s)", path, error)
        return None, None


def save_learned_shape(model, cost):
    """Keep ``cost``'s learned shape (an ``OnlineCost``) for the next run on this model/device/dtype/threads.
    Nothing is written where it learned nothing (shape rate 0, or no pass yet)."""
    if not isinstance(cost, OnlineCost):
        raise TypeError(f"cost must be an OnlineCost, got {type(cost).__name__}")
    if cost.shape_rate <= 0 or cost.observed == 0:
        return None
    path = shape_path(model, cost.curve)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"ks": list(cost.curve.ks), "curve": list(cost.curve.seconds),
            "log_shape": [float(x) for x in cost.learned_shape()],
            "evidence": [float(x) for x in cost.learned_evidence()], "key": calibration_key(model)}
    write_text_atomically(path, json.dumps(data))  # a process starting now reads the old shape or the new
    return path


STALE_SCALE = 0.5  # passes faster than this share of the cached curve's times: it was measured on a slower machine
STALE_AFTER_PASSES = 16  # ... once the online scale has seen this many passes


def stale_curve_scale(proposer, passes):
    """The online scale (observed over cached times) of ``proposer``'s cost model once it has seen ``passes``
    passes, where they run much faster than the cached curve says: it was measured while the machine was busy or
    slow, and its shape, which the policy learns online only pass by pass (``shape_rate``), may be off. None
    otherwise, and for a proposer with no cost model. (Slower passes than calibrated say less: a longer context
    than the calibration's 256 positions costs more anyway.)"""
    scale = getattr(getattr(proposer, "cost", None), "scale", None)
    if scale is None or passes < STALE_AFTER_PASSES or scale >= STALE_SCALE:
        return None
    return scale

"""What a model's generators keep between requests. The cost curve's shape learned from real passes is kept on
disk beside the calibration, so that the next generator, in this process or another, starts from it: a caller who
builds one generator per request learns as one long-lived generator does. How requests start (their first drafts'
outcomes, ``draftless.lookup.carried_starts``) is kept in memory only, per model and config, while the model
lives: it belongs to a workload, not a machine."""

import json
import logging
import threading
import weakref

import numpy as np

from draftless.lookup import carried_starts
from draftless.lookup.cost_model import CostCurve, OnlineCost, checked_evidence, checked_log_shape

from .store import cache_file, calibration_key, write_text_atomically

logger = logging.getLogger(__name__)

# bumped when what the multipliers mean changes, so that shapes learned the old way are dropped: 2, the shapes
# kept before learned from each process's first pass (``pass_timing.seconds_to_learn_from``) and drifted low; 3,
# those kept before learned from sampled runs and unscreened passes too, which priced short drafts low
SHAPE_VERSION = 3
# how far a kept shape may move a knot from the calibrated curve when a process starts (either way): the process
# learns the rest from its own passes. Unbounded, a shape learned under a curve measured on a busy machine priced
# 32-token passes at half the curve and longer ones at 0.9-0.97, and held Gemma 3 270M's code edits to 32-token
# drafts in every later process (replayed under the machine's real curve: 1.39x faster with this bound)
KEPT_SHAPE_BOUND = 1.25


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
        bound = np.log(KEPT_SHAPE_BOUND)
        return np.clip(checked_log_shape(data["log_shape"], curve), -bound, bound), evidence
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
    data = {
        "ks": list(cost.curve.ks),
        "curve": list(cost.curve.seconds),
        "log_shape": [float(x) for x in cost.learned_shape()],
        "evidence": [float(x) for x in cost.learned_evidence()],
        "key": calibration_key(model),
    }
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


_STARTS = weakref.WeakKeyDictionary()  # model -> {AdaptiveConfig: RequestStart}
_LOCK = threading.Lock()


def request_start(model, config):
    """The ``RequestStart`` that ``model``'s generators under ``config`` (an ``AdaptiveConfig``) share
    (``carried_starts``), made on first use; None where ``config.start_memory`` is 0 (every request's first draft
    under the prior alone)."""
    with _LOCK:
        start = _STARTS.get(model, {}).get(config)
        if start is None:
            start = carried_starts(config)  # checks the config too; None where it carries none
            if start is not None:
                _STARTS.setdefault(model, {})[config] = start
        return start


def forget_request_starts(model=None):
    """Drop what ``model``'s requests (every model's, by default) have shown: later requests start from the
    prior again."""
    with _LOCK:
        if model is None:
            _STARTS.clear()
        else:
            _STARTS.pop(model, None)


_MODEL_LOCKS = weakref.WeakKeyDictionary()  # model -> RLock
_MODEL_LOCKS_GUARD = threading.Lock()


def model_lock(model) -> threading.RLock:
    """The lock every draftless call on ``model`` holds while it changes or runs the model (its calibration, a
    generation with the fast pass installed): calls from several threads on one model run one at a time, each as
    it would alone, whichever entry point they came through. Re-entrant, so a call may take it again inside."""
    with _MODEL_LOCKS_GUARD:
        lock = _MODEL_LOCKS.get(model)
        if lock is None:
            lock = _MODEL_LOCKS[model] = threading.RLock()
        return lock

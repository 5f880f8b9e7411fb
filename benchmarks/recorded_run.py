"""What a run recorded by ``benchmarks.run`` drafted with, read back for a replay: its ``AdaptiveConfig`` (fields
added since filled in as the run's policy had them), its calibrated cost curve, the state each request started
from (the curve's learned shape, the request-start acceptance), and its model's token texts and digits' tokens
for the re-flowed and stepped copies. ``benchmarks.replay`` and the evidence tools built on it replay through
these, so that the default policy drafts as the run's loop did."""

import functools
import logging

from draftless.lookup import RequestStart
from draftless.lookup.adaptive import CPU_SMALL_MODEL, AdaptiveConfig, cost_model
from draftless.lookup.cost_model import CostCurve

logger = logging.getLogger(__name__)

# AdaptiveConfig fields added after some runs were recorded, with the value that reproduces the policy those runs
# used: before the copy regime (copy_share 0: always copying) every draft was judged as a copy; before
# ``earliest_in_prompt`` the "frequent" rule's occurrence stood wherever it lay; before knots followed the longest
# timed one the shape was read as learned
LEGACY_FIELDS = {
    "copy_share": 0.0,
    "earliest_in_prompt": 0,
    "reflow": False,
    "shape_rate": 0.0,
    "first_level": False,
    "shape_at_knots": False,
    "start_memory": 0.0,
    "follow_timed": False,
    "stepped_copy": False,
}
# fields a run may have recorded that the policy no longer has: the fast pass's switches, and knobs removed since
# (a run recorded with them replays as the current policy would have drafted its outputs, not exactly as it ran)
RETIRED_FIELDS = (
    "kind",
    "screened_head",
    "staged_head",
    "periodic",
    "occurrence_memory",
    "occurrence_margin",
    "reflow_after_space",
    "start_key",
    "resume_horizon",
    "copy_length",
    "forgetting",
    "copy_memory",
)


def _read_model_tokenizer(model, what, drafts):
    """``token_text``'s ``what`` (a function's name) of the tokenizer of ``model``, or None, with a warning that the
    replay drafts no ``drafts``, where it cannot be loaded."""
    from draftless.integration import load_tokenizer, token_text

    try:
        return getattr(token_text, what)(load_tokenizer(model))
    except (OSError, TypeError, ValueError) as error:
        logger.warning("no %s in this replay: the tokenizer of %r could not be loaded (%s)", drafts, model, error)
        return None


@functools.cache
def _model_text_classes(model):
    return _read_model_tokenizer(model, "text_classes", "re-flowed drafts")


@functools.cache
def _model_digit_tokens(model):
    return _read_model_tokenizer(model, "digit_tokens", "stepped copies")


def run_digit_tokens(run):
    """The digits' token ids of the tokenizer of the model a recorded run ran (``token_text.digit_tokens``), with
    which the default policy drafts stepped copies as the loop does; None where it cannot be loaded or writes
    numbers otherwise than digit by digit (the replay then drafts none)."""
    return None if run.get("model") is None else _model_digit_tokens(run["model"])


def run_text_classes(run):
    """The token text classes of the tokenizer of the model a recorded run ran (a bundled model, or a local
    directory still there), with which the default policy drafts re-flowed copies as the run's loop did; None
    where it cannot be loaded (the replay then drafts none)."""
    return None if run.get("model") is None else _model_text_classes(run["model"])


def recorded_config(run):
    """The ``AdaptiveConfig`` that a run recorded by ``benchmarks.run`` drafted with."""
    fields = {
        k: tuple(v) if isinstance(v, list) else v for k, v in run["draftless_config"].items() if k not in RETIRED_FIELDS
    }
    if fields.get("occurrence") == "learned":  # a retired rule: the rule it started from
        fields["occurrence"] = "frequent"
    return AdaptiveConfig(**{**{k: v for k, v in LEGACY_FIELDS.items() if k not in fields}, **fields})


def recorded_cost(run):
    """The relative cost curve that a run recorded by ``benchmarks.run`` calibrated for its model and machine,
    or the CPU stand-in for a run that recorded none."""
    if "cost_curve" not in run:
        return CPU_SMALL_MODEL
    curve = run["cost_curve"]  # with the output layer's times in later runs (staged passes)
    return CostCurve(tuple(curve["ks"]), tuple(curve["seconds"]), tuple(curve.get("head", ()))).relative()


def recorded_start(curve, config, run):
    """The cost model one recorded request (a row of a run's ``runs``) started from: ``curve`` with the shape
    that earlier requests had learned and kept on disk (``start_shape``; none in runs earlier) and the
    passes behind each knot (``start_evidence``; none earlier), learning at ``config``'s rate. An
    ``AdaptiveProposer`` given it drafts as the loop's did, told the run's ``pass_seconds``."""
    shape = run.get("start_shape")
    return cost_model(config, curve, shape or None, (run.get("start_evidence") or None) if shape else None)


def recorded_request_start(config, run):
    """The ``RequestStart`` one recorded request (a row of a run's ``runs``) started from: what earlier requests'
    first drafts had shown (``start_acceptance``), or the prior's where nothing had; None where ``config``
    carries none (``start_memory`` 0, as in runs earlier)."""
    state = run.get("start_acceptance")
    return RequestStart.for_config(config, (state["hits"], state["trials"]) if state else None)

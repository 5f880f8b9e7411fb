"""Calibrating the target: the linear layers' fastest forms (``fastpass.linear_plan``) and the cost curve c(k),
seconds of one verification pass over 1 + k tokens measured with those forms in place (docs/calibration.md).

Measured once for the model's architecture, device, dtype and thread count (and the torch and transformers
versions, and the processor behind the device: ``store.calibration_key``) and cached on disk; the adaptive policy
then scales the curve online by the passes a run makes and learns its shape from them (``kept_state``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import torch

from draftless.index.validation import check_positive_int
from draftless.lookup.config import check_max_draft
from draftless.lookup.cost_model import CostCurve

from . import kv_cache, pass_check
from .fastpass.lean_layers import lean_layers, verification_cached
from .fastpass.lean_layers import verified as lean_verified
from .fastpass.linear_plan import LinearPlans, measure_linear_plans, planned_linears
from .fastpass.screened_head import SCREEN_FORM_KIND, ScreenedHead, decode_form, product_form
from .fastpass.screened_sampling import MAX_TOP_K
from .fastpass.staged_head import HeadClock, StagedHead
from .fastpass.timing_rounds import step_counter
from .generation_plan import learned_position_limit
from .pass_timing import pass_timers, slower_than_longer
from .store import (  # noqa: F401 (names kept importable from here)
    CHECKPOINT_FIELDS,
    METHOD_VERSION,
    Measured,
    attention_implementations,
    cache_file,
    cache_root,
    cached,
    calibration_key,
    forget_read_files,
    processor_identity,
    read_cached,
    stage_progress,
    timing_config,
)

logger = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]  # (stage, done, total), after each timed step

# both edges of the 8-row stairs: on a CPU a pass over a multiple of 8 rows (k = 7, 15, 23, ...) can cost less than
# one over a few rows fewer, which a curve interpolated from k = 8, 16, 32, 64 alone cannot show the policy
DEFAULT_KS = (0, 1, 2, 3, 4, 7, 8, 15, 16, 23, 24, 31, 32, 47, 48, 63, 64)
# the lengths of DEFAULT_KS the first calibration times, once each; the others are filled in by interpolation and,
# like every knot, refined by the passes the runs make. Upper stair edges are left out, which interpolation charges
# too little, so that the policy drafts them and learns their price
MEASURED_KS = (0, 1, 2, 3, 4, 7, 15, 31, 63)
# bumped when the loop's pass changes but the linear layers' plans stand (the cache, the screen, the lean layers),
# so that curves measured the old way are measured again
CURVE_VERSION = 12


def within_learned_positions(model, measured, context):
    """``(measured, context)`` cut to fit a model with a table of learned absolute positions (gpt2's
    ``n_positions``): one prefilled token, the context and a pass over ``1 + k`` tokens must lie within it. The
    lengths that do not fit are extrapolated from those that do, as any length past the last timed one is; a
    table too small for two timed lengths is refused."""
    limit = learned_position_limit(model)
    if limit is None or context + measured[-1] + 2 <= limit:
        return measured, context
    fitting = tuple(k for k in measured if k + 3 <= limit)  # the prefilled token, one of context, 1 + k
    if len(fitting) < 2:
        raise ValueError(f"the model's {limit} learned positions are too few to calibrate its passes")
    return fitting, max(1, min(context, limit - fitting[-1] - 2))


@torch.no_grad()
def measure_cost_curve(model, ks=DEFAULT_KS, context=256, repeats=1, progress=None, measured=None):
    """Pass time at each draft length in ``ks`` after ``context`` cached positions (``pass_timing.pass_timers``:
    one token prefilled, random keys and values for the rest): the longest and the shortest
    of the ``measured`` lengths (by default ``MEASURED_KS`` for ``DEFAULT_KS``, else every length) warmed up
    once each, then each timed in ``repeats`` interleaved rounds, keeping its fastest pass, so that a burst of
    load from another process lands on one length only; the lengths not measured interpolated between those
    that were. A longer pass may come out cheaper (a multiple of 8 rows on a CPU): the curve keeps it, so that
    the policy drafts the longer, cheaper length. ``progress(done, total)``, if given, after each timed pass.

    One round is enough: the learned shape, kept across runs, corrects a knot timed slow or filled in wrong from
    the passes drafted there. A length timed slower than a longer one is timed once more
    (``slower_than_longer``): a knot timed slow is one the policy never drafts, so its passes could never
    correct it."""
    if not ks or ks[0] != 0:
        raise ValueError(f"ks must start at 0, got {ks}")
    ks = tuple(ks)
    if measured is None:
        measured = MEASURED_KS if ks == DEFAULT_KS else ks
    measured = tuple(measured)
    if len(measured) < 2 or measured[0] != 0 or not set(measured) <= set(ks) or list(measured) != sorted(set(measured)):
        raise ValueError(f"measured must be increasing lengths of ks, at least 2, starting at 0; got {measured}")
    repeats = check_positive_int(repeats, "repeats")
    measured, context = within_learned_positions(model, measured, context)
    staging = StagedHead(model)  # whether the loop can stage the output layer on this model: its times kept if so
    screen = ScreenedHead.for_model(model)  # passes a greedy run screens, timed screened (``screened_head``)
    passes = pass_timers(model, measured, context, staging, screen)
    ends = list(dict.fromkeys((passes[-1], passes[0])))  # the longest first: it allocates the largest buffers
    tick = step_counter(progress, len(ends) + len(passes) * repeats)
    clock = HeadClock(model)  # the output layer's share of each pass, for passes that compute it in stages
    best, head = [float("inf")] * len(passes), [None] * len(passes)
    # as the loop runs: each linear layer in its planned form, the lean decoder layers
    screened = screen is not None and screen.supported  # the output layer's times then the screen's: none kept
    every = screened and screen.screens(1)  # every pass screened: the output layer's own plan never read
    with (
        planned_linears(model, cached_linear_plans(model, output_layer=not every)),
        lean_layers(model),
        clock.installed(),
    ):
        for warm in ends:
            warm()
            if tick is not None:
                tick()

        def time_length(i):  # each length's fastest pass kept, with its output layer's time
            clock.last = None
            elapsed = passes[i]()
            if elapsed < best[i]:
                best[i], head[i] = elapsed, clock.last

        for _ in range(repeats):  # interleaved rounds
            for i in range(len(passes)):
                time_length(i)
                if tick is not None:
                    tick()
        again = slower_than_longer(best)
        if again:
            logger.info("timing k = %s again: slower than a longer pass", [measured[i] for i in again])
        for i in again:  # timed again, once: most likely slowed by chance
            time_length(i)
    known = staging.supported and not screened and all(h is not None and 0 < h < b for h, b in zip(head, best))
    timed = CostCurve(measured, tuple(best), tuple(head) if known else ())
    seconds = tuple(float(timed.at(k)) for k in ks)
    filled = tuple(float(timed.head_at(k)) for k in ks) if known else ()
    if not all(0 < h < s for h, s in zip(filled, seconds)):  # extrapolated past a knot timed slow: none kept
        logger.info("the output layer's times filled in out of range, %s: the curve keeps none", filled)
        filled = ()
    return CostCurve(ks, seconds, filled)


# what ``calibrate``'s ``progress`` is told is being measured
STAGES = ("linear-layer plans", "cost curve", "pass-length check", "output-layer plan")
# the plans' cache name, its version bumped when plans cached before must be measured again
PLANS_KIND = "linear-plans-v3"
# where ``ScreenedHead.may_serve`` the model, its output layer's plan is cached apart under this name and measured
# only for a run that multiplies by it in fp32 (sampling, logits processors, scores; a model whose logits are not
# the layer's output): a greedy run screens every pass and never does
OUTPUT_PLAN_KIND = "output-plan-v1"


def output_layer_apart(model):
    """The weight shape of ``model``'s output layer where its plan is kept apart (``OUTPUT_PLAN_KIND``), else
    None."""
    return tuple(model.get_output_embeddings().weight.shape) if ScreenedHead.may_serve(model) else None


# the seconds a stage of the linear plans' race may take: past it (a busy machine) the shapes left keep the plain
# product and the plans serve this process only; an idle 2-core CPU races a bundled model's in 1-4 s
PLANS_BUDGET_S = 8.0


def cached_linear_plans(model: Any, progress: Progress | None = None, output_layer: bool = True) -> LinearPlans:
    """The linear layers' ``LinearPlans`` for this model/device/dtype/threads, measured on first use; without
    ``output_layer``, that of the output layer left out where it is kept apart (``output_layer_apart``)."""
    apart = output_layer_apart(model)

    def measure(stage, shapes):
        def race():
            deadline = time.monotonic() + PLANS_BUDGET_S
            plans = measure_linear_plans(
                model, progress=stage_progress(progress, stage), shapes=shapes, deadline=deadline
            )
            return Measured(plans, steady=time.monotonic() <= deadline)

        return race

    body = cached(
        model, PLANS_KIND, measure(STAGES[0], lambda shape: shape != apart), LinearPlans.to_json, LinearPlans.from_json
    )
    if apart is None or not output_layer:
        return body
    return body.joined(
        cached(
            model,
            OUTPUT_PLAN_KIND,
            measure(STAGES[3], lambda shape: shape == apart),
            LinearPlans.to_json,
            LinearPlans.from_json,
        )
    )


def cost_kind(ks):
    """The name under which the curve at draft lengths ``ks`` is cached (after the model's key)."""
    return f"cost-v{CURVE_VERSION}-" + "-".join(map(str, ks))


def _curve_decoder(ks):
    def decode(data):
        if tuple(data["ks"]) != ks:
            return None
        return CostCurve(tuple(data["ks"]), tuple(data["seconds"]), tuple(data.get("head", ())))

    return decode


def cached_cost_curve(model: Any, ks: tuple[int, ...] = DEFAULT_KS, progress: Progress | None = None) -> CostCurve:
    """The calibrated curve for this model/device/dtype/threads, measuring it (and, first, the linear layers'
    plans it is measured under) on first use."""
    ks = tuple(ks)

    def measure():
        cached_linear_plans(model, progress, output_layer=False)  # the output layer's where a pass reads it
        return measure_cost_curve(model, ks, progress=stage_progress(progress, STAGES[1]))

    return cached(model, cost_kind(ks), measure, curve_json, _curve_decoder(ks))


def curve_json(curve):
    """A ``CostCurve`` as the JSON the cache (and a benchmark's recording) keeps."""
    return {"ks": list(curve.ks), "seconds": list(curve.seconds), "head": list(curve.head)}


def checks_pass_lengths(model):
    """Whether the loop checks which pass lengths are exact on ``model``'s device: every device but the CPU
    (see ``pass_check``)."""
    return model.device.type != "cpu"


def _inexact_kind(max_draft):
    return f"inexact-drafts-v1-{max_draft}"


def _inexact_decoder(max_draft):
    def decode(data):
        bad = data["inexact"]
        if not isinstance(bad, list) or not all(type(k) is int and 0 < k <= max_draft for k in bad):
            return None
        return tuple(sorted(bad))

    return decode


def cached_inexact_drafts(model, max_draft=pass_check.MAX_DRAFT, progress=None):
    """The draft lengths whose pass is not exact on this model/device/dtype/threads (``pass_check``), checked on
    first use: a sorted tuple, empty where every length is exact or where no check is made (the CPU)."""
    if not checks_pass_lengths(model):
        return ()

    def measure():
        plans = cached_linear_plans(model, progress)
        return pass_check.measure_inexact_drafts(
            model, max_draft, plans=plans, progress=stage_progress(progress, STAGES[2])
        )

    return cached(
        model, _inexact_kind(max_draft), measure, lambda bad: {"inexact": list(bad)}, _inexact_decoder(max_draft)
    )


def calibrated(
    model: Any, ks: tuple[int, ...] = DEFAULT_KS, max_draft: int = pass_check.MAX_DRAFT, output_layer: bool = False
) -> bool:
    """Whether everything the loop reads for ``model`` is cached (on disk or in this process), so that a
    ``SpeculativeGenerator`` built now measures nothing: the linear layers' plans, the cost curve at ``ks`` and,
    off the CPU, the exact pass lengths up to ``max_draft``, whether lean decoder layers serve (``lean_layers``),
    and where a screen may serve the output layer, its
    product's form (``screened_head.SCREEN_FORM_KIND``); with ``output_layer``, the output layer's plan kept
    apart too (``OUTPUT_PLAN_KIND``; a greedy run does not read it, a sampled one does). A caller that shows the
    first calibration's progress asks this first, then ``calibrate``s."""
    check_max_draft(max_draft)
    _check_output_layer(output_layer)
    parts = [
        (cache_file(model, PLANS_KIND), LinearPlans.from_json),
        (cache_file(model, cost_kind(tuple(ks))), _curve_decoder(tuple(ks))),
    ]
    if output_layer and output_layer_apart(model) is not None:
        parts.append((cache_file(model, OUTPUT_PLAN_KIND), LinearPlans.from_json))
    if ScreenedHead.may_serve(model):  # the screen's product form, raced where a screen is built
        parts.append((cache_file(model, SCREEN_FORM_KIND), decode_form))
    if checks_pass_lengths(model):
        parts.append((cache_file(model, _inexact_kind(max_draft)), _inexact_decoder(max_draft)))
    return all(read_cached(path, decode, warn=False) is not None for path, decode in parts) and verification_cached(
        model
    )


def _check_output_layer(output_layer):
    if not isinstance(output_layer, bool):
        raise TypeError(f"output_layer must be a bool, got {type(output_layer).__name__}")


def _check_calibration_call(model, progress):
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a callable (stage, done, total) or None, got {type(progress).__name__}")
    kv_cache.check_model_cache(model)  # the calibration rolls the cache back as the loop does


def calibrate(
    model: Any,
    progress: Progress | None = None,
    ks: tuple[int, ...] = DEFAULT_KS,
    max_draft: int = pass_check.MAX_DRAFT,
    output_layer: bool = False,
) -> tuple:
    """Measure and cache what ``calibrated`` finds missing (nothing where everything is cached), ``output_layer``
    as it takes it; returns ``(curve, plans, inexact_drafts)``. ``progress(stage, done, total)``, if given, is
    called after each timed step of what is measured, ``stage`` one of ``STAGES`` and ``done`` counting to
    ``total`` within it: a progress bar for the seconds a first calibration takes on a small CPU (the CLI draws
    one; the library itself never prints)."""
    _check_calibration_call(model, progress)
    check_max_draft(max_draft)
    _check_output_layer(output_layer)
    plans = cached_linear_plans(model, progress, output_layer)
    lean_verified(model)  # whether the curve's passes run lean layers, as the loop's will (``lean_layers``)
    curve = cached_cost_curve(model, ks, progress)
    screen = ScreenedHead.for_model(model)
    if screen is not None:  # its product's form raced and cached, also for a screen built before ``recalibrate``
        screen.form = product_form(model, screen.low)
    return curve, plans, cached_inexact_drafts(model, max_draft, progress)


def recalibrate(model: Any, progress: Progress | None = None) -> tuple:
    """Measure this model/device/dtype/threads again, replacing what is cached, the shape learned from earlier
    runs included (``learned_shape``): for plans or a curve measured while the machine was busy or slow
    (``draftless calibrate``), the output layer's plan included (``OUTPUT_PLAN_KIND``). Returns ``(curve, plans,
    inexact_drafts)``; ``progress`` as ``calibrate`` takes it."""
    _check_calibration_call(model, progress)
    key = calibration_key(model)
    stale = list((cache_root() / "calibration").glob(f"{key}-*.json"))
    for path in stale:
        path.unlink()
    forget_read_files(key)
    logger.info("recalibrating %s: %d cached files removed", key, len(stale))
    return calibrate(model, progress, output_layer=True)


def multiplies_output_layer(model, do_sample: bool, top_k: int | None) -> bool:
    """Whether a run multiplies by the whole output layer in fp32, so that its plan is worth measuring up front: a
    greedy run is screened where a screen may serve (else its plan is read on first use); a sampled one unless a
    screen serves its top-k cut (``screened_sampling``)."""
    if not do_sample:
        return False
    return not (ScreenedHead.may_serve(model) and top_k is not None and 0 < top_k <= MAX_TOP_K)

"""Calibrating the target: the linear layers' fastest forms (``linear_plan``) and the cost curve c(k),
seconds of one verification pass over 1 + k tokens (measured with those forms in place).

Measured once for the actual model, device, dtype and thread count (on a 2-core CPU with a 32 MiB cache, 1.5 s
for SmolLM2-135M's linear plans and 1.7 s for its curve, 1.6 s and 2.9 s for Gemma 3 270M's on session 32's host;
0.4-0.9 s less since session 36, the passes' context filled rather than prefilled: ``pass_timing``) and cached
on disk under the user cache dir, keyed by all four (and the torch and transformers versions, and the processor
or GPU behind the device): a changed dtype, thread count or machine recalibrates. "The model" is its
architecture, not its weights or name: fine-tunes of one base model, a training run's checkpoints and one model
copied to another directory share a calibration (``calibration_key``). The adaptive policy then scales the curve
online by the passes the run makes, and learns its shape from them, kept beside it (``learned_shape``).
"""

import logging

import torch

from draftless.index.validation import check_positive_int
from draftless.lookup.config import check_max_draft
from draftless.lookup.cost_model import CostCurve

from . import kv_cache, pass_check
from .attention import grouped_query_sdpa
from .calibration_cache import _MEMO, cache_file, cached, read_cached, stage_progress
from .calibration_key import (  # noqa: F401 (names kept importable from here)
    CHECKPOINT_FIELDS, METHOD_VERSION, attention_implementations, calibration_key, processor_identity, timing_config,
)
from .lean_layers import lean_layers, verification_cached
from .lean_layers import verified as lean_verified
from .linear_plan import LinearPlans, measure_linear_plans, planned_linears
from .models import cache_root
from .pass_timing import pass_timers, slower_than_longer
from .screened_head import SCREEN_FORM_KIND, ScreenedHead, decode_form, product_form
from .staged_head import HeadClock, StagedHead
from .timing_rounds import step_counter

logger = logging.getLogger(__name__)

# Both edges of the 8-row stairs: on a CPU a pass over a multiple of 8 rows (k = 7, 15, 23, ...) costs less than
# one over a row fewer and often less than one over a few rows fewer (Gemma 3 270M, 2-core CPU: k = 14 453 ms,
# k = 15 301 ms), which a curve interpolated from k = 8, 16, 32, 64 alone cannot show the policy
DEFAULT_KS = (0, 1, 2, 3, 4, 7, 8, 15, 16, 23, 24, 31, 32, 47, 48, 63, 64)
# the lengths of DEFAULT_KS the first calibration times, once each: the others (the dearest to time) are filled
# in by interpolation and, like every knot, refined by the passes the runs make (``learned_shape``). Dropped are
# upper stair edges, which interpolation charges too little (so the policy drafts them and learns their price),
# and lengths between stairs. Twelve lengths (with 8, 16 and 32) until session 38: replayed with 5 % noise on each
# timing and the shape kept, these nine drafted as fast (-0.2 to +0.9 % on four recorded runs of both models;
# -0.7 to +0.1 % timed exactly) for three passes fewer ("A calibration of a few seconds, a third time" in
# ``benchmarks/recorded/README.md``)
MEASURED_KS = (0, 1, 2, 3, 4, 7, 15, 31, 63)
# bumped when the loop's pass changes but the linear layers' plans stand: 2, the reserved KV cache and grouped
# key/value heads attended as they are; 3, a longer pass may cost less (kept as measured); 4, the output layer's
# time within each pass kept too (``CostCurve.head``: passes that compute it in stages); 5, the output layer screened
# in bfloat16 where a greedy run would screen it (``screened_head``); 6, screened from 3 rows, not 9; 7, timed
# under plans measured again (``PLANS_KIND`` v2: wide forms chosen over both edges of their range); 8, screened
# from 1 row, not 3; 9, the screen's candidates found in one pass over each row (``screen_candidates``), not by
# ``torch.topk``, and its product in the form raced faster on the host (``screen_product``); 10, output layers from
# 24M weights screened (``screened_head.MIN_WEIGHTS``: SmolLM2-135M's passes timed screened); 11, Llama's and
# Gemma 3's decoder layers run lean (``lean_layers``); 12, Mistral's, Qwen2's and Qwen3's too
CURVE_VERSION = 12


@torch.no_grad()
def measure_cost_curve(model, ks=DEFAULT_KS, context=256, repeats=1, progress=None, measured=None):
    """Pass time at each draft length in ``ks`` after ``context`` cached positions (``pass_timing.pass_timers``:
    one token prefilled, random keys and values for the rest): the longest and the shortest
    of the ``measured`` lengths (by default ``MEASURED_KS`` for ``DEFAULT_KS``, else every length) warmed up
    once each, then each timed in ``repeats`` interleaved rounds, keeping its fastest pass, so that a burst of
    load from another process lands on one length only; the lengths not measured interpolated between those
    that were. A longer pass may come out cheaper (a multiple of 8 rows on a CPU): the curve keeps it, so that
    the policy drafts the longer, cheaper length. ``progress(done, total)``, if given, after each timed pass.

    One round puts the timed lengths within 1.4-3.8 % of the best of five on average (12 % at worst: a pass
    slowed by chance), the filled-in ones within 3.6-10.9 % (20 %); the learned shape, kept across runs,
    corrects a knot timed slow or filled in wrong from the passes drafted there. Two rounds over every length
    (before session 32) took three times as long for 0.1-0.2 % of modelled speed ("A calibration of a few
    seconds, again" in ``benchmarks/recorded/README.md``). A length timed slower than a longer one is timed once
    more (``slower_than_longer``): a knot timed slow is one the policy never drafts, so the passes it makes can
    never correct it (session 34: k = 31, 32 rows, timed 390 ms against 308 ms for k = 32, and every copy
    drafted 32 tokens at 290-430 ms a pass)."""
    if not ks or ks[0] != 0:
        raise ValueError(f"ks must start at 0, got {ks}")
    ks = tuple(ks)
    if measured is None:
        measured = MEASURED_KS if ks == DEFAULT_KS else ks
    measured = tuple(measured)
    if len(measured) < 2 or measured[0] != 0 or not set(measured) <= set(ks) or list(measured) != sorted(set(measured)):
        raise ValueError(f"measured must be increasing lengths of ks, at least 2, starting at 0; got {measured}")
    repeats = check_positive_int(repeats, "repeats")
    staging = StagedHead(model)  # whether the loop can stage the output layer on this model: its times kept if so
    screen = ScreenedHead.for_model(model)  # passes a greedy run screens, timed screened (``screened_head``)
    passes = pass_timers(model, measured, context, staging, screen)
    ends = list(dict.fromkeys((passes[-1], passes[0])))  # the longest first: it allocates the largest buffers
    tick = step_counter(progress, len(ends) + len(passes) * repeats)
    clock = HeadClock(model)  # the output layer's share of each pass, for passes that compute it in stages
    best, head = [float("inf")] * len(passes), [None] * len(passes)
    # as the loop runs: each linear layer in its planned form, grouped key/value heads attended as they are
    screened = screen is not None and screen.supported  # the output layer's times then the screen's: none kept
    every = screened and screen.screens(1)  # every pass screened: the output layer's own plan never read
    with planned_linears(model, cached_linear_plans(model, output_layer=not every)), grouped_query_sdpa(model), \
            lean_layers(model), clock.installed():
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
# the plans' cache name; v2 (session 43): wide row counts timed at both edges of the range each serves, so that
# plans cached before are measured again; v3 (session 44): without the output layer's shape where a screen may
# serve it (``OUTPUT_PLAN_KIND``)
PLANS_KIND = "linear-plans-v3"
# where ``ScreenedHead.may_serve`` the model, its output layer's plan is cached apart under this name and measured
# only for a run that multiplies by it in fp32 (sampling, logits processors, scores; a model whose logits are not
# the layer's output): a greedy run screens every pass and never does. On session 44's Xeon, whose 480 MiB cache
# makes the probe 960 MiB, it is 3.9 s of Gemma 3 270M's 5.7 s of plans
OUTPUT_PLAN_KIND = "output-plan-v1"


def output_layer_apart(model):
    """The weight shape of ``model``'s output layer where its plan is kept apart (``OUTPUT_PLAN_KIND``), else
    None."""
    return tuple(model.get_output_embeddings().weight.shape) if ScreenedHead.may_serve(model) else None


def cached_linear_plans(model, progress=None, output_layer=True):
    """The linear layers' ``LinearPlans`` for this model/device/dtype/threads, measured on first use; without
    ``output_layer``, that of the output layer left out where it is kept apart (``output_layer_apart``)."""
    apart = output_layer_apart(model)

    def measure(stage, shapes):
        return lambda: measure_linear_plans(model, progress=stage_progress(progress, stage), shapes=shapes)

    body = cached(model, PLANS_KIND, measure(STAGES[0], lambda shape: shape != apart), LinearPlans.to_json,
                  LinearPlans.from_json)
    if apart is None or not output_layer:
        return body
    return body.joined(cached(model, OUTPUT_PLAN_KIND, measure(STAGES[3], lambda shape: shape == apart),
                              LinearPlans.to_json, LinearPlans.from_json))


def cost_kind(ks):
    """The name under which the curve at draft lengths ``ks`` is cached (after the model's key)."""
    return f"cost-v{CURVE_VERSION}-" + "-".join(map(str, ks))


def _curve_decoder(ks):
    def decode(data):
        if tuple(data["ks"]) != ks:
            return None
        return CostCurve(tuple(data["ks"]), tuple(data["seconds"]), tuple(data.get("head", ())))

    return decode


def cached_cost_curve(model, ks=DEFAULT_KS, progress=None):
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
        return pass_check.measure_inexact_drafts(model, max_draft, plans=plans,
                                                 progress=stage_progress(progress, STAGES[2]))

    return cached(model, _inexact_kind(max_draft), measure, lambda bad: {"inexact": list(bad)},
                   _inexact_decoder(max_draft))


def calibrated(model, ks=DEFAULT_KS, max_draft=pass_check.MAX_DRAFT, output_layer=False):
    """Whether everything the loop reads for ``model`` is cached (on disk or in this process), so that a
    ``SpeculativeGenerator`` built now measures nothing: the linear layers' plans, the cost curve at ``ks`` and,
    off the CPU, the exact pass lengths up to ``max_draft``, whether lean decoder layers serve (``lean_layers``),
    and where a screen may serve the output layer, its
    product's form (``screened_head.SCREEN_FORM_KIND``); with ``output_layer``, the output layer's plan kept
    apart too (``OUTPUT_PLAN_KIND``; a greedy run does not read it, a sampled one does). A caller that shows the
    first calibration's progress asks this first, then ``calibrate``s."""
    check_max_draft(max_draft)
    _check_output_layer(output_layer)
    parts = [(cache_file(model, PLANS_KIND), LinearPlans.from_json), (cache_file(model, cost_kind(tuple(ks))),
                                                                       _curve_decoder(tuple(ks)))]
    if output_layer and output_layer_apart(model) is not None:
        parts.append((cache_file(model, OUTPUT_PLAN_KIND), LinearPlans.from_json))
    if ScreenedHead.may_serve(model):  # the screen's product form, raced where a screen is built
        parts.append((cache_file(model, SCREEN_FORM_KIND), decode_form))
    if checks_pass_lengths(model):
        parts.append((cache_file(model, _inexact_kind(max_draft)), _inexact_decoder(max_draft)))
    return all(read_cached(path, decode, warn=False) is not None for path, decode in parts) \
        and verification_cached(model)


def _check_output_layer(output_layer):
    if not isinstance(output_layer, bool):
        raise TypeError(f"output_layer must be a bool, got {type(output_layer).__name__}")


def _check_calibration_call(model, progress):
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a callable (stage, done, total) or None, got {type(progress).__name__}")
    kv_cache.check_model_cache(model)  # the calibration rolls the cache back as the loop does


def calibrate(model, progress=None, ks=DEFAULT_KS, max_draft=pass_check.MAX_DRAFT, output_layer=False):
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


def recalibrate(model, progress=None):
    """Measure this model/device/dtype/threads again, replacing what is cached, the shape learned from earlier
    runs included (``learned_shape``): for plans or a curve measured while the machine was busy or slow
    (``draftless calibrate``), the output layer's plan included (``OUTPUT_PLAN_KIND``). Returns ``(curve, plans,
    inexact_drafts)``; ``progress`` as ``calibrate`` takes it."""
    _check_calibration_call(model, progress)
    key = calibration_key(model)
    stale = list((cache_root() / "calibration").glob(f"{key}-*.json"))
    for path in stale:
        path.unlink()
    for memo in [m for m in _MEMO if key in m]:
        del _MEMO[memo]
    logger.info("recalibrating %s: %d cached files removed", key, len(stale))
    return calibrate(model, progress, output_layer=True)

"""The evidence behind the first calibration's shortcuts, measured on the real model in one process:

- ``plans``: the linear layers' plans timed over a probe of ``--probe-mib`` MiB of weights a shape (the library
  times ``linear_plan.probe_bytes``) against plans timed over every layer of each shape, as passes: both plans
  in place in turn, every length timed in interleaved rounds, best pass kept. Passes as fast under both mean
  the probe chose as well.
- ``forms``: plans raced in MKL's two operand orders alone (earlier) against plans raced with oneDNN's
  matmul as a third form (``linear_plan.forms_for``), then passes under each, every length warmed up, the best
  of ``--rounds`` interleaved rounds kept, and the seconds each race took.
- ``wide``: plans whose wide row counts (16, 32, 64) take the form fastest at that row count alone (an
  earlier rule) against the form fastest summed over both edges of the range each serves (9-16, 17-32, 33-64;
  ``linear_plan.wide_edges``), then passes under each as for ``forms``, and the seconds each race took.
- ``curve``: the curve as the library measures it (``MEASURED_KS`` timed in ``--rounds`` rounds after warming
  the two ends, the other lengths filled in) against every length warmed up and the best of five rounds kept,
  and the seconds each took.

    python -m experiments.calibration_evidence plans --model gemma-3-270m
    python -m experiments.calibration_evidence forms --model gemma-3-270m --rounds 7
    python -m experiments.calibration_evidence wide --model smollm2-135m-instruct --rounds 3
    python -m experiments.calibration_evidence curve --model gemma-3-270m --rounds 1

Nothing is read from or written to the calibration cache but the linear layers' plans the curve is timed under.
"""

import argparse
import contextlib
import sys
import time

import numpy as np
import torch

from draftless.integration import calibration, load_model, pass_timing
from draftless.integration.fastpass import linear_plan

PLAN_KS = (0, 1, 2, 3, 4, 5, 6, 7, 8, 15, 16, 31, 63)
FORM_KS = (0, 1, 2, 3, 4, 7, 8, 15, 16, 23, 31, 32, 47, 63)
WIDE_KS = (0, 8, 9, 10, 12, 14, 15, 16, 20, 24, 31, 32, 40, 48, 56, 63)
FORM_NAMES = {linear_plan.PLAIN: "plain", linear_plan.TRANSPOSED: "transposed", linear_plan.ONEDNN: "oneDNN"}


def plans_over(model, nbytes, repeats=2, forms=None):  # as the library times them
    """``LinearPlans`` timed over ``nbytes`` of each shape's weights in the library's parts (None: every layer
    of it, whole, in each timing), in ``forms`` (by default the library's)."""
    out, t0 = [], time.perf_counter()
    for shape, modules in linear_plan.plain_linears(model).items():
        size = nbytes or sum(m.weight.numel() * m.weight.element_size() for m in modules)
        parts = linear_plan.PROBE_PARTS if nbytes else (1, 1)
        plan = linear_plan.measure_plan(modules, repeats=repeats, nbytes=size, forms=forms, parts=parts)
        if not plan.is_identity:
            out.append((shape, plan))
    return linear_plan.LinearPlans(tuple(sorted(out))), time.perf_counter() - t0


@torch.no_grad()
def compare_plans(model, probe_mib, rounds=5):
    """Passes under plans timed over a ``probe_mib`` MiB probe and over every layer, best of ``rounds``."""
    probe, probe_s = plans_over(model, probe_mib << 20)
    every, every_s = plans_over(model, None)
    best = passes_under(model, {"every layer": every, "probe": probe}, PLAN_KS, rounds)
    lines = [
        f"plans timed over every layer: {every_s:.2f} s; over a {probe_mib} MiB probe: {probe_s:.2f} s",
        "",
        "| k | pass, every-layer plans (ms) | pass, probe plans (ms) | ratio |",
        "|---|---|---|---|",
    ]
    for k in PLAN_KS:
        a, b = best["every layer", k], best["probe", k]
        lines.append(f"| {k} | {1e3 * a:.1f} | {1e3 * b:.1f} | {b / a:.3f} |")
    return lines


@torch.no_grad()
def passes_under(model, named_plans, ks, rounds):
    """The best of ``rounds`` passes at each of ``ks`` under each of ``named_plans`` (``{name: LinearPlans}``),
    interleaved, after a round that warms every length up under each: ``{(name, k): seconds}``."""
    passes = pass_timing.pass_timers(model, ks)
    best = {}
    for round_ in range(rounds + 1):
        for name, plans in named_plans.items():
            with linear_plan.planned_linears(model, plans):
                for k, run in zip(ks, passes):
                    seconds = run()
                    if round_:
                        best[name, k] = min(best.get((name, k), np.inf), seconds)
    return best


def compare_forms(model, rounds):
    """Passes under plans raced in MKL's two orders alone and with oneDNN's matmul too, best of ``rounds``."""
    probe = linear_plan.probe_bytes(model.device)
    two, two_s = plans_over(model, probe, forms=(linear_plan.PLAIN, linear_plan.TRANSPOSED))
    every, every_s = plans_over(model, probe)
    best = passes_under(model, {"two": two, "every": every}, FORM_KS, rounds)
    lines = [
        f"plans raced in two forms: {two_s:.2f} s; with oneDNN's too: {every_s:.2f} s "
        f"(oneDNN raced here: {linear_plan.ONEDNN in linear_plan.forms_for(next(model.parameters()))})",
        "",
        "| weight shape | forms at 1..8 rows (padded to) | 16, 32, 64 rows |",
        "|---|---|---|",
    ]
    for shape, plan in every.by_shape:
        narrow = ", ".join(f"{FORM_NAMES[f]} ({p})" for p, f in zip(plan.pad_to[1:], plan.forms[1:]))
        lines.append(f"| {shape[0]} x {shape[1]} | {narrow} | {', '.join(FORM_NAMES[f] for _, f in plan.wide)} |")
    return lines + pass_table(best, ("two", "every"), FORM_KS, ("two forms", "with oneDNN"))


def pass_table(best, names, ks, labels):
    """Markdown lines: the best pass at each of ``ks`` under the two ``names`` of ``best`` (``passes_under``'s),
    headed by ``labels``, and their ratio."""
    lines = ["", f"| k | pass, {labels[0]} (ms) | pass, {labels[1]} (ms) | ratio |", "|---|---|---|---|"]
    for k in ks:
        a, b = best[names[0], k], best[names[1], k]
        lines.append(f"| {k} | {1e3 * a:.1f} | {1e3 * b:.1f} | {b / a:.3f} |")
    return lines


@contextlib.contextmanager
def upper_edge_only():
    """Within the block, each wide row count's form is raced at that row count alone (the rule earlier)."""
    both = linear_plan.wide_edges
    linear_plan.wide_edges = lambda max_rows, wide_rows: [(r, r) for r in wide_rows if r > max_rows]
    try:
        yield
    finally:
        linear_plan.wide_edges = both


def compare_wide(model, rounds):
    """Passes under plans whose wide forms were chosen at their upper edge alone and over both edges."""
    probe = linear_plan.probe_bytes(model.device)
    with upper_edge_only():
        upper, upper_s = plans_over(model, probe)
    both, both_s = plans_over(model, probe)
    best = passes_under(model, {"upper": upper, "both": both}, WIDE_KS, rounds)
    lines = [
        f"plans, wide forms at the upper edge: {upper_s:.2f} s; over both edges: {both_s:.2f} s",
        "",
        "| weight shape | 16, 32, 64 rows, upper edge | over both edges |",
        "|---|---|---|",
    ]
    wide = {shape: plan.wide for shape, plan in upper.by_shape}
    for shape, plan in both.by_shape:
        before = ", ".join(FORM_NAMES[f] for _, f in wide.get(shape, ())) or "plain (no plan)"
        lines.append(f"| {shape[0]} x {shape[1]} | {before} | {', '.join(FORM_NAMES[f] for _, f in plan.wide)} |")
    return lines + pass_table(best, ("upper", "both"), WIDE_KS, ("upper edge", "both edges"))


@torch.no_grad()
def compare_curves(model, rounds):
    """The library's curve in ``rounds`` rounds against every length warmed up and the best of five."""
    measured = set(calibration.MEASURED_KS)
    calibration.cached_linear_plans(model)  # measured (or read) before anything is timed
    t0 = time.perf_counter()
    quick = calibration.measure_cost_curve(model, repeats=rounds)
    quick_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    passes = pass_timing.pass_timers(model, calibration.DEFAULT_KS)
    with linear_plan.planned_linears(model, calibration.cached_linear_plans(model)):
        full = linear_plan.fastest_of_rounds(passes, 5)  # every length warmed up, best of five
    full_s = time.perf_counter() - t0
    ratio = np.asarray(quick.seconds) / np.asarray(full)
    timed = np.array([k in measured for k in calibration.DEFAULT_KS])
    lines = [
        f"the library's curve ({rounds} round(s) after warming the ends): {quick_s:.2f} s; every length warmed "
        f"up, best of five: {full_s:.2f} s; mean |ratio - 1| {np.mean(np.abs(ratio - 1)):.3f} (timed "
        f"{np.mean(np.abs(ratio[timed] - 1)):.3f}, filled in {np.mean(np.abs(ratio[~timed] - 1)):.3f}), "
        f"worst {np.max(np.abs(ratio - 1)):.3f}",
        "",
        "| k | library (ms) | best of five (ms) | ratio | the library's |",
        "|---|---|---|---|---|",
    ]
    for k, a, b, r in zip(calibration.DEFAULT_KS, quick.seconds, full, ratio):
        lines.append(f"| {k} | {1e3 * a:.1f} | {1e3 * b:.1f} | {r:.3f} | {'timed' if k in measured else 'filled in'} |")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m experiments.calibration_evidence", description=__doc__.splitlines()[0]
    )
    parser.add_argument("what", choices=("plans", "forms", "wide", "curve"))
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--probe-mib", type=int, default=64, help="plans: MiB of weights a shape is timed over")
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="curve: timed rounds after warming the ends (1); forms, wide: rounds of passes kept (7)",
    )
    args = parser.parse_args(argv)
    rounds = args.rounds if args.rounds is not None else (7 if args.what in ("forms", "wide") else 1)
    if args.probe_mib < 1 or rounds < 1:
        parser.error("--probe-mib and --rounds must be at least 1")
    model, _ = load_model(args.model)
    if args.what == "plans":
        lines = compare_plans(model, args.probe_mib)
    elif args.what == "forms":
        lines = compare_forms(model, rounds)
    elif args.what == "wide":
        lines = compare_wide(model, rounds)
    else:
        lines = compare_curves(model, rounds)
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

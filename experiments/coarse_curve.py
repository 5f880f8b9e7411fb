"""What a shorter calibration would cost: replay a recorded run with the adaptive policy drafting under a cost
curve measured at fewer draft lengths, or timed once each with noise, while every pass is charged at the run's
full calibrated curve.

The library calibrates once per model, device, dtype and thread count: 17 lengths timed in two interleaved rounds
after a warm-up of the longest and the shortest (about 7 s for Gemma 3 270M on a 2-core CPU; 20-40 s, every
length warmed and timed in five rounds, earlier). A calibration of a second or two fits far less
there: a warm-up and one timed pass at two lengths (Gemma: c(0) + c(63) is about 0.9 s). This tool prices such
curves on recorded outputs: a subset of the run's lengths (the policy interpolates between them, as it does
between any knots), and log-normal noise on each length's timing (``--noise``, over ``--seeds`` draws).
Model-free, like ``benchmarks.replay``; a subset that names a length the run did not calibrate is left out.
"""

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

from benchmarks.recorded_run import recorded_config, recorded_cost, run_digit_tokens, run_text_classes
from benchmarks.replay import parse_run_arguments, replay
from draftless.lookup import AdaptiveConfig, AdaptiveProposer
from draftless.lookup.adaptive import cost_model
from draftless.lookup.cost_model import CostCurve, OnlineCost

SUBSETS = {  # name -> draft lengths kept (None: every length the run calibrated)
    "every calibrated length": None,
    "nine: 0-4, 8, 16, 32, 64": (0, 1, 2, 3, 4, 8, 16, 32, 64),
    "twelve: 0-4, 7, 8, 15, 16, 31, 32, 63": (0, 1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 63),  # the library's
    "low stair edges: 0, 7, 15, 31, 63": (0, 7, 15, 31, 63),
    "three: 0, 15, 63": (0, 15, 63),
    "two: 0, 63": (0, 63),
    "lower nine: 0-4, 7, 15, 31, 63": (0, 1, 2, 3, 4, 7, 15, 31, 63),  # twelve less the upper stair edges
    "eight: 0-2, 4, 7, 15, 31, 63": (0, 1, 2, 4, 7, 15, 31, 63),
}
SHORT_NAMES = dict(zip(("every", "nine", "twelve", "edges", "three", "two", "lower9", "eight"), SUBSETS))  # --subsets


def coarse_curve(full, ks, sigma, rng, filled=False):
    """``full`` measured at ``ks`` only, each length's time multiplied by exp(N(0, sigma)) (one noisy timing);
    ``filled``: at every length of ``full``, those outside ``ks`` interpolated (knots whose shape can be learned,
    as the library's calibration fills the lengths it does not time)."""
    ks = tuple(full.ks) if ks is None else tuple(ks)
    noise = np.exp(rng.normal(0.0, sigma, len(ks))) if sigma > 0 else np.ones(len(ks))
    curve = CostCurve(ks, tuple(float(full.at(k)) * float(m) for k, m in zip(ks, noise)))
    return CostCurve(tuple(full.ks), tuple(float(curve.at(k)) for k in full.ks)) if filled else curve


def price(
    data,
    full,
    noises=(0.0, 0.05, 0.1),
    seeds=5,
    shape_rates=(0.0,),
    pass_noise=0.15,
    stale=None,
    subsets=tuple(SUBSETS),
    across=False,
    levels=(),
    first_level=True,
    kept_shape=False,
    filled=False,
    stair_excess=1.0,
    at_knots=False,
):
    """``{(curve name, sigma, shape rate): {suite: [modelled speedup of each draw]}}``: the policy the run used
    drafting under each coarse curve (and ``stale``, another run's curve, if given), learning the curve's shape at
    each of ``shape_rates`` from passes told to take ``full``'s time under log-normal ``pass_noise``, every pass
    charged at ``full``. ``across``: one cost model for all the run's requests, in order, as a
    ``SpeculativeGenerator`` that keeps its proposer has (by default each request starts from the curve).
    ``filled``: each subset's curve filled in at the run's other lengths (``coarse_curve``).
    ``kept_shape``: each request starts a new cost model from the shape the request before it ended with, as
    generators built one per request do with the shape kept on disk (``integration.learned_shape``).
    ``levels``: also draft under the run's curve divided by each (a cached curve off by that factor alone);
    ``first_level``: the learning's (``OnlineCost``), the library's default by default. ``stair_excess``: a pass
    at a length between the knots of ``full`` is told to take that many times the line between them (the loop's
    8-row stairs); ``at_knots``: learn from passes at knots only (``AdaptiveConfig.shape_at_knots``)."""
    base = recorded_config(data) if "draftless_config" in data else AdaptiveConfig()  # older runs: the default
    excluded = tuple(data.get("inexact_drafts", ()))
    classes, digits = run_text_classes(data), run_digit_tokens(data)
    curves = [(name, SUBSETS[name]) for name in subsets if SUBSETS[name] is None or set(SUBSETS[name]) <= set(full.ks)]
    out = {}
    fixed = [
        (f"the run's curve / {level:g}", CostCurve(full.ks, tuple(s / level for s in full.seconds))) for level in levels
    ] + ([("another run's curve", stale)] if stale is not None else [])
    for name, ks in curves + fixed:
        for sigma in noises if not isinstance(ks, CostCurve) else (0.0,):
            for rate in shape_rates:
                config = dataclasses.replace(base, shape_rate=rate, first_level=first_level, shape_at_knots=at_knots)
                draws = {}
                for seed in range(seeds if sigma > 0 or (rate > 0 and pass_noise > 0) else 1):
                    rng = np.random.default_rng(seed)
                    curve = ks if isinstance(ks, CostCurve) else coarse_curve(full, ks, sigma, rng, filled)
                    if across:  # given an OnlineCost, the proposer keeps it (and what it learned) as it is
                        curve = cost_model(config, curve)
                    kept = []  # the proposers made so far: the last one's shape is the next one's start

                    def make_one(truth, curve=curve, kept=kept, config=config):
                        cost = curve
                        if kept_shape and not isinstance(curve, OnlineCost):
                            cost = cost_model(config, curve, kept[-1].cost.learned_shape() if kept else None)
                        kept.append(
                            AdaptiveProposer(
                                config, cost=cost, excluded=excluded, text_classes=classes, digit_tokens=digits
                            )
                        )
                        return kept[-1]

                    make = {"draftless": make_one}

                    def tell(k, head_rows=None, rng=rng):  # the pass's time as the loop would have measured it
                        excess = 1.0 if k in full.ks else stair_excess
                        seconds = full.at(k) if head_rows is None else full.staged_at(k, head_rows)
                        return float(seconds) * excess * float(np.exp(rng.normal(0.0, pass_noise)))

                    for row in replay(data["outputs"], make, cost=full, told=tell):
                        draws.setdefault(row["suite"], []).append(row["est_speedup"])
                out[(name, sigma, rate)] = draws
    return out


def markdown(priced):
    suites = sorted({s for draws in priced.values() for s in draws}, key=lambda s: (s == "all", s))
    base = priced[next(key for key in priced if key[0] == "every calibrated length" and key[1] == 0.0)]
    lines = [
        "Modelled speedup over plain decoding (mean over the draws; worst draw and change against the "
        "run's own curve, first shape rate, in brackets).",
        "",
        "| curve the policy drafts under | timing noise | shape rate | " + " | ".join(suites) + " |",
        "|---|---|---|" + "---|" * len(suites),
    ]
    for (name, sigma, rate), draws in priced.items():
        cells = []
        for s in suites:
            mean, worst = float(np.mean(draws[s])), min(draws[s])
            change = 100 * (mean / base[s][0] - 1)
            cells.append(
                f"{mean:.3f} ({worst:.3f}, {change:+.1f} %)" if len(draws[s]) > 1 else f"{mean:.3f} ({change:+.1f} %)"
            )
        lines.append(f"| {name} | {sigma:.2f} | {rate:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.coarse_curve", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--noise",
        default="0,0.05,0.1",
        help="comma-separated standard deviations of the log-normal noise on each timing",
    )
    parser.add_argument("--seeds", type=int, default=5, help="noise draws per noisy curve")
    parser.add_argument(
        "--shape-rates",
        default="0",
        help="comma-separated rates at which the policy learns the curve's shape from its passes",
    )
    parser.add_argument(
        "--pass-noise",
        type=float,
        default=0.15,
        help="standard deviation of the log-normal noise on each pass's time told to the policy",
    )
    parser.add_argument(
        "--subsets",
        default=",".join(SHORT_NAMES),
        help=f"comma-separated curves to draft under, of {', '.join(SHORT_NAMES)}",
    )
    parser.add_argument(
        "--across-requests",
        action="store_true",
        help="one cost model for all the run's requests in order, learning across them",
    )
    parser.add_argument(
        "--filled", action="store_true", help="fill each subset's curve in at the run's other lengths by interpolation"
    )
    parser.add_argument(
        "--stair-excess",
        type=float,
        default=1.0,
        help="a pass between the run's knots is told to take this many times the line between them",
    )
    parser.add_argument(
        "--learn-at-knots",
        action="store_true",
        help="learn the shape from passes at the knots' lengths only (shape_at_knots)",
    )
    parser.add_argument(
        "--kept-shape",
        action="store_true",
        help="each request starts from the shape the one before it learned (kept on disk)",
    )
    parser.add_argument(
        "--levels", default="", help="comma-separated factors: also draft under the run's curve divided by each"
    )
    parser.add_argument(
        "--averaged-level",
        action="store_true",
        help="learn with the scale averaged up from 1, not set by the first pass (first_level off)",
    )
    parser.add_argument(
        "--curve-from",
        type=Path,
        help="also draft under this other run's curve (a stale shape), every pass charged at this run's",
    )
    args, data, full = parse_run_arguments(parser, argv)
    try:
        noises = tuple(float(x) for x in args.noise.split(","))
    except ValueError:
        parser.error(f"--noise must be comma-separated numbers, got {args.noise!r}")
    if not noises or any(not 0 <= s < 1 for s in noises) or 0.0 not in noises:
        parser.error(f"--noise must include 0 and hold values in [0, 1), got {args.noise!r}")
    if args.seeds < 1:
        parser.error(f"--seeds must be at least 1, got {args.seeds}")
    try:
        rates = tuple(float(x) for x in args.shape_rates.split(","))
    except ValueError:
        parser.error(f"--shape-rates must be comma-separated numbers, got {args.shape_rates!r}")
    try:
        levels = tuple(float(x) for x in args.levels.split(",") if x.strip())
    except ValueError:
        parser.error(f"--levels must be comma-separated numbers, got {args.levels!r}")
    if any(not 0 < lv < float("inf") for lv in levels):
        parser.error(f"--levels must be positive and finite, got {args.levels!r}")
    if not rates or any(not 0 <= r < 1 for r in rates) or not 0 <= args.pass_noise < 1:
        parser.error("--shape-rates and --pass-noise must hold values in [0, 1)")
    subsets = [x.strip() for x in args.subsets.split(",") if x.strip()]
    if "every" not in subsets or any(x not in SHORT_NAMES for x in subsets):
        parser.error(f"--subsets must name 'every' and others of {', '.join(SHORT_NAMES)}, got {args.subsets!r}")
    if not 1.0 <= args.stair_excess < 10:
        parser.error(f"--stair-excess must be in [1, 10), got {args.stair_excess}")
    if args.kept_shape and args.across_requests:
        parser.error("--kept-shape and --across-requests are two ways of carrying what was learned: name one")
    stale = None if args.curve_from is None else recorded_cost(json.loads(args.curve_from.read_text()))
    priced = price(
        data,
        full,
        noises,
        args.seeds,
        rates,
        args.pass_noise,
        stale,
        [SHORT_NAMES[x] for x in subsets],
        args.across_requests,
        levels,
        not args.averaged_level,
        args.kept_shape,
        args.filled,
        args.stair_excess,
        args.learn_at_knots,
    )
    sys.stdout.write(markdown(priced))
    if args.json:
        rows = [
            {"curve": name, "noise": sigma, "shape_rate": rate, "suite": s, "est_speedup": draws}
            for (name, sigma, rate), by_suite in priced.items()
            for s, draws in by_suite.items()
        ]
        args.json.write_text(json.dumps({"source": str(args.run_json), "rows": rows}, indent=1))
    return priced


if __name__ == "__main__":
    main()

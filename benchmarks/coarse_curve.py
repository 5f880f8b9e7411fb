"""What a shorter calibration would cost: replay a recorded run with the adaptive policy drafting under a cost
curve measured at fewer draft lengths, or timed once each with noise, while every pass is charged at the run's
full calibrated curve.

The library calibrates once per model, device, dtype and thread count: 17 lengths timed in two interleaved rounds
after a warm-up of the longest and the shortest (about 7 s for Gemma 3 270M on a 2-core CPU; 20-40 s, every
length warmed and timed in five rounds, before session 31). A calibration of a second or two fits far less
there: a warm-up and one timed pass at two lengths (Gemma: c(0) + c(63) is about 0.9 s). This tool prices such
curves on recorded outputs: a subset of the run's lengths (the policy interpolates between them, as it does
between any knots), and log-normal noise on each length's timing (``--noise``, over ``--seeds`` draws).
Model-free, like ``benchmarks.replay``; a subset that names a length the run did not calibrate is left out.
"""

import argparse
import json
import sys

import numpy as np

from benchmarks.replay import parse_run_arguments, recorded_config, replay, run_text_classes
from draftless.lookup import AdaptiveConfig, AdaptiveProposer
from draftless.lookup.cost_model import CostCurve

SUBSETS = {  # name -> draft lengths kept (None: every length the run calibrated)
    "every calibrated length": None,
    "nine: 0-4, 8, 16, 32, 64": (0, 1, 2, 3, 4, 8, 16, 32, 64),
    "low stair edges: 0, 7, 15, 31, 63": (0, 7, 15, 31, 63),
    "three: 0, 15, 63": (0, 15, 63),
    "two: 0, 63": (0, 63),
}


def coarse_curve(full, ks, sigma, rng):
    """``full`` measured at ``ks`` only, each length's time multiplied by exp(N(0, sigma)) (one noisy timing)."""
    ks = tuple(full.ks) if ks is None else tuple(ks)
    noise = np.exp(rng.normal(0.0, sigma, len(ks))) if sigma > 0 else np.ones(len(ks))
    return CostCurve(ks, tuple(float(full.at(k)) * float(m) for k, m in zip(ks, noise)))


def price(data, full, noises=(0.0, 0.05, 0.1), seeds=5):
    """``{(subset name, sigma): {suite: [modelled speedup of each draw]}}``: the policy the run used drafting under
    each coarse curve, every pass charged at ``full``."""
    config = recorded_config(data) if "draftless_config" in data else AdaptiveConfig()  # older runs: the default
    excluded = tuple(data.get("inexact_drafts", ()))
    classes = run_text_classes(data)
    out = {}
    for name, ks in SUBSETS.items():
        if ks is not None and not set(ks) <= set(full.ks):
            continue
        for sigma in noises:
            draws = {}
            for seed in range(seeds if sigma > 0 else 1):
                curve = coarse_curve(full, ks, sigma, np.random.default_rng(seed))
                make = {"draftless": lambda truth, curve=curve: AdaptiveProposer(config, cost=curve, excluded=excluded,
                                                                                 text_classes=classes)}
                for row in replay(data["outputs"], make, cost=full):
                    draws.setdefault(row["suite"], []).append(row["est_speedup"])
            out[(name, sigma)] = draws
    return out


def markdown(priced):
    suites = sorted({s for draws in priced.values() for s in draws}, key=lambda s: (s == "all", s))
    base = priced[("every calibrated length", 0.0)]
    lines = ["Modelled speedup over plain decoding (mean over the noise draws; worst draw and change against the "
             "run's own curve in brackets).", "",
             "| curve the policy drafts under | timing noise | " + " | ".join(suites) + " |",
             "|---|---|" + "---|" * len(suites)]
    for (name, sigma), draws in priced.items():
        cells = []
        for s in suites:
            mean, worst = float(np.mean(draws[s])), min(draws[s])
            change = 100 * (mean / base[s][0] - 1)
            cells.append(f"{mean:.3f} ({worst:.3f}, {change:+.1f} %)" if sigma > 0 else f"{mean:.3f} ({change:+.1f} %)")
        lines.append(f"| {name} | {sigma:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.coarse_curve", description=__doc__.splitlines()[0])
    parser.add_argument("--noise", default="0,0.05,0.1",
                        help="comma-separated standard deviations of the log-normal noise on each timing")
    parser.add_argument("--seeds", type=int, default=5, help="noise draws per noisy curve")
    args, data, full = parse_run_arguments(parser, argv)
    try:
        noises = tuple(float(x) for x in args.noise.split(","))
    except ValueError:
        parser.error(f"--noise must be comma-separated numbers, got {args.noise!r}")
    if not noises or any(not 0 <= s < 1 for s in noises) or 0.0 not in noises:
        parser.error(f"--noise must include 0 and hold values in [0, 1), got {args.noise!r}")
    if args.seeds < 1:
        parser.error(f"--seeds must be at least 1, got {args.seeds}")
    priced = price(data, full, noises, args.seeds)
    sys.stdout.write(markdown(priced))
    if args.json:
        rows = [{"curve": name, "noise": sigma, "suite": s, "est_speedup": draws}
                for (name, sigma), by_suite in priced.items() for s, draws in by_suite.items()]
        args.json.write_text(json.dumps({"source": str(args.run_json), "rows": rows}, indent=1))
    return priced


if __name__ == "__main__":
    main()

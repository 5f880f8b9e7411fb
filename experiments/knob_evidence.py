"""The evidence for one knob of the adaptive policy across recorded runs: replay every run with the knob at each
value (the other knobs at their defaults) and report, against the first value, the geometric mean gain in
modelled speedup over every suite column of every run, the worst and best columns, the same per model and suite,
and each run's overall column.

    python -m experiments.knob_evidence RUN.json ... --knob reflow --values false,true

Each run is replayed under its own calibrated cost curve, with the draft lengths its device did not verify
exactly left out, as ``benchmarks.replay`` does. Knobs that hold a tuple (``prior``) are not supported here.
"""

import argparse
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

from benchmarks.methods import knob_value
from benchmarks.replay import suite_speedups
from draftless.lookup import AdaptiveConfig


def parse_values(knob, text):
    """``text``'s comma-separated values of ``knob`` (``knob_value``), at least two."""
    values = [knob_value(knob, item) for item in (v.strip() for v in text.split(",") if v.strip())]
    if len(values) < 2:
        raise ValueError(f"values needs at least two values (the first is the baseline), got {text!r}")
    for v in values:
        AdaptiveConfig(**{knob: v})  # the config's own checks: a ValueError or TypeError naming the knob
    return values


def geometric_gain(ratios):
    """The geometric mean of speedup ratios, as a gain (0.01: 1 % faster)."""
    return float(np.exp(np.mean(np.log(ratios)))) - 1


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.knob_evidence", description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="JSON files written by benchmarks.run --json")
    parser.add_argument("--knob", required=True, help="an AdaptiveConfig field")
    parser.add_argument("--values", required=True, help="comma-separated values; the first is the baseline")
    args = parser.parse_args(argv)
    try:
        values = parse_values(args.knob, args.values)
    except (ValueError, TypeError) as err:
        parser.error(str(err))
    configs = {v: AdaptiveConfig(**{args.knob: v}) for v in values}
    base = values[0]
    gains = {v: [] for v in values[1:]}
    overall = []
    for path in tqdm(args.runs, desc="runs", file=sys.stderr):
        result = suite_speedups(path, configs)
        for v in values[1:]:
            for suite, speedup in result[v].items():
                if suite != "all":
                    gains[v].append(
                        (speedup / result[base][suite], f"{path.stem}: {suite}", (path.stem.split("_")[0], suite))
                    )
        overall.append((path.stem, result[base]["all"], [result[v]["all"] for v in values[1:]]))
    n = len(next(iter(gains.values())))
    lines = [
        f"{args.knob}, against {base}, over {n} suite columns of {len(args.runs)} runs: geometric mean "
        "gain in modelled speedup, and the worst and best columns.",
        "",
        "| value | mean | worst | best |",
        "|---|---|---|---|",
    ]
    for v, column in gains.items():
        mean = geometric_gain([g for g, _, _ in column])
        (lo, lo_at, _), (hi, hi_at, _) = min(column), max(column)
        lines.append(
            f"| {v} | {100 * mean:+.1f} % | {100 * (lo - 1):+.1f} % ({lo_at}) | {100 * (hi - 1):+.1f} % ({hi_at}) |"
        )
    lines += [
        "",
        "By model (the run's name up to its first underscore) and suite:",
        "",
        "| value | model | suite | columns | mean | worst | best |",
        "|---|---|---|---|---|---|---|",
    ]
    for v, column in gains.items():
        groups = {}
        for g, _, key in column:
            groups.setdefault(key, []).append(g)
        for (model, suite), gs in sorted(groups.items()):
            lines.append(
                f"| {v} | {model} | {suite} | {len(gs)} | {100 * geometric_gain(gs):+.2f} % | "
                f"{100 * (min(gs) - 1):+.2f} % | {100 * (max(gs) - 1):+.2f} % |"
            )
    lines += [
        "",
        f"| run | all suites, {base} | " + " | ".join(f"{v}" for v in values[1:]) + " |",
        "|---|---|" + "---|" * (len(values) - 1),
    ]
    for stem, b, others in overall:
        lines.append(
            f"| {stem} | {b:.3f} | " + " | ".join(f"{o:.3f} ({100 * (o / b - 1):+.1f} %)" for o in others) + " |"
        )
    sys.stdout.write("\n".join(lines) + "\n")
    return gains


if __name__ == "__main__":
    main()

"""Whether the learned cost shape settles where a run's own passes put it, whatever it starts from: the run's
real passes (each draft length and the seconds its pass took, in the order they ran) fed to ``OnlineCost`` as the
loop feeds them, from a flat shape, from the shape the run started from (the one kept on disk) and from every knot
at ``--level`` times the calibration, and the shape and scale each ends at.

    python -m experiments.shape_drift RUN.json [RUN.json ...] [--level 0.7] [--leak 0.0,0.003] [--plain-level]
                                     [--json PATH]

Only the knots above k = 0 move with the passes: plain steps are pinned and set the level through the scale. A
shape that ends where it started from, whichever start, is one the passes do not identify: all knots above k = 0
moving together against the scale change only what a plain step is predicted to cost, and plain steps are a few
per cent of a drafting run's passes. ``--leak`` (an exploratory variant, not a library knob) draws every knot back
towards the calibration by that fraction of its log-multiplier after each pass, to show what pins the level.
``--plain-level`` (another exploratory variant) also replays a cost in which a plain step that moves the scale moves
every knot above k = 0 the other way, each by as much as its passes have taught it (1 - (1 - shape_rate) **
evidence), so that the timed drafts' predicted costs stay where they were and the plain steps set their level.
Also printed: each length's observed seconds over the calibration's (medians), relative to the plain step's.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from benchmarks.recorded_run import recorded_config
from draftless.lookup.cost_model import SHAPE_BOUND, CostCurve, OnlineCost

SHOWN_KS = (1, 2, 4, 7, 15, 31, 48, 63)  # the knots printed (of the default curve's)


class LeakyCost(OnlineCost):
    """``OnlineCost`` whose log-multipliers shrink by ``leak`` of themselves after each pass."""

    def __init__(self, curve, leak=0.0, **kw):
        super().__init__(curve, **kw)
        self.leak = float(leak)

    def observe(self, k, seconds, head_rows=None):
        super().observe(k, seconds, head_rows)
        if self.leak:
            self.log_shape *= 1.0 - self.leak
            self._refresh()


class PlainLevelCost(LeakyCost):
    """``LeakyCost`` whose plain steps move the level of every knot above k = 0 against the scale's change."""

    def observe(self, k, seconds, head_rows=None):
        before, counted = self.scale, self.observed
        super().observe(k, seconds, head_rows)
        if k == 0 and counted and seconds > 0:  # the first pass sets the scale outright: no level to move then
            # each knot by as much as its passes taught it: a knot no pass timed keeps its level
            self.log_shape[1:] += self.knot_trust()[1:] * np.log(before / self.scale)
            np.clip(self.log_shape, -np.log(SHAPE_BOUND), np.log(SHAPE_BOUND), out=self.log_shape)
            self._refresh()


def run_passes(run):
    """``(curve, start log-shape or None, [(k, seconds), ...])`` of the ``draftless`` method's passes in ``run``."""
    cc = run["cost_curve"]
    curve = CostCurve(tuple(cc["ks"]), tuple(cc["seconds"]))
    mine = [r for r in run["runs"] if r.get("method") == "draftless"]
    if not mine:
        raise ValueError("the run holds no draftless requests")
    passes = [(int(t[0]), float(s)) for r in mine for t, s in zip(r["draft_trace"], r["pass_seconds"])]
    start = mine[0].get("start_shape")
    return curve, (np.asarray(start, dtype=np.float64) if start else None), passes


def settle(curve, passes, start, config, leak=0.0, plain_level=False):
    """``(shape at each knot, scale)`` after feeding ``passes`` to a cost that starts from log-shape ``start``."""
    cost = (PlainLevelCost if plain_level else LeakyCost)(
        curve,
        leak=leak,
        shape_rate=config.shape_rate,
        first_level=config.first_level,
        log_shape=start,
        knots_only=config.shape_at_knots,
        follow_timed=config.follow_timed,
    )
    for k, seconds in passes:
        cost.observe(k, seconds)
    return np.exp(cost.learned_shape()), cost.scale


def observed_shape(curve, passes):
    """``{k: median observed/calibrated at k, over that at k = 0}`` for every drafted length with five passes."""
    by = {}
    for k, seconds in passes:
        by.setdefault(k, []).append(seconds / curve.at(k))
    if 0 not in by:
        return {}
    plain = float(np.median(by[0]))
    return {k: float(np.median(v)) / plain for k, v in sorted(by.items()) if len(v) >= 5}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.shape_drift", description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--level", type=float, default=0.7, help="the third start: every knot at this multiplier")
    parser.add_argument("--leak", default="0.0", help="comma-separated leaks to try (0: the library's learning)")
    parser.add_argument("--plain-level", action="store_true", help="also replay plain steps setting the level")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if not 0 < args.level < 3:
        parser.error(f"--level must be in (0, 3), got {args.level}")
    leaks = [float(x) for x in args.leak.split(",")]
    if any(not 0 <= x < 1 for x in leaks):
        parser.error(f"--leak values must be in [0, 1), got {args.leak}")
    rows = []
    for path in args.runs:
        run = json.loads(path.read_text())
        curve, kept, passes = run_passes(run)
        config = recorded_config(run)
        shown = [i for i, k in enumerate(curve.ks) if k in SHOWN_KS]
        level = np.r_[0.0, np.full(len(curve.ks) - 1, np.log(args.level))]
        starts = {"flat": None, "kept": kept, f"all {args.level:g}": level}
        obs = observed_shape(curve, passes)
        print(
            f"{path.name}: {len(passes)} passes; observed/calibrated over the plain step's: "
            + ", ".join(f"k={k} {v:.2f}" for k, v in obs.items() if k in SHOWN_KS or k == 0)
        )
        print("| leak | start | " + " | ".join(f"k={curve.ks[i]}" for i in shown) + " | scale |")
        print("|---|---|" + "---|" * (len(shown) + 1))
        for leak, plain in [(x, False) for x in leaks] + ([(0.0, True)] if args.plain_level else []):
            for name, start in starts.items():
                if start is None and name == "kept":
                    continue
                shape, scale = settle(curve, passes, start, config, leak, plain)
                label = "plain level" if plain else f"{leak:g}"
                print(f"| {label} | {name} | " + " | ".join(f"{shape[i]:.2f}" for i in shown) + f" | {scale:.2f} |")
                rows.append(
                    {
                        "run": path.name,
                        "leak": leak,
                        "plain_level": plain,
                        "start": name,
                        "shape": shape.tolist(),
                        "scale": scale,
                    }
                )
        print()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How long a model's first calibration takes on this machine: ``calibration.calibrate`` from an empty calibration
cache, each time in a fresh process (as a user's first run meets it: compiled kernels loaded, oneDNN's primitives
made, the screen's bfloat16 copy built), with the seconds each stage took and how much of the cost-curve stage
was the curve's passes after its first (the rest: the lean layers' check, the screen's copy and race, the first,
longest pass).

    python -m experiments.first_calibration --model gemma-3-270m --repeats 3 [--output-layer] [--json PATH]

The model loads from the user's cache as always; only the calibration is measured into a temporary cache. The
stages are ``calibration.STAGES``: the linear layers' plans, then the cost curve (which begins with the lean
layers' check and the screen's bfloat16 copy and product race, then times the curve's passes), and with
``--output-layer`` (what a sampled run reads) the output layer's plan.
"""

import argparse
import json
import os
import sys
import tempfile
import time

from .fresh_processes import median_table, run_fresh


def time_first_calibration(model, output_layer=False):
    """``{"total": s, stage: s, ..., "curve passes after the first": s}`` for one calibration of ``model``
    measured into the calibration cache as it stands (an empty one for a first calibration): each stage from the
    end of the one before it to its last step, and the cost curve's passes from the end of its first (the
    longest, a warm-up) to the end of its last."""
    from draftless.integration import calibration

    ends, firsts = {}, {}

    def progress(stage, done, total):
        now = time.perf_counter()
        firsts.setdefault(stage, now)
        ends[stage] = now

    start = time.perf_counter()
    calibration.calibrate(model, progress, output_layer=output_layer)
    out = {"total": time.perf_counter() - start}
    before = start
    for stage in calibration.STAGES:
        if stage in ends:
            out[stage] = ends[stage] - before
            before = ends[stage]
    if calibration.STAGES[1] in firsts:  # the curve stage's first step ends its first (warm-up) pass
        out["curve passes after the first"] = ends[calibration.STAGES[1]] - firsts[calibration.STAGES[1]]
    return out


def _once(args):
    from draftless.integration import load_model, store

    loaded = load_model(args.model)
    model = loaded[0] if isinstance(loaded, tuple) else loaded
    with tempfile.TemporaryDirectory(prefix="draftless-calibration-") as empty:
        os.environ["DRAFTLESS_CACHE"] = empty  # the model is loaded: only the calibration goes here
        store.forget_read_files()
        result = time_first_calibration(model, args.output_layer)
    sys.stdout.write(json.dumps(result) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m experiments.first_calibration", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes, one calibration each")
    parser.add_argument("--output-layer", action="store_true", help="the output layer's plan too (sampled runs)")
    parser.add_argument("--json", help="write every calibration's seconds here")
    parser.add_argument("--once", action="store_true", help=argparse.SUPPRESS)  # one calibration, in this process
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    if args.once:
        _once(args)
        return None
    command = [sys.executable, "-m", "experiments.first_calibration", "--model", args.model, "--once"]
    command += ["--output-layer"] if args.output_layer else []
    try:
        runs = run_fresh(command, args.repeats)
    except RuntimeError as error:
        sys.stderr.write(f"{error}\n")
        parser.error(f"the calibration of {args.model} failed")
    sys.stdout.write(
        median_table(
            f"{args.model}: first calibration from an empty cache, {len(runs)} fresh processes (seconds)", runs
        )
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "output_layer": args.output_layer, "runs": runs}, f, indent=1)
    return runs


if __name__ == "__main__":
    main()

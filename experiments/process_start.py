"""What a process pays before its first token, the calibration already cached: each stage from the interpreter's
start to a first and a second ``generate``, in fresh processes.

    python -m experiments.process_start --model gemma-3-270m --repeats 3 [--json PATH]

The stages, in order: importing torch, transformers and ``draftless.integration``; ``load_model`` (a bundled model's
GGUF found, its tokenizer and weights loaded); building a ``SpeculativeGenerator`` (the tokens' texts, for re-flowed
drafts); a first ``generate`` of ``--new-tokens`` tokens greedily from a short code prompt (the screen's bfloat16
copy and Numba's first kernel load happen there) and a second one, the same. A model's first calibration, if not
cached, lands in building the generator (the cost curve, and the linear-layer plans before it) and the first
``generate`` (what the curve did not need): run it once before (``experiments.first_calibration`` times it apart).

``--calibration empty`` measures a user's very first process instead: once the model is loaded, the calibration
cache is an empty directory, so the generator's build and first ``generate`` calibrate (the learned cost shape
starts afresh too). ``--calibration both`` runs one untimed process that fills the user's calibration cache, then
alternates cached and empty processes, ``--repeats`` of each, and reports what the first calibration adds to the
build and first ``generate`` together: the difference of the two medians. That is what a user waits for it,
which is less than ``calibrate``'s own time (``first_calibration``): the first passes' warm-up and the screen's
setup come with any process's first ``generate``.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from .fresh_processes import median_table, run_fresh

FIRST = ("build the generator", "first generate")  # where a first calibration lands

PROMPT = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n"


def _once(args):
    out, start = {}, time.perf_counter()

    def stage(name):
        nonlocal start
        now = time.perf_counter()
        out[name] = now - start
        start = now

    import torch  # noqa: F401

    stage("import torch")
    import transformers  # noqa: F401

    stage("import transformers")
    from draftless.integration import SpeculativeGenerator, load_model

    stage("import draftless.integration")
    model, tokenizer = load_model(args.model)
    stage("load_model (its tokenizer and weights)")
    empty = None
    if args.empty_calibration:  # the model is loaded: only the calibration (and the kept shape) goes here
        from draftless.integration import store

        empty = tempfile.TemporaryDirectory(prefix="draftless-empty-calibration-")
        os.environ["DRAFTLESS_CACHE"] = empty.name
        store.forget_read_files()
        start = time.perf_counter()  # the empty cache's setup counted in no stage
    generator = SpeculativeGenerator(model, tokenizer)
    stage("build the generator")
    inputs = tokenizer(PROMPT, return_tensors="pt")
    for name in ("first generate", "second generate"):
        generator.generate(**inputs, max_new_tokens=args.new_tokens, do_sample=False)
        stage(name)
    sys.stdout.write(json.dumps(out) + "\n")
    if empty is not None:
        empty.cleanup()


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.process_start", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-270m", help="a bundled model or a local transformers directory")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--json", help="write every process's seconds here")
    parser.add_argument(
        "--calibration",
        choices=("cached", "empty", "both"),
        default="cached",
        help="the calibration as cached, an empty calibration cache, or both alternately",
    )
    parser.add_argument("--once", action="store_true", help=argparse.SUPPRESS)  # one process: this one
    parser.add_argument("--empty-calibration", action="store_true", help=argparse.SUPPRESS)  # ... calibrating
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.new_tokens < 1:
        parser.error(f"--repeats and --new-tokens must be at least 1, got {args.repeats} and {args.new_tokens}")
    if args.once:
        _once(args)
        return None
    command = [
        sys.executable,
        "-m",
        "experiments.process_start",
        "--model",
        str(args.model),
        "--once",
        "--new-tokens",
        str(args.new_tokens),
    ]
    kinds = {"cached": ["cached"], "empty": ["empty"], "both": ["cached", "empty"]}[args.calibration]
    runs = {kind: [] for kind in kinds}
    try:
        if args.calibration == "both":
            run_fresh(command, 1)  # untimed: the user's calibration cache filled, as the cached runs read it
        for _ in range(args.repeats):
            for kind in kinds:
                runs[kind] += run_fresh(command + (["--empty-calibration"] if kind == "empty" else []), 1)
    except RuntimeError as error:
        sys.stderr.write(f"{error}\n")
        parser.error(f"a process starting {args.model} failed")
    for kind in kinds:
        sys.stdout.write(
            median_table(
                f"{args.model}: a process's start, {len(runs[kind])} fresh processes, the calibration {kind} (seconds)",
                runs[kind],
            )
        )
    felt = None
    if args.calibration == "both":
        felt = statistics.median(sum(r[part] for part in FIRST) for r in runs["empty"]) - statistics.median(
            sum(r[part] for part in FIRST) for r in runs["cached"]
        )
        sys.stdout.write(
            f"\nThe first calibration adds {felt:.2f} s to building the generator and its first generate "
            "(medians of the two together, empty minus cached).\n"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "model": str(args.model),
                    "new_tokens": args.new_tokens,
                    "calibration": args.calibration,
                    "runs": runs[kinds[0]] if len(kinds) == 1 else runs,
                    "first_calibration_felt": felt,
                },
                f,
                indent=1,
            )
    return runs[kinds[0]] if len(kinds) == 1 else runs


if __name__ == "__main__":
    main()

"""What a process pays before its first token, the calibration already cached: each stage from the interpreter's
start to a first and a second ``generate``, in fresh processes.

    python -m benchmarks.process_start --model gemma-3-270m --repeats 3 [--json PATH]

The stages, in order: importing torch, transformers and ``draftless.integration``; ``load_model`` (a bundled model's
GGUF found, its tokenizer and weights loaded); building a ``SpeculativeGenerator`` (the tokens' texts, for re-flowed
drafts); a first ``generate`` of ``--new-tokens`` tokens greedily from a short code prompt (the screen's bfloat16
copy and Numba's first kernel load happen there) and a second one, the same. A model's first calibration, if not
cached, lands in the first ``generate``: run it once before (``benchmarks.first_calibration`` times that apart).
"""

import argparse
import json
import sys
import time

from .fresh_processes import median_table, run_fresh

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
    generator = SpeculativeGenerator(model, tokenizer)
    stage("build the generator")
    inputs = tokenizer(PROMPT, return_tensors="pt")
    for name in ("first generate", "second generate"):
        generator.generate(**inputs, max_new_tokens=args.new_tokens, do_sample=False)
        stage(name)
    sys.stdout.write(json.dumps(out) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.process_start", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-270m", help="a bundled model or a local transformers directory")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--json", help="write every process's seconds here")
    parser.add_argument("--once", action="store_true", help=argparse.SUPPRESS)  # one process: this one
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.new_tokens < 1:
        parser.error(f"--repeats and --new-tokens must be at least 1, got {args.repeats} and {args.new_tokens}")
    if args.once:
        _once(args)
        return None
    command = [sys.executable, "-m", "benchmarks.process_start", "--model", str(args.model), "--once",
               "--new-tokens", str(args.new_tokens)]
    try:
        runs = run_fresh(command, args.repeats)
    except RuntimeError as error:
        sys.stderr.write(f"{error}\n")
        parser.error(f"a process starting {args.model} failed")
    sys.stdout.write(median_table(f"{args.model}: a process's start, {len(runs)} fresh processes (seconds)", runs))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": str(args.model), "new_tokens": args.new_tokens, "runs": runs}, f, indent=1)
    return runs


if __name__ == "__main__":
    main()

"""How the cost curve's shape kept on disk (``integration.kept_state``) moves when many short processes each run
one generate, as CLI calls, a test suite's generators or a script run in a loop do: each a fresh process that reads
the kept shape, learns from its passes and writes it back.

    python -m experiments.kept_shape_drift --model gemma-3-270m --processes 16 [--suite code_edit] [--new-tokens 96]
        [--json PATH]

The processes share a temporary cache: the user's calibration of the model copied into it (measured first where
there is none), its kept shape left out so that the first process starts from the calibration alone, the
converted models linked. Process ``i`` generates greedily from the suite's prompt ``i`` (round robin over
``--prompts``) and reports its passes and the kept shape it left: the learned multiplier at each knot of the curve,
1 where nothing was learned. Where the processes make many passes at one length and few plain steps, the knot of
that length takes up the level the plain steps cannot pin : on Gemma's summarization prompts its k = 2
knot settles near 0.7 in 16 processes, where the passes themselves run 0.89-0.93 of the calibration's ratio to a
plain step (; 0.61-0.68 while each process's first pass, slowed by one-time work, was still told to the
cost model, ``pass_timing.seconds_to_learn_from``).
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from .fresh_processes import run_fresh

KNOTS_SHOWN = (1, 2, 4, 8, 16, 32, 64)  # the table's columns (the JSON holds every knot)


def shared_cache(user_root, into):
    """A cache at ``into`` for the processes to share: ``user_root``'s calibration files but the kept shapes (the
    ``shape-v*`` files) copied, its ``models`` and ``gguf`` folders linked where they exist."""
    user_root, into = Path(user_root), Path(into)
    (into / "calibration").mkdir(parents=True, exist_ok=True)
    for path in sorted((user_root / "calibration").glob("*.json")):
        if "-shape-v" not in path.name:
            shutil.copy2(path, into / "calibration" / path.name)
    for name in ("models", "gguf"):
        if (user_root / name).is_dir() and not (into / name).exists():
            (into / name).symlink_to(user_root / name, target_is_directory=True)
    return into


def _once(args):
    """One process: the generate, then what it left on disk (its last line of output, JSON)."""
    from benchmarks.suites import build, render
    from draftless.integration import SpeculativeGenerator, load_model
    from draftless.integration.kept_state import load_learned_state

    model, tokenizer = load_model(args.model)
    generator = SpeculativeGenerator(model, tokenizer)
    tasks = build(args.suite, args.prompts)
    task = tasks[args.index % len(tasks)]
    inputs = tokenizer(render(task, tokenizer), return_tensors="pt").to(model.device)
    generator.generate(**inputs, max_new_tokens=args.new_tokens, do_sample=False)
    stats = generator.last_stats
    curve = generator.proposer.cost.curve
    shape, evidence = load_learned_state(model, curve)
    shape = np.zeros(len(curve.ks)) if shape is None else shape
    sys.stdout.write(
        json.dumps(
            {
                "prompt": task.prompt_id,
                "passes": stats.passes,
                "tokens_per_pass": stats.mean_accepted_length,
                "ks": list(curve.ks),
                "multiplier": [float(np.exp(x)) for x in shape],
                "evidence": [] if evidence is None else [float(x) for x in evidence],
            }
        )
        + "\n"
    )


def table(model, runs):
    """A markdown table: one row per process, its passes, tokens a pass and the kept multiplier at ``KNOTS_SHOWN``."""
    ks = runs[0]["ks"]
    shown = [k for k in KNOTS_SHOWN if k in ks]
    lines = [
        f"{model}: the kept cost-curve shape after each of {len(runs)} fresh processes, one generate each",
        "",
        "| process | prompt | passes | tokens a pass | " + " | ".join(f"k = {k}" for k in shown) + " |",
        "|---|---|---|---|" + "---|" * len(shown),
    ]
    for i, run in enumerate(runs, 1):
        by_k = dict(zip(run["ks"], run["multiplier"]))
        lines.append(
            f"| {i} | {run['prompt']} | {run['passes']} | {run['tokens_per_pass']:.2f} | "
            + " | ".join(f"{by_k[k]:.3f}" for k in shown)
            + " |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.kept_shape_drift", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-270m", help="a bundled model or a local transformers directory")
    parser.add_argument("--processes", type=int, default=16, help="fresh processes, one generate each")
    parser.add_argument("--suite", default="code_edit")
    parser.add_argument("--prompts", type=int, default=10, help="the suite's first prompts, taken in turn")
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--json", help="write every process's report here")
    parser.add_argument("--once", action="store_true", help=argparse.SUPPRESS)  # one process: this one
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)  # ... its prompt's
    args = parser.parse_args(argv)
    if min(args.processes, args.prompts, args.new_tokens) < 1:
        parser.error(
            f"--processes, --prompts and --new-tokens must be at least 1, got {args.processes}, "
            f"{args.prompts} and {args.new_tokens}"
        )
    if args.once:
        _once(args)
        return None
    from draftless.integration.store import cache_root

    with tempfile.TemporaryDirectory(prefix="draftless-kept-shape-") as folder:
        shared = shared_cache(cache_root(), folder)
        command = [
            sys.executable,
            "-m",
            "experiments.kept_shape_drift",
            "--model",
            str(args.model),
            "--once",
            "--suite",
            args.suite,
            "--prompts",
            str(args.prompts),
            "--new-tokens",
            str(args.new_tokens),
        ]
        env = {**os.environ, "DRAFTLESS_CACHE": str(shared)}  # the children's cache; this process's unmoved
        runs = []
        try:
            for i in range(args.processes):
                runs += run_fresh(command + ["--index", str(i)], 1, env=env)
        except RuntimeError as error:
            sys.stderr.write(f"{error}\n")
            parser.error(f"a process generating with {args.model} failed")
    sys.stdout.write(table(args.model, runs))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"model": str(args.model), "suite": args.suite, "new_tokens": args.new_tokens, "runs": runs},
                f,
                indent=1,
            )
    return runs


if __name__ == "__main__":
    main()

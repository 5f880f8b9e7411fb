"""What the default drafting policy chose, pass by pass, over one long generation.

    python -m benchmarks.trace_plot [--model M] [--suite code_edit] [--prompt-id code_5]
                                    [--max-new-tokens 512] [--cost-from RUN.json] --plot PATH [--json PATH]

Runs the library's default ``generate`` on one benchmark prompt and plots, against the number of tokens
generated so far, the draft length k the policy chose for each verification pass and how many of those
tokens the model accepted. Greedy output is checked against ``model.generate``. The policy's choices depend on
the shape of the cost curve only (a uniform slowdown scales every c(k) alike), so ``--cost-from`` a benchmark
run's JSON replays that run's calibrated curve, its shape held as it is (``shape_rate`` 0: learning it
from this machine's passes would tie the plot to this machine), and the plot shows what the benchmark's
policy would choose, whatever else the machine is doing.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from draftless.integration import SpeculativeGenerator, load_model
from draftless.lookup import AdaptiveConfig, AdaptiveProposer
from draftless.lookup.cost_model import CostCurve

from .run import encode_prompt
from .suites import SUITES, build, render


def trace(model_name, suite, prompt_id, max_new_tokens, cost=None):
    model, tokenizer = load_model(model_name)
    tasks = [t for t in build(suite) if prompt_id is None or t.prompt_id == prompt_id]
    if not tasks:
        raise ValueError(f"no prompt {prompt_id!r} in suite {suite!r}")
    task = tasks[0]
    inputs = encode_prompt(tokenizer, render(task, tokenizer))
    proposer = None if cost is None else AdaptiveProposer(AdaptiveConfig(shape_rate=0.0), cost=cost)
    gen = SpeculativeGenerator(model, tokenizer, proposer=proposer)
    t0 = time.perf_counter()
    out = gen.generate(**inputs, max_new_tokens=max_new_tokens)
    seconds = time.perf_counter() - t0
    reference = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    stats = gen.last_stats
    return {
        "model": model_name,
        "suite": suite,
        "prompt_id": task.prompt_id,
        "prompt_tokens": int(inputs["input_ids"].shape[1]),
        "new_tokens": stats.new_tokens,
        "seconds": round(seconds, 3),
        "passes": stats.passes,
        "mean_accepted": round(stats.mean_accepted_length, 3),
        "identical_to_vanilla": bool(torch.equal(out, reference)),
        "draft_trace": [list(p) for p in stats.draft_trace],
    }


def recorded(run, suite, prompt_id):
    """The same result for a ``draftless`` run recorded by ``benchmarks.run --json`` (no model runs)."""
    for r in run["runs"]:
        if r["method"] == "draftless" and r["suite"] == suite and (prompt_id is None or r["prompt_id"] == prompt_id):
            return {
                "model": run["model"],
                "suite": suite,
                "prompt_id": r["prompt_id"],
                "prompt_tokens": r.get("prompt_tokens"),
                "new_tokens": r["new_tokens"],
                "seconds": r["total_s"],
                "passes": r["passes"],
                "mean_accepted": r["mean_accepted"],
                "identical_to_vanilla": r["identical_to_vanilla"],
                "draft_trace": r["draft_trace"],
            }
    raise ValueError(f"no recorded draftless run of {suite}/{prompt_id}")


def plot(result, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done, xs, ks, accepted = 1, [], [], []  # the prefill produced the first token
    for k, a in result["draft_trace"]:
        xs.append(done)
        ks.append(k)
        accepted.append(a)
        done += a + 1
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.step(xs, ks, where="post", label="draft length k chosen", color="tab:blue")
    ax.scatter(xs, accepted, s=12, color="tab:orange", label="draft tokens accepted", zorder=3)
    ax.set_xlabel("tokens generated before the pass")
    ax.set_ylabel("tokens")
    ax.set_title(
        f"{result['model']}, {result['suite']}/{result['prompt_id']}: {result['new_tokens']} tokens in "
        f"{result['passes']} passes (mean accepted {result['mean_accepted']:.2f} incl. bonus)"
    )
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.trace_plot", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--suite", default="code_edit", choices=list(SUITES))
    parser.add_argument("--prompt-id", default=None, help="a prompt of the suite (default: its first)")
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--plot", type=Path, required=True)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--cost-from", type=Path, help="use the cost curve that this run JSON calibrated")
    parser.add_argument("--from-run", type=Path, help="plot a draftless run recorded in this JSON (no model)")
    args = parser.parse_args(argv)
    if args.max_new_tokens < 1:
        parser.error("--max-new-tokens must be >= 1")
    if args.from_run:
        result = recorded(json.loads(args.from_run.read_text()), args.suite, args.prompt_id)
        plot(result, args.plot)
        return _report(result, args.json)
    cost = None
    if args.cost_from:
        curve = json.loads(args.cost_from.read_text())["cost_curve"]
        cost = CostCurve(tuple(curve["ks"]), tuple(curve["seconds"]))
    result = trace(args.model, args.suite, args.prompt_id, args.max_new_tokens, cost)
    plot(result, args.plot)
    return _report(result, args.json)


def _report(result, json_path):
    if json_path:
        json_path.write_text(json.dumps(result, indent=1))
    sys.stdout.write(
        f"{result['prompt_id']}: {result['new_tokens']} tokens, {result['passes']} passes, "
        f"mean accepted {result['mean_accepted']}, identical to vanilla: "
        f"{result['identical_to_vanilla']}; k per pass: {[k for k, _ in result['draft_trace']]}\n"
    )
    return result


if __name__ == "__main__":
    main()

"""Greedy speed check on the default model: plain generate vs transformers' prompt lookup vs draftless.

    python -m experiments.greedy_check [--model gemma-3-270m] [--repeats 3] [--json]

Prompt: the installed Python's ``json.dumps`` given as "rewrite this function", 128 new tokens, greedy. The
three methods run interleaved in one process, ``repeats`` times; the median time of each is reported with
tokens per second and whether the outputs are identical. A second prompt measures the wrapper's own
overhead: draftless with a proposer that never drafts, against ``model.generate`` (every step a plain
decode step on both sides).
"""

import argparse
import inspect
import json
import statistics
import sys
import time

import torch
from tqdm import tqdm

from draftless.integration import SpeculativeGenerator, load_model
from draftless.lookup import NullProposer


def dumps_prompt():
    return (
        "Rewrite this function so that it reads more clearly, keeping its behaviour:\n\n"
        f"{inspect.getsource(json.dumps)}\n\nRewritten function:\n"
    )


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def run(model_name, repeats, new_tokens):
    t0 = time.perf_counter()
    model, tokenizer = load_model(model_name)
    load_s = time.perf_counter() - t0
    inputs = tokenizer(dumps_prompt(), return_tensors="pt")
    draftless = SpeculativeGenerator(model, tokenizer)
    methods = {
        "generate": lambda: model.generate(**inputs, do_sample=False, max_new_tokens=new_tokens),
        "hf_prompt_lookup": lambda: model.generate(
            **inputs, do_sample=False, max_new_tokens=new_tokens, prompt_lookup_num_tokens=10
        ),
        "draftless": lambda: draftless.generate(**inputs, max_new_tokens=new_tokens),
    }
    t0 = time.perf_counter()
    methods["draftless"]()  # Numba compilation / caches, reported apart
    warmup_s = time.perf_counter() - t0
    times = {k: [] for k in methods}
    outputs = {}
    for _ in tqdm(range(repeats), desc="json.dumps rewrite", file=sys.stderr):
        for name, fn in methods.items():
            seconds, outputs[name] = _timed(fn)
            times[name].append(seconds)
    n_new = outputs["generate"].shape[1] - inputs["input_ids"].shape[1]
    rows = {
        k: {"median_s": round(statistics.median(v), 3), "tokens_per_s": round(n_new / statistics.median(v), 2)}
        for k, v in times.items()
    }
    identical = all(torch.equal(outputs["generate"], o) for o in outputs.values())

    plain = SpeculativeGenerator(model, tokenizer, proposer=NullProposer())
    quiet = tokenizer("Write a short poem about the sea at night.", return_tensors="pt")
    over = {"generate": [], "draftless_no_draft": []}
    for _ in tqdm(range(repeats), desc="overhead", file=sys.stderr):
        over["generate"].append(_timed(lambda: model.generate(**quiet, do_sample=False, max_new_tokens=new_tokens))[0])
        over["draftless_no_draft"].append(_timed(lambda: plain.generate(**quiet, max_new_tokens=new_tokens))[0])
    ratio = statistics.median(over["draftless_no_draft"]) / statistics.median(over["generate"])
    return {
        "model": model_name,
        "new_tokens": int(n_new),
        "repeats": repeats,
        "load_s": round(load_s, 2),
        "warmup_s": round(warmup_s, 2),
        "methods": rows,
        "all_identical": bool(identical),
        "draftless_stats": {
            "passes": draftless.last_stats.passes,
            "mean_accepted_length": round(draftless.last_stats.mean_accepted_length, 2),
        },
        "speedup_vs_generate": round(rows["generate"]["median_s"] / rows["draftless"]["median_s"], 2),
        "speedup_vs_hf_prompt_lookup": round(rows["hf_prompt_lookup"]["median_s"] / rows["draftless"]["median_s"], 2),
        "overhead_ratio_no_draft": round(ratio, 4),
        "overhead_raw_s": {k: [round(x, 3) for x in v] for k, v in over.items()},
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = run(args.model, args.repeats, args.max_new_tokens)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"model load: {report['load_s']} s; draftless warm-up (Numba): {report['warmup_s']} s")
    for name, row in report["methods"].items():
        print(f"{name:>18}: {row['tokens_per_s']:7.2f} tok/s  ({row['median_s']:.2f} s)")
    print(
        f"identical outputs: {report['all_identical']}; draftless {report['speedup_vs_generate']}x generate, "
        f"{report['speedup_vs_hf_prompt_lookup']}x prompt lookup"
    )
    print(f"wrapper overhead with no draft: {report['overhead_ratio_no_draft']:.4f}x generate")


if __name__ == "__main__":
    main()

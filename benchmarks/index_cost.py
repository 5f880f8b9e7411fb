"""Per-token cost of the suffix index against rescanning baselines, at growing context lengths.

    python -m benchmarks.index_cost [--json] [--contexts 1000,10000,100000,1000000]

For each context length the index is built over that many tokens of a realistic stream (not timed), then
every following token is appended and the longest match plus a 16-token continuation is looked up: the
median microseconds per token (the fastest of three trials) are reported for draftless, for transformers' real
``PromptLookupCandidateGenerator`` (called as ``generate()`` calls it: the grown ``input_ids`` each step)
and for a Numba rescan-per-step matcher in the style of vLLM's n-gram proposer.
"""

import argparse
import json
import sys
import time

import numpy as np
from numba import njit
from tqdm import tqdm

from draftless.index import SuffixIndex

from .realistic_stream import repeated_with_edits, tokenised_base

DRAFT = 16
BLOCK = 25  # steps timed together; the median is taken over blocks


@njit(cache=True)
def rescan_propose(tokens, n, max_ngram, k, out):
    """vLLM-style: rescan the whole context for the longest suffix n-gram (1..max_ngram), earliest match
    first; copy up to ``k`` following tokens into ``out``. O(n) per call."""
    best_len = 0
    best_end = -1
    for e in range(n - 2, -1, -1):
        m = 0
        while m < max_ngram and m <= e and tokens[e - m] == tokens[n - 1 - m]:
            m += 1
        if m >= best_len and m > 0:
            best_len = m
            best_end = e
    count = 0
    if best_end >= 0:
        for i in range(best_end + 1, min(n, best_end + 1 + k)):
            out[count] = tokens[i]
            count += 1
    return count


TRIALS = 3  # each figure is the fastest of this many trials' medians: interference only ever adds time


def _median_us(step, steps):
    times = []
    for _ in range(max(1, steps // BLOCK)):
        t0 = time.perf_counter()
        for _ in range(BLOCK):
            step()
        times.append((time.perf_counter() - t0) / BLOCK)
    return float(np.median(times) * 1e6)


def time_draftless(stream, context, steps):
    idx = SuffixIndex(stream[:context])
    it = iter(stream[context : context + steps].tolist())

    def step():
        idx.extend(next(it))
        m = idx.longest_match()
        if m.length:
            idx.continuation(m.recent_end, DRAFT)

    us = _median_us(step, steps)
    return us, idx.nbytes / len(idx), idx


def time_hf(stream, context, steps):
    import torch
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    gen = PromptLookupCandidateGenerator(num_output_tokens=DRAFT, max_length=len(stream) + 10)
    state = {"ids": torch.as_tensor(stream[:context]).view(1, -1)}
    it = iter(stream[context : context + steps].tolist())

    def step():
        state["ids"] = torch.cat([state["ids"], torch.tensor([[next(it)]])], dim=-1)
        gen.get_candidates(state["ids"])

    return _median_us(step, steps)


def time_rescan(stream, context, steps):
    buf = np.empty(len(stream), dtype=np.int32)
    buf[:context] = stream[:context]
    out = np.empty(DRAFT, dtype=np.int32)
    state = {"n": context}
    it = iter(stream[context : context + steps].tolist())

    def step():
        buf[state["n"]] = next(it)
        state["n"] += 1
        rescan_propose(buf, state["n"], 5, DRAFT, out)

    return _median_us(step, steps)


def run(contexts, tokenizer_name="gemma-3-270m"):
    from draftless.integration.models import load_tokenizer

    t0 = time.perf_counter()
    tokenizer = load_tokenizer(tokenizer_name)
    base = tokenised_base(tokenizer)
    stream = repeated_with_edits(base, max(contexts) + 2000)
    setup_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    warm = SuffixIndex(stream[:64])
    warm.extend(stream[64:80])
    warm.continuations()
    rescan_propose(np.asarray(stream[:64], dtype=np.int32), 64, 5, DRAFT, np.empty(DRAFT, np.int32))
    compile_s = time.perf_counter() - t0
    rows = []
    for context in tqdm(contexts, desc="contexts", file=sys.stderr):
        t0 = time.perf_counter()
        SuffixIndex(stream[:context])
        build_s = time.perf_counter() - t0
        trials = [time_draftless(stream, context, 2000) for _ in range(TRIALS)]
        draftless_us = min(t[0] for t in trials)
        _, bytes_per_token, idx = trials[0]
        baseline_steps = int(min(2000, max(50, 2e7 // context)))
        rows.append(
            {
                "tokens": context,
                "draftless_us": round(draftless_us, 3),
                "draftless_trials_us": [round(t[0], 3) for t in trials],
                "hf_pld_us": round(min(time_hf(stream, context, baseline_steps) for _ in range(TRIALS)), 3),
                "rescan_us": round(min(time_rescan(stream, context, baseline_steps) for _ in range(TRIALS)), 3),
                "bytes_per_token": round(bytes_per_token, 1),
                "states_per_token": round(idx.num_states / len(idx), 3),
                "edges_per_token": round(idx.num_edges / len(idx), 3),
                "build_us_per_token": round(build_s / context * 1e6, 3),
                "baseline_steps": baseline_steps,
            }
        )
    first, last = rows[0], rows[-1]
    targets = {
        "largest_context_us_at_most_5": last["draftless_us"] <= 5.0,
        "largest_over_smallest_at_most_1.5": last["draftless_us"] <= 1.5 * first["draftless_us"],
        "bytes_per_token_at_most_128": all(r["bytes_per_token"] <= 128 for r in rows),
    }
    return {
        "tokenizer": tokenizer_name,
        "base_tokens": int(base.size),
        "setup_s": round(setup_s, 2),
        "compile_s": round(compile_s, 2),
        "contexts": rows,
        "targets": targets,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--contexts", default="1000,10000,100000,1000000")
    parser.add_argument("--tokenizer", default="gemma-3-270m")
    args = parser.parse_args(argv)
    contexts = sorted(int(c) for c in args.contexts.split(","))
    report = run(contexts, args.tokenizer)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"setup (tokenizer + stream): {report['setup_s']} s; Numba compile/warm-up: {report['compile_s']} s")
    print(f"{'tokens':>9} {'draftless us':>13} {'hf_pld us':>10} {'rescan us':>10} {'bytes/token':>12}")
    for r in report["contexts"]:
        print(
            f"{r['tokens']:>9} {r['draftless_us']:>13.2f} {r['hf_pld_us']:>10.1f} {r['rescan_us']:>10.1f} "
            f"{r['bytes_per_token']:>12.1f}"
        )
    print("targets:", ", ".join(f"{k}={'met' if v else 'MISSED'}" for k, v in report["targets"].items()))


if __name__ == "__main__":
    main()

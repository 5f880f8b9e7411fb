"""The verification pass at growing context lengths: transformers' KV cache against the loop's.

    python -m experiments.pass_cost [--model NAME] [--contexts 256,768,2048] [--ks 0,1,3,8,16] [--json PATH]

For each context length a random prompt of that many tokens is prefilled twice: into transformers'
``DynamicCache`` (appends by ``torch.cat``; with the causal mask of a multi-token pass, grouped key/value heads
expanded per query head) and into ``draftless.integration.kv_cache.new_cache`` run through the lean decoder
layers (grouped key/value heads attended as they are), as the loop runs it. Then a pass over 1 + k tokens is
timed for every k, each rolled back afterwards, both caches interleaved round by round, keeping each pass's
fastest time (five rounds after a warm-up), with every linear layer in its planned form in both. No drafting:
only what one pass costs, which is what the adaptive policy's cost curve models.
"""

import argparse
import contextlib
import functools
import json
import sys

import torch
from transformers.cache_utils import DynamicCache

from draftless.integration import kv_cache
from draftless.integration.calibration import cached_linear_plans
from draftless.integration.fastpass.lean_layers import lean_layers
from draftless.integration.fastpass.linear_plan import fastest_of_rounds, planned_linears
from draftless.integration.models import DEFAULT_MODEL, load_model
from draftless.integration.pass_timing import time_pass

VARIANTS = ("transformers", "draftless")


def _timed(model, cache, ids, context, grouped):
    with lean_layers(model) if grouped else contextlib.nullcontext():
        return time_pass(model, cache, ids, context)


@torch.no_grad()
def measure(model, contexts, ks, repeats=5):
    """Rows ``{"context", "k", "transformers_ms", "draftless_ms"}``: fastest pass over 1 + k tokens."""
    vocab = model.config.get_text_config().vocab_size
    g = torch.Generator().manual_seed(0)
    rows = []
    with planned_linears(model, cached_linear_plans(model)):
        for context in contexts:
            prompt = torch.randint(0, vocab, (1, context), generator=g).to(model.device)
            caches = {
                "transformers": DynamicCache(config=model.config),
                "draftless": kv_cache.new_cache(model, context + max(ks) + 1),
            }
            for cache in caches.values():
                model(input_ids=prompt, cache=cache, use_cache=True, logits_to_keep=1)
                kv_cache.start_recording(cache)
            inputs = [torch.randint(0, vocab, (1, k + 1), generator=g).to(model.device) for k in ks]
            passes = [
                functools.partial(_timed, model, caches[v], ids, context, v == "draftless")
                for ids in inputs
                for v in VARIANTS
            ]
            best = fastest_of_rounds(passes, repeats)
            for i, k in enumerate(ks):
                rows.append(
                    {
                        "context": context,
                        "k": k,
                        "transformers_ms": round(best[2 * i] * 1e3, 2),
                        "draftless_ms": round(best[2 * i + 1] * 1e3, 2),
                    }
                )
    return rows


def markdown(rows):
    lines = ["| context | k | transformers' cache (ms) | draftless's cache (ms) | ratio |", "|---|---|---|---|---|"]
    lines += [
        f"| {r['context']} | {r['k']} | {r['transformers_ms']:.1f} | {r['draftless_ms']:.1f} | "
        f"{r['draftless_ms'] / r['transformers_ms']:.2f} |"
        for r in rows
    ]
    return "\n".join(lines) + "\n"


def int_list(text, name, minimum):
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name} must be comma-separated ints, got {text!r}") from None
    if not values or min(values) < minimum:
        raise argparse.ArgumentTypeError(f"{name} must be ints >= {minimum}, got {text!r}")
    return values


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.pass_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--contexts", type=lambda t: int_list(t, "--contexts", 1), default=[256, 768, 2048])
    parser.add_argument("--ks", type=lambda t: int_list(t, "--ks", 0), default=[0, 1, 3, 8, 16])
    parser.add_argument("--json", type=str)
    args = parser.parse_args(argv)
    model, _ = load_model(args.model)
    rows = measure(model, args.contexts, args.ks)
    sys.stdout.write(f"{args.model}, {torch.get_num_threads()} threads\n\n" + markdown(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "threads": torch.get_num_threads(), "rows": rows}, f, indent=1)
    return rows


if __name__ == "__main__":
    main()

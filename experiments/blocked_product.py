"""The output layer's transposed product whole against in blocks of output features, alone and in whole passes.

    python -m experiments.blocked_product [--model NAME] [--rows 8,16,24,32,48,64] [--ks 0,7,15,16,23,24,31,32,47,63]
                                         [--context 800] [--rounds 8] [--json PATH]

``integration.blocked_product.transposed_product`` takes a product as ``W @ x.T`` in blocks of output features
whose result fits the cache, so that its copy back to rows reads from cache. This times, interleaved and
alternating which goes first each round, keeping each one's fastest: the model's output layer over ``--rows``
random rows in the transposed order, whole and blocked, as a planned layer computes it (rows contiguous); then
one verification pass over ``1 + k`` tokens after a ``--context``-token prefill, under the model's cached
linear-layer plans, with blocked products switched off and on. Ratios only (the host is noisy); equal paths
(few rows, small results) show the noise.
"""

import argparse
import contextlib
import json
import sys
import time

import torch

from draftless.integration import calibration, pass_timing
from draftless.integration.fastpass import blocked_product
from draftless.integration.fastpass.linear_plan import form_product, planned_linears
from draftless.integration.models import DEFAULT_MODEL, load_model
from experiments.pass_cost import int_list

VARIANTS = ("whole", "blocked")


@contextlib.contextmanager
def blocks(on):
    """Blocked transposed products (the library's rule) if ``on``, else every product whole."""
    saved = blocked_product.BLOCKED_FROM_ROWS
    blocked_product.BLOCKED_FROM_ROWS = saved if on else float("inf")
    try:
        yield
    finally:
        blocked_product.BLOCKED_FROM_ROWS = saved


def fastest_alternating(runs, rounds):
    """``{(variant, key): fastest seconds}`` over ``rounds`` rounds of every ``runs[key]`` (a callable taking no
    argument and returning seconds) under each variant, the variants' order swapped every round."""
    best = {}
    for r in range(rounds):
        for variant in VARIANTS if r % 2 else VARIANTS[::-1]:
            with blocks(variant == "blocked"):
                for key, run in runs.items():
                    best[variant, key] = min(best.get((variant, key), float("inf")), run())
    return best


@torch.no_grad()
def measure(model, rows, ks, context=800, rounds=8):
    """``{"product": [...], "pass": [...]}``: rows ``{"rows"|"k", "whole_ms", "blocked_ms"}``."""
    weight = model.get_output_embeddings().weight
    g = torch.Generator().manual_seed(0)
    inputs = {r: torch.randn((r, weight.shape[1]), generator=g).to(weight.device, weight.dtype) for r in rows}

    def product(r):
        t0 = time.perf_counter()
        form_product(weight, None, inputs[r], r, True)  # as a planned layer runs it: rows contiguous, as returned
        if weight.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    products = fastest_alternating({r: (lambda r=r: product(r)) for r in rows}, rounds)
    timers = pass_timing.pass_timers(model, ks, context)
    with planned_linears(model, calibration.cached_linear_plans(model)):
        for warm in (timers[-1], timers[0]):  # warmed up, the longest first: it allocates the largest buffers
            warm()
        passes = fastest_alternating(dict(zip(ks, timers)), rounds)

    def table(best, keys, name):
        return [{name: key, **{f"{v}_ms": round(best[v, key] * 1e3, 2) for v in VARIANTS}} for key in keys]

    return {"product": table(products, rows, "rows"), "pass": table(passes, ks, "k")}


def markdown(result):
    out = []
    for part, name, title in (("product", "rows", "output layer over"), ("pass", "k", "pass at")):
        out += [f"| {title} {name} | whole (ms) | blocked (ms) | blocked / whole |", "|---|---|---|---|"]
        out += [
            f"| {r[name]} | {r['whole_ms']:.1f} | {r['blocked_ms']:.1f} | {r['blocked_ms'] / r['whole_ms']:.3f} |"
            for r in result[part]
        ]
        out.append("")
    return "\n".join(out)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.blocked_product", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--rows", type=lambda t: int_list(t, "--rows", 1), default=[8, 16, 24, 32, 48, 64])
    parser.add_argument("--ks", type=lambda t: int_list(t, "--ks", 0), default=[0, 7, 15, 16, 23, 24, 31, 32, 47, 63])
    parser.add_argument("--context", type=lambda t: int_list(t, "--context", 1)[0], default=800)
    parser.add_argument("--rounds", type=lambda t: int_list(t, "--rounds", 1)[0], default=8)
    parser.add_argument("--json", type=str)
    args = parser.parse_args(argv)
    model, _ = load_model(args.model)
    result = measure(model, args.rows, sorted(set(args.ks)), args.context, args.rounds)
    sys.stdout.write(f"{args.model}, {torch.get_num_threads()} threads, context {args.context}\n\n" + markdown(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "model": args.model,
                    "threads": torch.get_num_threads(),
                    "context": args.context,
                    "rounds": args.rounds,
                    **result,
                },
                f,
                indent=1,
            )
    return result


if __name__ == "__main__":
    main()

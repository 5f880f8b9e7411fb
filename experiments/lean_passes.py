"""Verification passes with the model's own decoder layers against the lean ones (``lean_layers``).

    python -m experiments.lean_passes [--model NAME | --shape qwen2-0.5b] [--context 256] [--ks 0,3,7,15]
                                     [--repeats 12] [--json PATH]

The loop's KV cache holds ``--context`` positions (as the calibration's, ``pass_timing.pass_timers``: one token
prefilled, random keys and values for the rest); then a pass over 1 + k tokens is timed for every k, rolled back
afterwards, with the model's own layers and with the lean ones in turn (the order swapped every round, so that
neither always runs second), every linear layer in its planned form and the output layer screened where a greedy
run screens it, as the loop runs a pass. Each pass's median over ``--repeats`` rounds after a warm-up one.
``--shape`` builds a randomly initialised model of a released model's shape instead of loading one (random weights
time as trained ones do), for families whose weights this machine does not hold.
"""

import argparse
import contextlib
import json
import statistics
import sys

import torch
import transformers

from draftless.integration import calibration
from draftless.integration.calibration import cached_linear_plans
from draftless.integration.fastpass import lean_layers
from draftless.integration.fastpass.linear_plan import planned_linears
from draftless.integration.fastpass.screened_head import ScreenedHead
from draftless.integration.models import DEFAULT_MODEL, load_model
from draftless.integration.pass_timing import pass_timers

from .pass_cost import int_list

# released models' shapes (their configs' sizes; the weights random): name -> (config class, model class, sizes)
SHAPES = {
    "qwen2-0.5b": (
        "Qwen2Config",
        "Qwen2ForCausalLM",
        dict(
            vocab_size=151936,
            hidden_size=896,
            intermediate_size=4864,
            num_hidden_layers=24,
            num_attention_heads=14,
            num_key_value_heads=2,
            tie_word_embeddings=True,
        ),
    ),
    "qwen3-0.6b": (
        "Qwen3Config",
        "Qwen3ForCausalLM",
        dict(
            vocab_size=151936,
            hidden_size=1024,
            intermediate_size=3072,
            num_hidden_layers=28,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            tie_word_embeddings=True,
        ),
    ),
}


def shaped_model(name, seed=0, **overrides):
    """A randomly initialised fp32 model of ``SHAPES[name]``'s shape (``overrides`` change its sizes), in eval
    mode."""
    if name not in SHAPES:
        raise ValueError(f"shape must be one of {sorted(SHAPES)}, got {name!r}")
    config_class, model_class, sizes = SHAPES[name]
    torch.manual_seed(seed)
    config = getattr(transformers, config_class)(**{**sizes, **overrides})
    return getattr(transformers, model_class)(config).eval()


@torch.no_grad()
def measure(model, context, ks, repeats=12):
    """Rows ``{"k", "own_ms", "lean_ms"}``: the median pass over 1 + k tokens after ``context`` positions, with the
    model's own decoder layers and with the lean ones. Raises ``ValueError`` where no lean layers serve the
    model (``lean_layers.verified``)."""
    calibration.calibrate(model)  # the plans the loop's passes run under, and the lean layers' check
    if not lean_layers.verified(model):
        raise ValueError(f"no lean decoder layers serve {type(model).__name__} here")
    # the calibration's own timers: the context filled, the screen checked at the prefill and used where it serves
    screen = ScreenedHead.for_model(model)
    passes = pass_timers(model, ks, context, screen=screen)
    every = screen is not None and screen.supported and screen.screens(1)  # the output layer's plan then unread
    times = {(k, lean): [] for k in ks for lean in (False, True)}
    with planned_linears(model, cached_linear_plans(model, output_layer=not every)):
        for round_ in range(repeats + 1):
            for k, timed in zip(ks, passes):
                for lean in (False, True) if round_ % 2 else (True, False):
                    with lean_layers.lean_layers(model) if lean else contextlib.nullcontext():
                        elapsed = timed()
                    if round_:  # the first round warms every shape up
                        times[k, lean].append(elapsed)
    return [
        {
            "k": k,
            "own_ms": round(statistics.median(times[k, False]) * 1e3, 2),
            "lean_ms": round(statistics.median(times[k, True]) * 1e3, 2),
        }
        for k in ks
    ]


def markdown(rows):
    lines = ["| k | own layers (ms) | lean layers (ms) | lean / own |", "|---|---|---|---|"]
    lines += [f"| {r['k']} | {r['own_ms']:.1f} | {r['lean_ms']:.1f} | {r['lean_ms'] / r['own_ms']:.3f} |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.lean_passes", description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--model", help=f"a bundled model or a local directory (default {DEFAULT_MODEL})")
    source.add_argument("--shape", choices=sorted(SHAPES), help="a random model of this released model's shape")
    parser.add_argument("--context", type=lambda t: int_list(t, "--context", 1)[0], default=256)
    parser.add_argument("--ks", type=lambda t: int_list(t, "--ks", 0), default=[0, 3, 7, 15])
    parser.add_argument("--repeats", type=lambda t: int_list(t, "--repeats", 1)[0], default=12)
    parser.add_argument("--json", type=str)
    args = parser.parse_args(argv)
    name = args.shape or args.model or DEFAULT_MODEL
    model = shaped_model(args.shape) if args.shape else load_model(name)[0]
    try:
        rows = measure(model, args.context, args.ks, args.repeats)
    except ValueError as error:
        parser.error(str(error))
    sys.stdout.write(f"{name}, {torch.get_num_threads()} threads, context {args.context}\n\n" + markdown(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"model": name, "threads": torch.get_num_threads(), "context": args.context, "rows": rows}, f, indent=1
            )
    return rows


if __name__ == "__main__":
    main()

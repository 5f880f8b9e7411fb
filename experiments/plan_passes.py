"""Whole verification passes under the linear layers' cached plans, against ``nn.Linear`` everywhere and against
oneDNN's matmul over weights reordered once.

    python -m experiments.plan_passes [--model NAME] [--ks 0,1,2,3,7,15,31,63] [--repeats 12]
                                     [--variants cached,identity,prepacked] [--prepacked-from 8] [--json PATH]

The plans (``linear_plan``) are chosen by timing each weight shape's products over a probe of its own layers. On a
host whose last-level cache holds a shape's layers whole, the probe times them warm while a pass streams the whole
model past them; only whole passes tell what a plan is worth there. Variants, each a way the linear layers compute:

- ``cached``: the calibration's plans, as the loop runs them;
- ``identity``: every layer through its own ``nn.Linear``;
- ``prepacked``: the cached plans, but every call of ``--prepacked-from`` rows or more (every shape but the output
  layer's) through oneDNN's matmul over a copy of the weight reordered once into oneDNN's blocked layout
  (``torch.ops.mkldnn._reorder_linear_weight``), where ``linear_plan``'s oneDNN form hands it the dense weight on
  every call. The copy costs the layers' weights once more in memory.

The passes are the calibration's (``pass_timing.pass_timers``: one token prefilled, random keys and values for the
rest of 256 positions), lean decoder layers and the screened output layer where the loop uses them; each variant
in turn every round (the order rotating), each pass's median over ``--repeats`` rounds after a warm-up one.
"""

import argparse
import contextlib
import functools
import json
import statistics
import sys

import torch

from draftless.integration import calibration
from draftless.integration.fastpass.lean_layers import lean_layers
from draftless.integration.fastpass.linear_plan import LinearPlans, plain_linears, planned_linears
from draftless.integration.fastpass.screened_head import ScreenedHead
from draftless.integration.models import DEFAULT_MODEL, load_model
from draftless.integration.pass_timing import pass_timers

from .pass_cost import int_list

VARIANTS = ("cached", "identity", "prepacked")


def prepacked_supported():
    """Whether this torch build reorders a linear layer's weight for oneDNN (a CPU build with oneDNN)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


@contextlib.contextmanager
def prepacked_linears(model, plans, from_rows):
    """Within the block, ``plans`` installed (``planned_linears``), then every plain linear layer but the output
    layer computing calls of ``from_rows`` rows or more through oneDNN over its weight reordered once (the copies
    made on entry, dropped on exit); fewer rows as ``plans`` says."""
    head = model.get_output_embeddings()
    layers = [m for mods in plain_linears(model).values() for m in mods if m is not head]
    with planned_linears(model, plans):
        installed = {}
        try:
            for layer in layers:
                packed = torch.ops.mkldnn._reorder_linear_weight(layer.weight.detach(), 16)
                installed[layer] = layer.__dict__.get("forward")
                layer.forward = functools.partial(_prepacked_forward, layer, packed, installed[layer], from_rows)
            yield
        finally:
            for layer, before in installed.items():
                if before is None:
                    del layer.forward
                else:
                    layer.forward = before


def _prepacked_forward(layer, packed, planned, from_rows, x):
    rows = x.numel() // x.shape[-1]
    if rows < from_rows:
        return planned(x) if planned is not None else torch.nn.functional.linear(x, layer.weight, layer.bias)
    flat = x.reshape(rows, x.shape[-1])
    out = torch.ops.mkldnn._linear_pointwise(flat, packed, layer.bias, "none", [], "")
    return out.reshape(*x.shape[:-1], layer.weight.shape[0])


@torch.no_grad()
def measure(model, ks, repeats=12, variants=VARIANTS, prepacked_from=8):
    """Rows ``{"k", "<variant>_ms", ...}``: the median pass over 1 + k tokens under each of ``variants``."""
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        raise ValueError(f"variants must be among {VARIANTS}, got {list(variants)}")
    if "prepacked" in variants and not prepacked_supported():
        raise ValueError("this torch build cannot reorder weights for oneDNN: leave out the prepacked variant")
    calibration.calibrate(model)  # the plans and the lean layers' check, as the loop's passes run
    screen = ScreenedHead.for_model(model)
    every = screen is not None and screen.supported and screen.screens(1)
    plans = calibration.cached_linear_plans(model, output_layer=not every)
    forms = {
        "cached": lambda: planned_linears(model, plans),
        "identity": lambda: planned_linears(model, LinearPlans(())),
        "prepacked": lambda: prepacked_linears(model, plans, prepacked_from),
    }
    passes = pass_timers(model, ks, 256, screen=screen)
    times = {(v, k): [] for v in variants for k in ks}
    with lean_layers(model):
        for round_ in range(repeats + 1):
            turn = round_ % len(variants)
            for variant in variants[turn:] + variants[:turn]:
                with forms[variant]():
                    for k, timed in zip(ks, passes):
                        elapsed = timed()
                        if round_:  # the first round warms every shape up
                            times[variant, k].append(elapsed)
    return [{"k": k, **{f"{v}_ms": round(statistics.median(times[v, k]) * 1e3, 2) for v in variants}} for k in ks]


def markdown(rows, variants):
    """A table of ``rows``: each variant's pass in ms and, after the first, its ratio to the first's; a last row
    sums the passes."""
    base = variants[0]
    head = ["k"] + [f"{v} (ms)" for v in variants] + [f"{v} / {base}" for v in variants[1:]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    sums = {v: sum(r[f"{v}_ms"] for r in rows) for v in variants}
    for label, values in [(str(r["k"]), {v: r[f"{v}_ms"] for v in variants}) for r in rows] + [("sum", sums)]:
        cells = (
            [label] + [f"{values[v]:.2f}" for v in variants] + [f"{values[v] / values[base]:.3f}" for v in variants[1:]]
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _variants(text):
    names = [v.strip() for v in text.split(",") if v.strip()]
    if not names or any(v not in VARIANTS for v in names) or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"--variants must name some of {', '.join(VARIANTS)} once each, got {text!r}")
    return tuple(names)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.plan_passes", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="a bundled model or a local directory")
    parser.add_argument("--ks", type=lambda t: int_list(t, "--ks", 0), default=[0, 1, 2, 3, 7, 15, 31, 63])
    parser.add_argument("--repeats", type=lambda t: int_list(t, "--repeats", 1)[0], default=12)
    parser.add_argument("--variants", type=_variants, default=VARIANTS)
    parser.add_argument("--prepacked-from", type=lambda t: int_list(t, "--prepacked-from", 1)[0], default=8)
    parser.add_argument("--json", type=str)
    args = parser.parse_args(argv)
    model = load_model(args.model)[0]
    try:
        rows = measure(model, args.ks, args.repeats, args.variants, args.prepacked_from)
    except ValueError as error:
        parser.error(str(error))
    sys.stdout.write(f"{args.model}, {torch.get_num_threads()} threads\n\n" + markdown(rows, args.variants))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "model": args.model,
                    "threads": torch.get_num_threads(),
                    "prepacked_from": args.prepacked_from,
                    "rows": rows,
                },
                f,
                indent=1,
            )
    return rows


if __name__ == "__main__":
    main()

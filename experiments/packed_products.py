"""MKL's packed products against its plain ones, per linear-layer shape of a model: would a fourth form pay?

    python -m experiments.packed_products [--model NAME] [--rows 1,2,3,4,8,16,33,65] [--mib N] [--json PATH]

torch's CPU ``nn.Linear`` calls MKL's ``sgemm``, which for a few rows re-packs the weight into its own panel
layout on every call; ``torch.ops.mkl._mkl_linear`` multiplies by a weight packed once beforehand
(``_mkl_reorder_linear_weight``, the kernel torch's compiler uses for frozen fp32 linear layers). For each
shape of the model's plain linear layers and each row count, both are timed over the same probe of weights
(``weight_probe.probe_weights``: at least twice the last-level cache, so that the weights stream from memory as
in a pass), interleaved with oneDNN's product where ``onednn_supported`` (the plans' third form), fastest of
``rounds``; the table gives each one's milliseconds scaled to all of the model's layers of that shape, the
packed product's ratio to the fastest of the others, and whether it equals the plain one bit for bit (else its
largest difference relative to the output's largest magnitude). A last table sums the shapes per row count:
the linear layers' milliseconds of one pass with each shape in the fastest of the plans' forms at that row
count (plain, oneDNN; the transposed form and padding left out), and with the packed product raced too.

A packed weight serves one row count only (another falls back to the plain product), so a form built on it
costs one copy of a shape's weights per row count it serves, and a pass of fewer rows would be padded up to
it. Nothing in the library uses it: this measures what it would win before anything is built.
"""

import argparse
import functools
import json
import sys
import time

import torch

from draftless.index.validation import check_positive_int
from draftless.integration import load_model
from draftless.integration.fastpass import linear_plan, weight_probe
from draftless.integration.fastpass.onednn_product import onednn_supported

ROWS = (1, 2, 3, 4, 8, 16, 33, 65)


def packed_supported():
    """Whether this torch build multiplies by MKL-packed weights (a CPU build with MKL)."""
    mkl = getattr(torch.ops, "mkl", None)
    return (
        torch.backends.mkl.is_available() and hasattr(mkl, "_mkl_linear") and hasattr(mkl, "_mkl_reorder_linear_weight")
    )


@torch.no_grad()
def compare_shape(modules, rows=ROWS, nbytes=None, rounds=3):
    """``{rows: {"plain_ms", "onednn_ms", "packed_ms", "ratio", "identical", "max_rel_diff"}}`` for linear layers
    of one weight shape (``modules``), their times scaled to all of ``modules`` (``onednn_ms`` None where oneDNN
    does not serve the shape; ``ratio``: packed over the faster of the others)."""
    weight = modules[0].weight
    if weight.device.type != "cpu" or weight.dtype != torch.float32:
        raise ValueError(
            f"packed products are MKL's fp32 CPU kernel; the weights are {weight.dtype} on {weight.device}"
        )
    rounds = check_positive_int(rounds, "rounds")
    nbytes = weight_probe.probe_bytes(weight.device) if nbytes is None else nbytes
    probed = weight_probe.probe_weights(modules, nbytes)
    scale = len(modules) * weight.numel() * weight.element_size() / weight_probe.part_bytes(probed)
    inputs = linear_plan.row_inputs(weight, rows)
    onednn = onednn_supported(weight)
    table = {}
    for r in rows:
        x = inputs[r]
        packed = [torch.ops.mkl._mkl_reorder_linear_weight(w, r) for w, _ in probed]

        def pack():  # seconds, as ``linear_plan.time_products`` returns them for the plans' forms
            t0 = time.perf_counter()
            for (w, b), p in zip(probed, packed):  # noqa: F821 (the loop's list, timed at once)
                torch.ops.mkl._mkl_linear(x, p, w, b, r)
            return time.perf_counter() - t0

        forms = (linear_plan.PLAIN, linear_plan.ONEDNN) if onednn else (linear_plan.PLAIN,)
        runs = [functools.partial(linear_plan.time_products, probed, x, r, f) for f in forms]
        # interleaved after a warm-up round, so that a burst of load lands on one of them only
        best = linear_plan.fastest_of_rounds([runs[0], pack] + runs[1:], rounds)
        w, b = probed[0]
        want = torch.nn.functional.linear(x, w, b)
        got = torch.ops.mkl._mkl_linear(x, packed[0], w, b, r)
        scale_out = float(want.abs().max()) or 1.0
        table[r] = {
            "plain_ms": best[0] * scale * 1e3,
            "packed_ms": best[1] * scale * 1e3,
            "onednn_ms": best[2] * scale * 1e3 if onednn else None,
            "ratio": best[1] / min(best[0], best[2] if onednn else best[0]),
            "identical": bool(torch.equal(got, want)),
            "max_rel_diff": float((got - want).abs().max()) / scale_out,
        }
        del packed
    return table


def compare_model(model, rows=ROWS, nbytes=None, rounds=3):
    """``{"OUTxIN": compare_shape(...)}`` for every shape of ``model``'s plain linear layers."""
    if not packed_supported():
        raise RuntimeError("this torch build has no MKL packed products (torch.ops.mkl._mkl_linear)")
    return {
        f"{out}x{inp}": compare_shape(modules, rows, nbytes, rounds)
        for (out, inp), modules in linear_plan.plain_linears(model).items()
    }


def fastest(row, packed):
    """A shape's fastest milliseconds at one row count, among plain and oneDNN, and the packed product if ``packed``."""
    return min(t for t in (row["plain_ms"], row["onednn_ms"], row["packed_ms"] if packed else None) if t is not None)


def pass_totals(table):
    """``{rows: (ms without the packed form, ms with it)}``: one pass's linear layers, each shape at its fastest."""
    counts = sorted({r for by_rows in table.values() for r in by_rows})
    return {
        r: tuple(
            sum(fastest(by_rows[r], packed) for by_rows in table.values() if r in by_rows) for packed in (False, True)
        )
        for r in counts
    }


def markdown(table):
    lines = [
        "| shape | rows | plain ms | oneDNN ms | packed ms | packed / fastest other | identical to plain |",
        "|---|---|---|---|---|---|---|",
    ]
    for shape, by_rows in table.items():
        for r, row in by_rows.items():
            same = "yes" if row["identical"] else f"no ({row['max_rel_diff']:.1e})"
            dnn = "-" if row["onednn_ms"] is None else f"{row['onednn_ms']:.2f}"
            lines.append(
                f"| {shape} | {r} | {row['plain_ms']:.2f} | {dnn} | {row['packed_ms']:.2f} | "
                f"{row['ratio']:.3f} | {same} |"
            )
    lines += [
        "",
        "| rows | linear layers, fastest form, ms | with the packed form raced | ratio |",
        "|---|---|---|---|",
    ]
    for r, (without, with_packed) in pass_totals(table).items():
        lines.append(f"| {r} | {without:.2f} | {with_packed:.2f} | {with_packed / without:.3f} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.packed_products", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--rows", default=",".join(map(str, ROWS)), help="row counts, comma-separated")
    parser.add_argument("--mib", type=int, default=None, help="probe size (default: the library's probe_bytes)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    try:
        rows = tuple(int(r) for r in args.rows.split(","))
    except ValueError:
        parser.error(f"--rows must be comma-separated integers, got {args.rows!r}")
    if not rows or min(rows) < 1:
        parser.error(f"--rows must hold row counts >= 1, got {args.rows!r}")
    if args.mib is not None and args.mib < 1:
        parser.error(f"--mib must be >= 1, got {args.mib}")
    model, _ = load_model(args.model)
    table = compare_model(model, rows, None if args.mib is None else args.mib << 20, args.rounds)
    print(f"{args.model}: {torch.get_num_threads()} threads")
    print(markdown(table))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "threads": torch.get_num_threads(), "shapes": table}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

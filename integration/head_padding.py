"""Padding the output layer's input rows to a row count the BLAS handles faster.

A verification pass scores ``1 + k`` positions, so the output layer (vocabulary x hidden, the largest
matrix of a small model: 262k x 640 for Gemma 3 270M) multiplies ``1 + k`` rows. CPU BLAS libraries pick
their kernel by the row count, and some handle 2 or 3 rows as separate matrix-vector products: on a 2-core
CPU with MKL, Gemma 3 270M's output layer takes about 75 ms for 1 row, 140 ms for 2, 230 ms for 3 and
130 ms for 4. ``measure_head_padding`` times the layer at 1..8 rows on the actual device and dtype, and
``padded_head`` then pads each call's rows with zeros up to the cheapest row count at or above it and
drops the extra rows from the result: the real rows' logits are those rows' products, only faster. Where
nothing is gained (a GPU, another BLAS) the table is the identity and no hook is installed.
"""

import contextlib
import functools
import time

import torch

MAX_PADDED_ROWS = 8


def fastest_of_rounds(passes, repeats):
    """Fastest seconds of each zero-argument callable in ``passes`` (each returns the seconds it took): one
    round warms every shape up, then ``repeats`` interleaved rounds, so that a burst of load from another
    process neither bends the measured shape nor lands on one entry only."""
    best = [float("inf")] * len(passes)
    for round_ in range(repeats + 1):
        for i, run in enumerate(passes):
            elapsed = run()
            if round_:
                best[i] = min(best[i], elapsed)
    return best


@torch.no_grad()
def measure_head_padding(model, max_rows=MAX_PADDED_ROWS, repeats=3):
    """``pad_to`` with ``pad_to[m]`` the row count (``m <= pad_to[m] <= max_rows``) at which the output layer
    is fastest for ``m`` rows (index 0 unused)."""
    head = model.get_output_embeddings()
    if head is None:
        return tuple(range(max_rows + 1))
    hidden = head.weight.shape[1]
    g = torch.Generator().manual_seed(0)
    inputs = [torch.randn((1, rows, hidden), generator=g).to(device=model.device, dtype=head.weight.dtype)
              for rows in range(1, max_rows + 1)]

    def timed(x):
        t0 = time.perf_counter()
        head(x)
        if model.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    seconds = [0.0] + fastest_of_rounds([functools.partial(timed, x) for x in inputs], repeats)
    pad_to = [0]
    for rows in range(1, max_rows + 1):
        best = min(range(rows, max_rows + 1), key=lambda r: seconds[r])
        # pad only for a clear gain (a tenth of the time), so timing noise does not pad needlessly
        pad_to.append(best if seconds[best] < 0.9 * seconds[rows] else rows)
    return tuple(pad_to)


@contextlib.contextmanager
def padded_head(model, pad_to):
    """Within the block, the output layer pads its input rows as ``pad_to`` says (see the module doc)."""
    head = model.get_output_embeddings()
    if head is None or all(p == m for m, p in enumerate(pad_to)):
        yield
        return
    pending = []

    def pad(module, args):
        x = args[0]
        rows = x.shape[-2]
        target = pad_to[rows] if rows < len(pad_to) else rows
        pending.append(rows)
        if target == rows:
            return None
        zeros = x.new_zeros(x.shape[:-2] + (target - rows, x.shape[-1]))
        return (torch.cat([x, zeros], dim=-2),) + tuple(args[1:])

    def unpad(module, args, output):
        rows = pending.pop()
        return output if output.shape[-2] == rows else output[..., :rows, :]

    handles = [head.register_forward_pre_hook(pad), head.register_forward_hook(unpad)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()

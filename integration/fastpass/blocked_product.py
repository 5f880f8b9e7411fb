"""A linear layer's product taken as ``weight @ x.T`` and copied back to rows, in blocks of output features
when its result is too large for the cache (``linear_plan``'s second operand order)."""

import torch

# A transposed product's result is written by feature, then copied to rows. For an output layer that copy is
# tens of megabytes (Gemma 3 270M, 262k x 640, 33 rows: 35 MB, 12 ms of a 130 ms product on a 2-core AMD EPYC
# with a 32 MiB L3 and 512 KiB of L2 a core), twice through memory. Taken in blocks of features whose result fits
# this many bytes, the copy reads from cache: over 16-65 rows that output layer's product measured 20-36 % faster
# (33 rows: 185 -> 135 ms), SmolLM2-135M's (49k x 576) 16-23 %; Gemma's passes 9-21 % from k = 15, bit for
# bit the same result; below 8 rows the copy is small and the extra calls cost what they save (2-7 rows: -12 %
# to +9 %), at 8-10 rows they break even (+8 % to -2 %, as two runs of the same path differ; passes at k = 7 and
# 9 within 5 % either way), from 12 rows they gain (7-26 %); results that fit the L2 anyway stay whole (Gemma's
# 2048 x 640 projections at 33-65 rows: 10-22 % slower blocked). "Blocked output-layer products" in
# ``docs/evidence.md``; ``python -m experiments.blocked_product`` times it
OUTPUT_BLOCK_BYTES = 256 * 1024
BLOCKED_FROM_ROWS = 8
BLOCKED_FROM_BYTES = 2 * 1024 * 1024  # results of at most this many bytes are taken whole
BLOCK_MULTIPLE = 256  # block sizes in whole BLAS panels


def transposed_product(weight, flat, rows):
    """The first ``rows`` rows of ``flat @ weight.T``, computed as ``weight @ flat.T`` and copied back to rows.
    From ``BLOCKED_FROM_ROWS`` rows on, a wide weight's product is taken in blocks of its output features whose
    result (``OUTPUT_BLOCK_BYTES``) stays in cache for that copy: the same products, the same sums, without a
    second trip through memory for a result of tens of megabytes (see ``OUTPUT_BLOCK_BYTES``)."""
    features, padded = weight.shape[0], flat.shape[0]
    step = block_features(features, padded, flat.element_size())
    if step >= features:
        return torch.mm(weight, flat.t()).t()[:rows]
    out = flat.new_empty(rows, features)
    by_column = flat.t()
    for start in range(0, features, step):
        out[:, start : start + step].copy_(torch.mm(weight[start : start + step], by_column).t()[:rows])
    return out


def block_features(features, rows, itemsize):
    """How many output features one block of a transposed product holds (``transposed_product``): all of them
    below ``BLOCKED_FROM_ROWS`` rows or for a result of at most ``BLOCKED_FROM_BYTES``, else as many as fill
    ``OUTPUT_BLOCK_BYTES`` of result, a multiple of ``BLOCK_MULTIPLE`` (at least one)."""
    if rows < BLOCKED_FROM_ROWS or features * rows * itemsize <= BLOCKED_FROM_BYTES:
        return features
    step = OUTPUT_BLOCK_BYTES // (rows * itemsize) // BLOCK_MULTIPLE * BLOCK_MULTIPLE
    return min(features, max(BLOCK_MULTIPLE, step))

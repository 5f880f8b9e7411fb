"""The screen's rigorous bound (``ScreenedHead``): how far a row's bfloat16 score ``s_j`` may lie from the fp32 logit
``r_j = fl32(x . W_j)`` the model computes, so that no token whose score falls more than twice the bound below the
row's best can be the fp32 argmax.

With ``xb = bf16(x)``, ``Wb = bf16(W)`` and ``t_j`` the fp32 sum of the (exact) products ``xb_i Wb_ji`` in any order,
``s_j = bf16(t_j)``, and ``x . W_j - xb . Wb_j = x . dW_j + dx . Wb_j`` exactly (``dW = W - Wb``, ``dx = x - xb``,
both known). So ``|s_j - r_j| <= E0 + u |t_j|`` with u = 2^-8 (the result's rounding) and

    E0 = H(x, dW) + H(dx, Wb) + g_n (H(xb, Wb) + H(x, W)),

``g_n = n u32 / (1 - n u32)`` (fp32 sums of n products in any order, ours and the model's), ``H(a, M)`` the least of
the three Hoelder bounds ``|a|_2 max_j |M_j|_2``, ``|a|_inf max_j |M_j|_1``, ``|a|_1 max_j |M_j|_inf`` on
``sum_i |a_i M_ji|``. For the row's best score ``m`` and any token j scored below ``m - 2B``, the fp32 logits keep
their order (``r_j < r_best``) where ``B = (E0 + u |m| / (1 - u)) / c``, ``c = (1 - 2u) / (1 - u)`` (a score at or
above 0 rounds from at most ``s / (1 - u)``, a negative one from below 0). An earlier bound was
``6u`` times the Hoelder bound on ``sum_i |x_i W_ji|``, doubled: the rounding of both operands taken at its worst,
where both are known. On real rows this one is about 5 (Gemma 3 270M) and 7 (SmolLM2-135M) times tighter (at
least 3 times on the tests' random rows), so their rows have 1.4 and 2.2 candidates on average against 20.7 and
6,406 : SmolLM2's output layer, screened, no longer sends most rows to the fp32 product whole.
"""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from numba import njit

U = 2.0**-8  # bfloat16's unit roundoff
_U32 = 2.0**-24
C = (1 - 2 * U) / (1 - U)
# the slack's part proportional to |m|, the row's best score: 2 u / ((1 - u) c)
SLACK_RATE = 2 * U / ((1 - U) * C)
# weights a thread of ``weight_norms`` takes at least: below, one thread (a thread's start costs more than it saves)
WEIGHTS_PER_THREAD = 1 << 22


@njit(cache=True, fastmath={"reassoc"}, nogil=True)  # nogil: threads over blocks of rows
def row_norms(weight, low_bits, norms):
    """Into ``norms[i]`` (float64, rows x 9), row i's L2, L1 and max norms of ``weight`` (fp32), of its rounding
    ``weight - low`` (exact in fp32) and of ``low``, its bfloat16 copy given as raw bits (``low_bits``, int16).
    Invariant: one pass over each row. The sums are float64 in any order (reassociated, so vectorised), within
    ``error_bound``'s margin (in fp32 a weight below 2^-75 would square to 0, one above 2^64 to infinity); the
    maxima are taken on the magnitude bits as integers (vectorised; a NaN's lie above the infinity's, so a row
    holding a NaN has a NaN max, and IEEE sums carry it too)."""
    rows, n = weight.shape
    weight_bits = weight.view(np.uint32)
    low = np.empty(n, np.uint32)
    low_values = low.view(np.float32)
    rounding = np.empty(n, np.float32)
    rounding_bits = rounding.view(np.uint32)
    largest = np.empty(3, np.uint32)
    largest_values = largest.view(np.float32)
    magnitude = np.uint32(0x7FFFFFFF)
    for i in range(rows):
        row = weight[i]
        for j in range(n):
            low[j] = np.uint32(np.uint16(low_bits[i, j])) << np.uint32(16)
        for j in range(n):
            rounding[j] = row[j] - low_values[j]
        for k, (values, bits) in enumerate(((row, weight_bits[i]), (rounding, rounding_bits), (low_values, low))):
            squares = 0.0  # float64: an fp32's square neither underflows nor overflows, nor do the sums
            absolute = 0.0
            top = np.uint32(0)
            for j in range(n):
                value = np.float64(values[j])
                squares += value * value
                absolute += abs(value)
                top = max(top, bits[j] & magnitude)
            largest[k] = top
            norms[i, 3 * k] = np.sqrt(squares)
            norms[i, 3 * k + 1] = absolute
            norms[i, 3 * k + 2] = largest_values[k]


@torch.no_grad()
def weight_norms(weight, low, threads=None):
    """The largest row norms (L2, L1, max) of ``weight`` (fp32, 2-D), of its rounding ``weight - low`` (``low`` its
    bfloat16 copy, the same shape) and of ``low``: nine floats, all nan where a weight is nan, not all finite
    where a weight or its copy is infinite. One compiled pass (``row_norms``): 0.15-0.25 s for Gemma 3 270M's 671
    MB output layer on one core, where torch's reductions over blocks of rows took 1.7-1.8 s ; over
    ``threads`` blocks of rows at once (by default torch's thread count, one per ``WEIGHTS_PER_THREAD`` weights at
    most; 0 or 1: one pass), each row's norms the same whichever block reads it."""
    if (
        weight.dim() != 2
        or weight.dtype != torch.float32
        or low.dtype != torch.bfloat16
        or low.shape != weight.shape
        or weight.numel() == 0
        or weight.device.type != "cpu"
        or low.device.type != "cpu"
    ):
        raise ValueError(
            f"weight must be a non-empty 2-D fp32 CPU tensor and low its bfloat16 copy, got "
            f"{weight.dtype} {tuple(weight.shape)} on {weight.device} and {low.dtype} "
            f"{tuple(low.shape)} on {low.device}"
        )
    if threads is None:
        threads = min(torch.get_num_threads(), weight.numel() // WEIGHTS_PER_THREAD)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise ValueError(f"threads must be a non-negative int or None, got {threads!r}")
    rows = weight.shape[0]
    norms = np.empty((rows, 9), np.float64)
    values = weight.detach().contiguous().numpy()
    bits = low.detach().contiguous().view(torch.int16).numpy()
    bounds = np.linspace(0, rows, max(1, min(threads, rows)) + 1).astype(np.int64)
    if bounds.size == 2:
        row_norms(values, bits, norms)
    else:  # each row is one row's pass whichever block holds it: the same norms, bit for bit
        with ThreadPoolExecutor(bounds.size - 1) as pool:
            for done in [
                pool.submit(row_norms, values[a:b], bits[a:b], norms[a:b]) for a, b in zip(bounds[:-1], bounds[1:])
            ]:
                done.result()
    return tuple(float(n) for n in norms.max(axis=0))  # max keeps a nan


def _hoelder(a, norms):
    """Per row of ``a`` (float64, 2-D), the least of the three Hoelder bounds under ``norms`` = (L2, L1, max)."""
    l2, l1, largest = norms
    return torch.minimum(torch.minimum(a.norm(dim=1) * l2, a.abs().amax(dim=1) * l1), a.abs().sum(dim=1) * largest)


def error_bound(rows, norms, in_features):
    """Per row of ``rows`` (fp32 hidden states, 2-D), ``E0`` (see the module doc) under ``norms``, the nine
    ``weight_norms`` of the weight (sums over ``in_features`` terms, raised by ``2 n u32`` relative for their
    own rounding: the margin of fp32 sums, and more than float64's, which ``row_norms`` takes)."""
    gamma = in_features * _U32 / (1 - in_features * _U32)
    margin = 1 + 2 * in_features * _U32
    weight, rounding, low = (tuple(margin * float(v) for v in norms[i : i + 3]) for i in (0, 3, 6))
    x = rows.double()
    xb = rows.to(torch.bfloat16).double()
    return (
        _hoelder(x, rounding) + _hoelder(x - xb, low) + gamma * (_hoelder(xb, low) + _hoelder(x, weight))
    ) * margin + 1e-30  # + flushed denormals' share


def slack_base(rows, norms, in_features):
    """Per row, the slack's part that does not grow with the row's best score: ``2 E0 / c``; the rest is
    ``SLACK_RATE |m|`` (``screen_candidates.candidates``' ``rate``)."""
    return 2 * error_bound(rows, norms, in_features) / C

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
above 0 rounds from at most ``s / (1 - u)``, a negative one from below 0). Before session 45 the bound was
``6u`` times the Hoelder bound on ``sum_i |x_i W_ji|``, doubled: the rounding of both operands taken at its worst,
where both are known. On real rows this one is about 5 (Gemma 3 270M) and 7 (SmolLM2-135M) times tighter (at
least 3 times on the tests' random rows), so their rows have 1.4 and 2.2 candidates on average against 20.7 and
6,406 (session 45): SmolLM2's output layer, screened, no longer sends most rows to the fp32 product whole.
"""

import torch

U = 2.0 ** -8  # bfloat16's unit roundoff
_U32 = 2.0 ** -24
C = (1 - 2 * U) / (1 - U)
# the slack's part proportional to |m|, the row's best score: 2 u / ((1 - u) c)
SLACK_RATE = 2 * U / ((1 - U) * C)


@torch.no_grad()
def block_norms(block, low):
    """The largest row norms (L2, L1, max) of ``block`` (fp32 weight rows), of its rounding ``block - low``
    (``low`` its bfloat16 copy; the difference exact in fp32) and of ``low``: nine floats' tensor, nan where a
    weight is nan."""
    rows = (block, block - low.float(), low.float())
    return torch.stack([n for m in rows for n in (torch.linalg.vector_norm(m, dim=1).amax(),
                                                     m.abs().sum(dim=1).amax(), m.abs().amax())])


def _hoelder(a, norms):
    """Per row of ``a`` (float64, 2-D), the least of the three Hoelder bounds under ``norms`` = (L2, L1, max)."""
    l2, l1, largest = norms
    return torch.minimum(torch.minimum(a.norm(dim=1) * l2, a.abs().amax(dim=1) * l1), a.abs().sum(dim=1) * largest)


def error_bound(rows, norms, in_features):
    """Per row of ``rows`` (fp32 hidden states, 2-D), ``E0`` (see the module doc) under ``norms``, the nine
    ``block_norms`` of the weight (the fp32 norms, computed over ``in_features`` terms, raised by
    ``2 n u32`` relative for their own rounding)."""
    gamma = in_features * _U32 / (1 - in_features * _U32)
    margin = 1 + 2 * in_features * _U32
    weight, rounding, low = (tuple(margin * float(v) for v in norms[i:i + 3]) for i in (0, 3, 6))
    x = rows.double()
    xb = rows.to(torch.bfloat16).double()
    return (_hoelder(x, rounding) + _hoelder(x - xb, low) + gamma * (_hoelder(xb, low) + _hoelder(x, weight))) \
        * margin + 1e-30  # + flushed denormals' share


def slack_base(rows, norms, in_features):
    """Per row, the slack's part that does not grow with the row's best score: ``2 E0 / c``; the rest is
    ``SLACK_RATE |m|`` (``screen_candidates.candidates``' ``rate``)."""
    return 2 * error_bound(rows, norms, in_features) / C

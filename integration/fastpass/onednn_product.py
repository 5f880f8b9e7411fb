"""A linear layer's product through oneDNN's matmul (``torch.ops.mkldnn._linear_pointwise``, the CPU kernel that
torch's compiler uses for linear layers) over the layer's own dense weight: ``linear_plan``'s third form.

CPU builds of torch compute ``nn.Linear`` through MKL, which on some processors runs far below what they can do.
On a 2-core AMD EPYC with AVX-512 and a 32 MiB cache, a 32,768 x 640 fp32 product took MKL 4.9, 31, 52 and 70
GFLOPS at 1, 8, 16 and 33 rows (the faster of its two operand orders) and oneDNN 10, 56, 104 and 134; Gemma 3
270M's passes with every layer through oneDNN ran 15-30 % faster from k = 7 than under earlier plans and
13-42 % slower up to k = 3, which is why it is raced per shape and row count, not taken everywhere (,
"oneDNN products" in ``docs/evidence.md``). Its sums run in another order than MKL's, as the
transposed order's do: float rounding apart, the same products.
"""

import torch

_DTYPES = (torch.float32, torch.bfloat16)


def onednn_supported(weight):
    """Whether ``weight`` (a linear layer's, ``(out, in)``) can be multiplied through oneDNN here: on the CPU, in
    float32 or bfloat16, with torch built with oneDNN, and one trial product equal to ``nn.Linear``'s within
    float rounding (a build whose kernel refuses the shape or dtype raises: the form is then left out; so is a
    weight with a value that is not finite)."""
    if weight.device.type != "cpu" or weight.dtype not in _DTYPES or weight.dim() != 2:
        return False
    if not torch.backends.mkldnn.is_available() or not hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        return False
    x = torch.ones((2, weight.shape[1]), dtype=weight.dtype)
    try:
        with torch.no_grad():
            got = onednn_product(weight, None, x)
            want = torch.nn.functional.linear(x, weight)
    except (RuntimeError, NotImplementedError):
        return False
    if not bool(torch.isfinite(want).all()):
        return False  # a weight not finite: the trial cannot tell (and such a layer gains nothing from a race)
    tolerance = 1e-2 if weight.dtype == torch.bfloat16 else 1e-4
    return got.shape == want.shape and bool(
        torch.allclose(got.float(), want.float(), rtol=tolerance, atol=tolerance * float(want.abs().max()) + tolerance)
    )


def onednn_product(weight, bias, flat):
    """``flat @ weight.T + bias`` (``flat`` 2-D rows) through oneDNN's matmul; where autograd would need its
    derivative (a gradient asked of the weight or the input), through ``nn.Linear`` instead."""
    if torch.is_grad_enabled() and (weight.requires_grad or flat.requires_grad):
        return torch.nn.functional.linear(flat, weight, bias)
    return torch.ops.mkldnn._linear_pointwise(flat, weight, bias, "none", [], "")

"""A transposed linear product taken in blocks of output features (``blocked_product.transposed_product``): the
same rows as the product taken whole, blocks sized by the rule, and a model's logits unchanged by it."""

import pytest
import torch
from test_linear_plans import every_form
from tiny_models import tiny_model

from draftless.integration.fastpass import blocked_product, linear_plan


def test_block_sizes_follow_the_rule():
    f = blocked_product.block_features
    assert f(262144, blocked_product.BLOCKED_FROM_ROWS - 1, 4) == 262144  # few rows: whole
    assert f(2048, 33, 4) == 2048  # a result that fits the cache anyway: whole
    for rows in (8, 16, 24, 33, 64, 65):
        for itemsize in (4, 2):  # fp32, 16-bit types: as many bytes of result a block
            step = f(262144, rows, itemsize)
            assert step % blocked_product.BLOCK_MULTIPLE == 0 and step < 262144
            assert (
                step * rows * itemsize
                <= blocked_product.OUTPUT_BLOCK_BYTES
                < (step + blocked_product.BLOCK_MULTIPLE) * rows * itemsize
            )
    assert f(262144, 10_000, 4) == blocked_product.BLOCK_MULTIPLE  # never less than one multiple
    assert f(200, 10_000, 4) == 200  # never more than the features


@pytest.mark.parametrize("features", [640, 1000, 64, 65])  # blocks that divide the features, and ones that do not
@pytest.mark.parametrize("rows,padded", [(1, 1), (3, 4), (5, 8), (17, 17), (40, 40)])
def test_blocked_rows_are_the_whole_products_rows(small_blocks, features, rows, padded):
    g = torch.Generator().manual_seed(features * 100 + rows)
    weight = torch.randn(features, 48, generator=g)
    flat = torch.cat([torch.randn(rows, 48, generator=g), torch.zeros(padded - rows, 48)])
    whole = torch.mm(weight, flat.t()).t()[:rows]
    out = blocked_product.transposed_product(weight, flat, rows)
    assert out.shape == (rows, features) and torch.allclose(out, whole, atol=1e-5, rtol=1e-5)
    assert torch.equal(out.argmax(-1), whole.argmax(-1))
    bias = torch.randn(features, generator=g)
    full = linear_plan.form_product(weight, bias, flat[:rows], padded, True)
    assert full.is_contiguous() and torch.allclose(full, flat[:rows] @ weight.t() + bias, atol=1e-4, rtol=1e-4)


def test_a_blocked_product_calls_the_blas_once_per_block(small_blocks, monkeypatch):
    calls = []
    real = torch.mm
    monkeypatch.setattr(torch, "mm", lambda a, b: calls.append(a.shape[0]) or real(a, b))
    weight, flat = torch.randn(1000, 48), torch.randn(8, 48)
    blocked_product.transposed_product(weight, flat, 8)
    step = blocked_product.block_features(1000, 8, 4)
    assert step == 64 and calls == [64] * 15 + [40]


@pytest.mark.parametrize("kind", ["llama", "gemma3", "gpt2"])
def test_a_model_s_logits_are_unchanged_by_blocked_products(small_blocks, kind, monkeypatch):
    model = tiny_model(kind)
    ids = torch.arange(3, 23)[None]
    plain = [model(input_ids=ids[:, :n]).logits for n in (1, 3, 12, 20)]
    steps = []
    real = blocked_product.block_features
    monkeypatch.setattr(blocked_product, "block_features", lambda *a: steps.append((a[0], real(*a))) or steps[-1][1])
    with linear_plan.planned_linears(model, every_form(model)):
        planned = [model(input_ids=ids[:, :n]).logits for n in (1, 3, 12, 20)]
    assert any(step < features for features, step in steps)  # some products were blocked
    for a, b in zip(plain, planned):
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-5)
        assert torch.equal(a.argmax(-1), b.argmax(-1))

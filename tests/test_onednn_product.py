"""oneDNN's matmul as a linear layer's third form (``onednn_product``, ``linear_plan``): the same products as
``nn.Linear`` up to float rounding, raced and chosen only from ``ONEDNN_FROM_ROWS`` rows."""

import json

import pytest
import torch
from tiny_models import tiny_model

from draftless.integration.fastpass import linear_plan
from draftless.integration.fastpass.onednn_product import onednn_product, onednn_supported

ONEDNN_RUNS = onednn_supported(torch.ones(8, 8))


def test_onednn_runs_on_this_cpu_build():
    # the CPU builds of torch this project installs ship oneDNN: the form is raced here, not silently absent
    assert torch.backends.mkldnn.is_available() and ONEDNN_RUNS
    assert linear_plan.forms_for(torch.ones(8, 8)) == (linear_plan.PLAIN, linear_plan.TRANSPOSED, linear_plan.ONEDNN)


@pytest.mark.parametrize("rows,features,inputs", [(1, 7, 5), (5, 300, 64), (33, 1000, 96), (64, 48, 640)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_a_onednn_product_is_the_linear_layers_product(rows, features, inputs, with_bias):
    g = torch.Generator().manual_seed(rows)
    weight = torch.randn(features, inputs, generator=g)
    bias = torch.randn(features, generator=g) if with_bias else None
    flat = torch.randn(rows, inputs, generator=g)
    want = torch.nn.functional.linear(flat, weight, bias)
    got = onednn_product(weight, bias, flat)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-4)
    padded = linear_plan.form_product(weight, bias, flat, rows + 3, linear_plan.ONEDNN)  # zero rows added, dropped
    assert padded.shape == want.shape and padded.is_contiguous() and torch.allclose(padded, want, rtol=1e-5, atol=1e-4)


def test_onednn_is_left_out_where_it_cannot_run_and_autograd_gets_nn_linear():
    assert not onednn_supported(torch.ones(8, 8, dtype=torch.float64))
    assert not onednn_supported(torch.ones(8))
    for bad in (float("nan"), float("inf")):  # the trial product cannot tell (and raised on the tolerance before)
        weight = torch.ones(8, 8)
        weight[2, 5] = bad
        assert not onednn_supported(weight)
    assert linear_plan.forms_for(torch.ones(8, 8, dtype=torch.float64)) == (linear_plan.PLAIN, linear_plan.TRANSPOSED)
    weight = torch.randn(4, 3, requires_grad=True)
    out = onednn_product(weight, None, torch.randn(2, 3))  # a gradient asked: nn.Linear's product, differentiable
    out.sum().backward()
    assert weight.grad is not None and weight.grad.shape == (4, 3)


def test_the_race_never_gives_onednn_fewer_rows_than_it_serves(monkeypatch):
    # oneDNN timed ten times faster than anything at every row count it is raced at: still never below its rows
    def fake_rounds(passes, repeats, tick=None, warm_up=True):
        return [0.1 if run.args[1] == linear_plan.ONEDNN else 1.0 + 0.01 * run.args[0] for run in passes]

    monkeypatch.setattr(linear_plan, "fastest_of_rounds", fake_rounds)
    modules = next(iter(linear_plan.plain_linears(tiny_model("llama")).values()))
    plan = linear_plan.measure_plan(modules, forms=linear_plan.FORMS)
    start = linear_plan.ONEDNN_FROM_ROWS
    assert plan.forms[start:] == (linear_plan.ONEDNN,) * (len(plan.forms) - start)
    assert plan.pad_to[start:] == tuple(range(start, len(plan.pad_to)))  # oneDNN on its own rows: fastest, unpadded
    assert all(f != linear_plan.ONEDNN for f in plan.forms[:start]) and plan.pad_to[:start] == tuple(range(start))
    assert all(f == linear_plan.ONEDNN for _, f in plan.wide)
    assert linear_plan.LinearPlan.from_json(json.loads(json.dumps(plan.to_json()))) == plan
    with pytest.raises(ValueError, match="forms"):
        linear_plan.measure_plan(modules, forms=(linear_plan.TRANSPOSED, linear_plan.PLAIN))
    with pytest.raises(ValueError, match="forms"):
        linear_plan.LinearPlan((0, 1), (0, 3))


@pytest.mark.parametrize("kind", ["llama", "gemma3", "qwen2", "gpt2"])
def test_onednn_planned_layers_change_no_logits_argmax(kind):
    model = tiny_model(kind)
    every = linear_plan.LinearPlan((0, 1, 2, 3, 4, 5, 8, 8, 8), (0, 0, 1, 1, 0, 2, 2, 2, 2), ((16, 2), (32, 1)))
    plans = linear_plan.LinearPlans(tuple(sorted((shape, every) for shape in linear_plan.plain_linears(model))))
    ids = torch.arange(3, 43)[None]
    counts = (1, 5, 6, 9, 20, 40)
    with torch.no_grad():
        plain = [model(input_ids=ids[:, :n]).logits for n in counts]
        calls = []
        real = linear_plan.onednn_product
        monkeypatch = pytest.MonkeyPatch()
        monkeypatch.setattr(linear_plan, "onednn_product", lambda *a: calls.append(a[2].shape[0]) or real(*a))
        try:
            with linear_plan.planned_linears(model, plans):
                planned = [model(input_ids=ids[:, :n]).logits for n in counts]
        finally:
            monkeypatch.undo()
    assert set(calls) == {5, 8, 9}  # 5 rows whole, 6 padded to 8, 9 as wide (up to 16); 20 and 40 transposed
    for a, b in zip(plain, planned):
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-4)
        assert torch.equal(a.argmax(-1), b.argmax(-1))

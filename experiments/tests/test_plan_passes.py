"""``experiments.plan_passes``: whole passes under the cached plans, ``nn.Linear`` and oneDNN over reordered
weights."""

import pytest
import torch
from tiny_models import tiny_model

from draftless.integration.fastpass import linear_plan
from experiments import plan_passes

needs_prepacking = pytest.mark.skipif(not plan_passes.prepacked_supported(), reason="no oneDNN in this torch build")


@needs_prepacking
def test_prepacked_linears_compute_the_layers_products_from_their_row_count_and_restore_the_plans():
    model = tiny_model("llama")
    ids = torch.arange(3, 15)[None]
    head = model.get_output_embeddings()
    plans = linear_plan.LinearPlans(
        tuple(sorted((shape, linear_plan.LinearPlan.identity()) for shape in linear_plan.plain_linears(model)))
    )
    calls = []
    real = plan_passes._prepacked_forward
    with torch.no_grad():
        want = model(input_ids=ids).logits
        plan_passes._prepacked_forward = lambda *a: calls.append(a[-1].numel() // a[-1].shape[-1]) or real(*a)
        try:
            with plan_passes.prepacked_linears(model, plans, from_rows=4):
                for module in model.modules():
                    if isinstance(module, torch.nn.Linear):
                        assert ("forward" in module.__dict__) == (module is not head)
                got = model(input_ids=ids).logits
                count = len(calls)
                short = model(input_ids=ids[:, :2]).logits
        finally:
            plan_passes._prepacked_forward = real
    assert not any("forward" in m.__dict__ for m in model.modules())
    assert torch.allclose(got, want, atol=1e-4) and count and set(calls) == {12, 2}
    assert torch.allclose(short, want[:, :2], atol=1e-4)


@needs_prepacking
def test_the_tool_times_every_variant_at_every_length(cache_dir):
    rows = plan_passes.measure(tiny_model("qwen2"), ks=[0, 9], repeats=1, prepacked_from=4)
    assert [r["k"] for r in rows] == [0, 9]
    assert all(r[f"{v}_ms"] > 0 for r in rows for v in plan_passes.VARIANTS)
    table = plan_passes.markdown(rows, plan_passes.VARIANTS)
    assert table.count("\n") == 2 + len(rows) + 1 and "| sum |" in table and "prepacked / cached" in table


def test_the_tool_refuses_unknown_variants(cache_dir):
    with pytest.raises(ValueError, match="variants"):
        plan_passes.measure(tiny_model("llama"), ks=[0], repeats=1, variants=("cached", "fast"))
    with pytest.raises(SystemExit):
        plan_passes.main(["--variants", "cached,cached"])

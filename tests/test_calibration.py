"""The cost-curve calibration and its on-disk cache (no timing assertions: only shape and keys)."""

import json

import pytest
import torch

from draftless.integration import calibration, head_padding
from draftless.lookup.cost_model import CostCurve

from tiny_models import tiny_model


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTLESS_CACHE", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("kind", ["llama", "gemma3"])  # gemma3: a context past its sliding window
def test_measured_curve_is_well_formed(kind):
    curve = calibration.measure_cost_curve(tiny_model(kind), ks=(0, 2, 8), context=40, repeats=1)
    assert isinstance(curve, CostCurve) and curve.ks == (0, 2, 8)
    assert all(b >= a > 0 for a, b in zip(curve.seconds, curve.seconds[1:]))


def test_cache_is_reused_and_keyed_by_dtype_and_threads(cache_dir, monkeypatch):
    model = tiny_model("llama")
    calls = []
    real = calibration.measure_cost_curve

    def counting(m, ks=calibration.DEFAULT_KS):
        calls.append(1)
        return real(m, ks=ks, context=16, repeats=1)

    monkeypatch.setattr(calibration, "measure_cost_curve", counting)
    first = calibration.cached_cost_curve(model)
    calibration._MEMO.clear()
    assert calibration.cached_cost_curve(model) == first and len(calls) == 1  # read back from disk
    assert len(list((cache_dir / "calibration").glob("*-cost-*.json"))) == 1
    assert len(list((cache_dir / "calibration").glob("*-head.json"))) == 1
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1 if threads > 1 else 2)
        calibration.cached_cost_curve(model)  # another thread count: measured again
    finally:
        torch.set_num_threads(threads)
    assert len(calls) == 2
    calibration.cached_cost_curve(model.to(torch.float64))  # another dtype: measured again
    assert len(calls) == 3


def test_unreadable_cache_file_is_measured_again(cache_dir, monkeypatch):
    model = tiny_model("llama")
    ks = "-".join(map(str, calibration.DEFAULT_KS))
    path = cache_dir / "calibration" / f"{calibration.calibration_key(model)}-cost-{ks}.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    monkeypatch.setattr(calibration, "measure_cost_curve", lambda m, ks=None: CostCurve((0, 1), (1.0, 2.0)))
    assert calibration.cached_cost_curve(model) == CostCurve((0, 1), (1.0, 2.0))
    assert "unreadable" not in path.read_text()


def test_ks_must_start_at_zero():
    with pytest.raises(ValueError, match="start at 0"):
        calibration.measure_cost_curve(tiny_model("llama"), ks=(1, 2))


def test_head_plan_is_well_formed_and_survives_the_cache_file():
    plan = head_padding.measure_head_plan(tiny_model("llama"), max_rows=5, wide_rows=(8, 16), repeats=1)
    assert len(plan.pad_to) == 6 and all(m <= p <= 5 for m, p in enumerate(plan.pad_to))
    assert [rows for rows, _ in plan.wide] == [8, 16]
    assert head_padding.HeadPlan.from_json(json.loads(json.dumps(plan.to_json()))) == plan


def test_head_plan_rejects_a_malformed_table():
    with pytest.raises(ValueError, match="pad_to"):
        head_padding.HeadPlan((0, 3, 2), (False,) * 3)
    with pytest.raises(ValueError, match="equally long"):
        head_padding.HeadPlan((0, 1), (False,))
    with pytest.raises(ValueError, match="wide"):
        head_padding.HeadPlan((0, 1, 2), (False,) * 3, ((2, True),))


def test_head_plan_choice_pads_small_counts_and_orders_wide_ones():
    plan = head_padding.HeadPlan((0, 2, 2, 4, 4), (False, True, True, False, True), ((16, True), (32, False)))
    assert [plan.choice(m) for m in (1, 3, 4)] == [(2, True), (4, False), (4, True)]
    assert [plan.choice(m) for m in (5, 16, 17, 40)] == [(5, True), (16, True), (17, False), (40, False)]
    assert head_padding.HeadPlan.identity(4).is_identity and not plan.is_identity


EVERY_FORM = head_padding.HeadPlan((0, 4, 4, 4, 4, 8, 8, 8, 8), (False, True, True, False, True, True, False,
                                                                 True, True), ((16, True),))


@pytest.mark.parametrize("kind", ["llama", "gemma3", "gpt2"])
def test_planned_head_changes_no_logit_and_leaves_nothing_behind(kind):
    model = tiny_model(kind)
    head = model.get_output_embeddings()
    ids = torch.arange(3, 23)[None]
    plain = [model(input_ids=ids[:, :n]).logits for n in (1, 3, 6, 12, 20)]
    with head_padding.planned_head(model, EVERY_FORM):  # padded + transposed, plain, and both wide orders
        planned = [model(input_ids=ids[:, :n]).logits for n in (1, 3, 6, 12, 20)]
    for a, b in zip(plain, planned):
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-5)
        assert torch.equal(a.argmax(-1), b.argmax(-1))
    assert "forward" not in head.__dict__ and not head._forward_hooks and not head._forward_pre_hooks


def test_planned_head_adds_the_bias_of_a_head_that_has_one():
    model = tiny_model("llama")
    head = model.get_output_embeddings()
    head.bias = torch.nn.Parameter(torch.randn(head.out_features))
    ids = torch.arange(3, 9)[None]
    plain = model(input_ids=ids).logits
    with head_padding.planned_head(model, EVERY_FORM):
        assert torch.allclose(model(input_ids=ids).logits, plain, atol=1e-5)


def test_planned_head_is_restored_on_error_and_skips_a_replaced_forward():
    model = tiny_model("llama")
    head = model.get_output_embeddings()
    with pytest.raises(RuntimeError):
        with head_padding.planned_head(model, EVERY_FORM):
            raise RuntimeError("boom")
    assert "forward" not in head.__dict__
    custom = head.forward
    head.forward = custom  # as accelerate's offload hooks do: the plan must leave such a head alone
    with head_padding.planned_head(model, EVERY_FORM):
        assert head.__dict__["forward"] is custom
    assert head_padding.measure_head_plan(model, max_rows=2, wide_rows=(), repeats=1).is_identity

"""The cost-curve calibration and its on-disk cache (no timing assertions: only shape and keys)."""

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


def test_head_padding_table_is_well_formed():
    pad = head_padding.measure_head_padding(tiny_model("llama"), max_rows=5, repeats=1)
    assert len(pad) == 6 and all(m <= p <= 5 for m, p in enumerate(pad))


@pytest.mark.parametrize("kind", ["llama", "gemma3", "gpt2"])
def test_padded_head_changes_no_logit_and_leaves_no_hook(kind):
    model = tiny_model(kind)
    head = model.get_output_embeddings()
    ids = torch.arange(3, 9)[None]
    plain = model(input_ids=ids).logits
    with head_padding.padded_head(model, (0, 4, 4, 4, 4, 8, 8, 8, 8)):  # 6 rows -> 8, then back to 6
        padded = model(input_ids=ids).logits
        one = model(input_ids=ids[:, :1]).logits  # 1 row -> 4
    assert padded.shape == plain.shape and torch.allclose(padded, plain, atol=1e-5)
    assert one.shape[1] == 1 and torch.allclose(one[0, 0], model(input_ids=ids[:, :1]).logits[0, 0], atol=1e-5)
    assert not head._forward_hooks and not head._forward_pre_hooks


def test_padded_head_hooks_are_removed_on_error():
    model = tiny_model("llama")
    with pytest.raises(RuntimeError):
        with head_padding.padded_head(model, (0, 4, 4, 4, 4)):
            raise RuntimeError("boom")
    assert not model.get_output_embeddings()._forward_hooks

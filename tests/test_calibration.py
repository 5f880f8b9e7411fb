"""The cost-curve calibration and its on-disk cache (no timing assertions: only shape and keys)."""

import pytest
import torch

from draftless.integration import calibration
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
        return real(m, ks=(0, 4), context=16, repeats=1)

    monkeypatch.setattr(calibration, "measure_cost_curve", counting)
    first = calibration.cached_cost_curve(model)
    assert calibration.cached_cost_curve(model) == first and len(calls) == 1  # read back from disk
    assert len(list((cache_dir / "calibration").glob("*.json"))) == 1
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
    path = cache_dir / "calibration" / f"{calibration.calibration_key(model)}.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    monkeypatch.setattr(calibration, "measure_cost_curve", lambda m, ks=None: CostCurve((0, 1), (1.0, 2.0)))
    assert calibration.cached_cost_curve(model) == CostCurve((0, 1), (1.0, 2.0))


def test_ks_must_start_at_zero():
    with pytest.raises(ValueError, match="start at 0"):
        calibration.measure_cost_curve(tiny_model("llama"), ks=(1, 2))

"""Which weights ``linear_plan`` times each shape's forms over: a probe past the last-level cache."""

import pytest
import torch

from draftless.integration import linear_plan, weight_probe


def test_forms_are_timed_over_a_probe_past_the_cache_not_every_layer():
    """Each shape's forms stream ``probe_bytes`` of weights: whole layers in turn until that many bytes, or a row
    slice of one layer larger than that (an output layer), never fewer bytes than asked where the layers hold
    them."""
    layers = [torch.nn.Linear(16, 32) for _ in range(5)]  # 2 KiB of weights each
    per_layer = 16 * 32 * 4
    assert len(weight_probe.probe_weights(layers, 2 * per_layer + 1)) == 3
    assert len(weight_probe.probe_weights(layers, 100 * per_layer)) == 5  # all there is
    assert [w is m.weight for (w, _), m in zip(weight_probe.probe_weights(layers, per_layer), layers)] == [True]
    (weight, bias), = weight_probe.probe_weights(layers[:1], 10 * 16 * 4)  # ten rows' worth of one 32-row weight
    assert weight.shape == (10, 16) and bias.shape == (10,) and weight.data_ptr() == layers[0].weight.data_ptr()
    (weight, bias), = weight_probe.probe_weights([torch.nn.Linear(16, 32, bias=False)], 1)
    assert weight.shape == (1, 16) and bias is None
    with pytest.raises(ValueError, match="nbytes"):
        weight_probe.probe_weights(layers, 0)
    cache = weight_probe.last_level_cache_bytes("cpu")
    assert isinstance(cache, int) and cache >= 0
    assert weight_probe.probe_bytes("cpu") == max(weight_probe.MIN_PROBE_BYTES, 2 * cache)


def test_measure_plan_times_only_the_probe(monkeypatch):
    layers = [torch.nn.Linear(16, 32) for _ in range(4)]
    seen = set()
    real = linear_plan._product
    monkeypatch.setattr(linear_plan, "_product", lambda w, *rest: seen.add(w.data_ptr()) or real(w, *rest))
    linear_plan.measure_plan(layers, max_rows=2, wide_rows=(), repeats=1, nbytes=2 * 16 * 32 * 4)
    assert seen == {layers[0].weight.data_ptr(), layers[1].weight.data_ptr()}


def test_calibration_evidence_compares_both_shortcuts_with_the_long_way(tmp_path, monkeypatch):
    from benchmarks import calibration_evidence
    from draftless.integration import calibration
    from tiny_models import tiny_model

    monkeypatch.setenv("DRAFTLESS_CACHE", str(tmp_path))
    calibration._MEMO.clear()
    model = tiny_model("llama")
    lines = calibration_evidence.compare_plans(model, probe_mib=1, rounds=1)
    rows = [line for line in lines if line.startswith("| ") and line[2].isdigit()]
    assert [int(r.split("|")[1]) for r in rows] == list(calibration_evidence.PLAN_KS)
    assert all(float(r.split("|")[4]) > 0 for r in rows)  # a ratio of two measured passes
    lines = calibration_evidence.compare_curves(model, rounds=1)
    rows = [line for line in lines if line.startswith("| ") and line[2].isdigit()]
    assert [int(r.split("|")[1]) for r in rows] == list(calibration.DEFAULT_KS)
    assert [r.split("|")[5].strip() == "timed" for r in rows] == [k in calibration.MEASURED_KS
                                                                   for k in calibration.DEFAULT_KS]
    assert "1 round(s) after warming the ends" in lines[0]
    lines = calibration_evidence.compare_forms(model, rounds=1)
    assert "(oneDNN raced here: True)" in lines[0]
    shapes = [line for line in lines if line.startswith("| ") and " x " in line.split("|")[1]]
    assert len(shapes) >= 1 and all(len(r.split("|")[2].split(",")) == 8 for r in shapes)  # 1..8 rows each
    rows = [line for line in lines if line.startswith("| ") and line[2].isdigit() and line not in shapes]
    assert [int(r.split("|")[1]) for r in rows] == list(calibration_evidence.FORM_KS)
    assert all(float(r.split("|")[4]) > 0 for r in rows)
    with pytest.raises(SystemExit):
        calibration_evidence.main(["curve", "--rounds", "0"])
    with pytest.raises(SystemExit):
        calibration_evidence.main(["forms", "--rounds", "0"])

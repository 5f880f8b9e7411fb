"""``calibrated`` and ``calibrate``: whether a model still needs measuring here, and the progress of its first
calibration, stage by stage (what the CLI and the benchmarks draw as bars). No timing assertions."""

import json

import pytest
import torch
from tiny_models import tiny_model, tiny_tokenizer

from draftless.integration import calibration, pass_check, store
from draftless.integration.fastpass import linear_plan


def _by_stage(calls):
    stages = {}
    for stage, done, total in calls:
        stages.setdefault(stage, []).append((done, total))
    return stages


def test_calibrate_counts_every_stage_to_its_total_then_measures_nothing(cache_dir, short_curve):
    model = tiny_model("llama")
    calls = []
    assert not calibration.calibrated(model)
    curve, plans, inexact = calibration.calibrate(model, lambda *call: calls.append(call))
    assert calibration.calibrated(model) and inexact == ()  # the CPU: no pass-length check
    stages = _by_stage(calls)
    assert list(stages) == ["linear-layer plans", "cost curve"] == list(calibration.STAGES[:2])
    for steps in stages.values():  # done counts 1, 2, ... up to the total announced from the first step
        assert [done for done, _ in steps] == list(range(1, len(steps) + 1))
        assert {total for _, total in steps} == {len(steps)}
    rows = linear_plan.MAX_PADDED_ROWS + 2 * len(linear_plan.WIDE_ROWS)  # both edges of each wide range
    forms = linear_plan.forms_for(model.lm_head.weight)  # oneDNN's too where it runs
    counts = linear_plan.row_counts(linear_plan.MAX_PADDED_ROWS, linear_plan.WIDE_ROWS)
    timed = 2 * rows + (len(forms) > 2) * sum(r >= linear_plan.ONEDNN_FROM_ROWS for r in counts)
    assert len(linear_plan._raced(forms, linear_plan.MAX_PADDED_ROWS, linear_plan.WIDE_ROWS)) == timed
    assert len(stages["linear-layer plans"]) == len(linear_plan.plain_linears(model)) * timed * 2
    assert len(stages["cost curve"]) == 2 + len(calibration.MEASURED_KS)  # the two ends warmed up, one timed round
    assert curve == calibration.cached_cost_curve(model) and plans == calibration.cached_linear_plans(model)
    calls.clear()
    store.forget_read_files()  # read back from disk: nothing measured, nothing reported
    assert calibration.calibrate(model, lambda *call: calls.append(call)) == (curve, plans, inexact)
    assert calls == []


def test_calibrated_follows_the_key_and_a_readable_file(cache_dir, short_curve, caplog):
    model = tiny_model("llama")
    calibration.calibrate(model)
    assert calibration.calibrated(model)
    assert not calibration.calibrated(model, ks=(0, 1, 2))  # a curve at other lengths is not cached
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1 if threads > 1 else 2)
        assert not calibration.calibrated(model)  # another thread count: another key
    finally:
        torch.set_num_threads(threads)
    assert not calibration.calibrated(model.to(torch.float64))
    model.to(torch.float32)
    kind = calibration.cost_kind(calibration.DEFAULT_KS)
    path = cache_dir / "calibration" / f"{calibration.calibration_key(model)}-{kind}.json"
    path.write_text("{not json")
    store.forget_read_files()
    with caplog.at_level("WARNING", logger="draftless.integration.calibration"):
        assert not calibration.calibrated(model)  # asking warns of nothing; measuring again does
        assert not caplog.records
        calibration.calibrate(model)
        assert any("unreadable" in r.getMessage() for r in caplog.records)
    assert calibration.calibrated(model) and json.loads(path.read_text())["ks"] == list(calibration.DEFAULT_KS)


def test_off_the_cpu_the_pass_length_check_is_a_third_stage(cache_dir, short_curve, monkeypatch):
    model = tiny_model("llama")
    monkeypatch.setattr(calibration, "checks_pass_lengths", lambda m: True)  # as on a GPU, with the CPU's passes
    monkeypatch.setattr(pass_check, "CONTEXTS", (9, 20))
    calls = []
    assert not calibration.calibrated(model, max_draft=4)
    _, _, inexact = calibration.calibrate(model, lambda *call: calls.append(call), max_draft=4)
    assert inexact == ()  # fp32 on the CPU: every length exact
    assert _by_stage(calls)["pass-length check"] == [(1, 2), (2, 2)]  # one step per context
    assert calibration.calibrated(model, max_draft=4) and not calibration.calibrated(model, max_draft=5)


def test_progress_and_max_draft_are_checked(cache_dir):
    model = tiny_model("llama")
    for call in (calibration.calibrate, calibration.recalibrate):
        with pytest.raises(TypeError, match="progress"):
            call(model, progress="bar")
    for bad in (0, 2000, 1.5):  # checked on the CPU too, where no pass length is checked
        with pytest.raises((TypeError, ValueError), match="max_draft"):
            calibration.calibrate(model, max_draft=bad)
        with pytest.raises((TypeError, ValueError), match="max_draft"):
            calibration.calibrated(model, max_draft=bad)
    assert not list(cache_dir.glob("calibration/*.json"))  # refused before anything was measured or removed


def test_cli_generate_shows_the_first_calibration_once(tmp_path, cache_dir, short_curve, capsys):
    from draftless.integration.cli import main

    tok = tiny_tokenizer()
    tiny_model("llama", vocab=len(tok)).save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    prompt = tmp_path / "p.txt"
    prompt.write_text("def add(x, y):\n    return x + y\n" * 2)
    command = ["generate", "--model", str(tmp_path / "m"), "--prompt-file", str(prompt), "--max-new-tokens", "6"]
    main(command)
    err = capsys.readouterr().err
    assert "measuring this model's speed on this machine once" in err
    assert "calibrating: linear-layer plans" in err and "calibrating: cost curve" in err
    store.forget_read_files()
    main(command)  # cached on disk: straight to the completion
    assert "calibrating" not in capsys.readouterr().err


def test_the_linear_plans_are_timed_without_autograd(monkeypatch):
    # a product that records a graph costs more than the loop's (which runs under no_grad): timed so, the plans
    # would be chosen for passes the loop never makes
    model = tiny_model("llama")
    seen = []
    real = linear_plan.form_product
    monkeypatch.setattr(linear_plan, "form_product", lambda *a: seen.append(torch.is_grad_enabled()) or real(*a))
    linear_plan.measure_linear_plans(model, max_rows=2, wide_rows=(), repeats=1, progress=lambda done, total: None)
    assert seen and not any(seen)

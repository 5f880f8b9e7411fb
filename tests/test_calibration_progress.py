"""``calibrated`` and ``calibrate``: whether a model still needs measuring here, and the progress of its first
calibration, stage by stage (what the CLI and the benchmarks draw as bars). No timing assertions."""

import json
import os
from pathlib import Path

import pytest
import torch

from draftless.integration import calibration, linear_plan, pass_check

from tiny_models import tiny_model, tiny_tokenizer


@pytest.fixture
def short_curve(monkeypatch):
    """The curve measured after a short context in one round: the same steps, a fraction of the time."""
    real = calibration.measure_cost_curve
    monkeypatch.setattr(calibration, "measure_cost_curve",
                        lambda m, ks, progress=None: real(m, ks, context=16, repeats=1, progress=progress))


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
    calibration._MEMO.clear()  # read back from disk: nothing measured, nothing reported
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
    calibration._MEMO.clear()
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
    calibration._MEMO.clear()
    main(command)  # cached on disk: straight to the completion
    assert "calibrating" not in capsys.readouterr().err


def test_the_linear_plans_are_timed_without_autograd(monkeypatch):
    # a product that records a graph costs more than the loop's (which runs under no_grad): timed so, the plans
    # would be chosen for passes the loop never makes
    model = tiny_model("llama")
    seen = []
    real = linear_plan._product
    monkeypatch.setattr(linear_plan, "_product", lambda *a: seen.append(torch.is_grad_enabled()) or real(*a))
    linear_plan.measure_linear_plans(model, max_rows=2, wide_rows=(), repeats=1, progress=lambda done, total: None)
    assert seen and not any(seen)


def test_first_calibration_times_each_stage_and_then_nothing(cache_dir, short_curve):
    from benchmarks.first_calibration import time_first_calibration

    model = tiny_model("llama")
    first = time_first_calibration(model)
    stages = [part for part in first if part in calibration.STAGES]
    assert stages == list(calibration.STAGES[:2]) and all(first[s] > 0 for s in stages)
    assert first["total"] >= sum(first[s] for s in stages) > 0
    assert 0 < first["curve passes after the first"] < first["cost curve"]
    again = time_first_calibration(model)  # everything cached: no stage measured
    assert set(again) == {"total"}


def test_process_start_times_every_stage_of_a_local_model(tmp_path, cache_dir, short_curve, capsys):
    from benchmarks.process_start import main

    tokenizer = tiny_tokenizer()
    tiny_model("llama", vocab=len(tokenizer)).save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    main(["--model", str(tmp_path / "tiny"), "--once", "--new-tokens", "4"])
    seconds = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert list(seconds) == ["import torch", "import transformers", "import draftless.integration",
                             "load_model (its tokenizer and weights)", "build the generator", "first generate",
                             "second generate"]
    assert all(value >= 0 for value in seconds.values()) and seconds["first generate"] > 0


def test_process_start_with_an_empty_calibration_calibrates_elsewhere(tmp_path, cache_dir, short_curve, capsys,
                                                                         monkeypatch):
    from benchmarks.process_start import main

    tokenizer = tiny_tokenizer()
    tiny_model("llama", vocab=len(tokenizer)).save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    monkeypatch.setenv("DRAFTLESS_CACHE", str(cache_dir))  # restored after: --once moves it, as its process may
    before = sorted(p.name for p in cache_dir.rglob("*"))
    main(["--model", str(tmp_path / "tiny"), "--once", "--new-tokens", "4", "--empty-calibration"])
    seconds = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert seconds["first generate"] > 0 and len(seconds) == 7
    assert sorted(p.name for p in cache_dir.rglob("*")) == before  # the user's cache untouched
    elsewhere = os.environ["DRAFTLESS_CACHE"]
    assert elsewhere != str(cache_dir) and not Path(elsewhere).exists()  # the empty cache removed after
    assert calibration._MEMO and all(key.startswith(elsewhere) for key in calibration._MEMO)  # calibrated there


def test_process_start_both_ways_reports_what_the_first_calibration_adds(monkeypatch, tmp_path, capsys):
    import benchmarks.process_start as process_start

    commands = []

    def fresh(command, repeats):  # cached processes: 1.5 s to build and first generate, empty ones 4.5 s
        commands.append(command)
        empty = "--empty-calibration" in command
        return [{"load": 2.0, "build the generator": 2.5 if empty else 0.5, "first generate": 2.0 if empty else 1.0}
                ] * repeats

    monkeypatch.setattr(process_start, "run_fresh", fresh)
    out = tmp_path / "start.json"
    runs = process_start.main(["--model", "m", "--calibration", "both", "--repeats", "2", "--json", str(out)])
    assert ["--empty-calibration" in c for c in commands] == [False, False, True, False, True]  # one untimed first
    assert len(runs["cached"]) == len(runs["empty"]) == 2
    assert "adds 3.00 s to building the generator and its first generate" in capsys.readouterr().out
    written = json.loads(out.read_text())
    assert written["first_calibration_felt"] == 3.0 and written["calibration"] == "both"
    single = process_start.main(["--model", "m", "--calibration", "empty", "--repeats", "1"])
    assert single[0]["first generate"] == 2.0 and "--empty-calibration" in commands[-1]


def test_fresh_process_timings_are_tabled_with_their_median():
    from benchmarks.fresh_processes import median_table

    table = median_table("title", [{"a": 1.0, "b": 4.0}, {"a": 3.0, "b": 2.0}, {"a": 2.0, "b": 3.5}])
    assert table.splitlines()[:4] == ["title", "", "| part | run 1 | run 2 | run 3 | median |", "|---|---|---|---|---|"]
    assert table.splitlines()[4:] == ["| a | 1.00 | 3.00 | 2.00 | 2.00 |", "| b | 4.00 | 2.00 | 3.50 | 3.50 |"]

"""The cost-curve calibration and its on-disk cache (no timing assertions: only shape and keys)."""

import contextlib
import json
import logging

import pytest
import torch
from tiny_models import tiny_model

from draftless.integration import calibration, pass_timing, store
from draftless.integration import store as calibration_key
from draftless.integration.fastpass import linear_plan
from draftless.lookup.cost_model import CostCurve


@pytest.mark.parametrize("kind", ["llama", "gemma3"])  # gemma3: a context past its sliding window
def test_measured_curve_is_well_formed(kind):
    curve = calibration.measure_cost_curve(tiny_model(kind), ks=(0, 2, 8), context=40, repeats=1)
    assert isinstance(curve, CostCurve) and curve.ks == (0, 2, 8)
    assert all(s > 0 for s in curve.seconds)  # as measured: a longer pass may cost less (see DEFAULT_KS)


def test_a_longer_pass_measured_cheaper_stays_cheaper(monkeypatch):
    # a CPU's 8-row stair: 16 rows (k = 15) faster than 15 (k = 14); the curve keeps what was measured
    stair = {1: 0.10, 15: 0.45, 16: 0.30, 17: 0.37}
    monkeypatch.setattr(pass_timing, "time_pass", lambda model, cache, ids, context, screen=None: stair[ids.shape[1]])
    curve = calibration.measure_cost_curve(tiny_model("llama"), ks=(0, 14, 15, 16), context=8, repeats=2)
    assert curve.seconds == (0.10, 0.45, 0.30, 0.37)


def test_the_curve_warms_up_its_two_ends_then_keeps_each_lengths_fastest_timed_pass(monkeypatch):
    timed = []
    seconds = iter([9.0, 9.0, 0.2, 0.5, 0.9, 9.0, 9.0, 0.1, 0.6, 0.7, 0.3, 0.4, 0.8])  # warm-ups: never kept

    def time_pass(model, cache, ids, context, screen=None):
        timed.append(ids.shape[1] - 1)
        return next(seconds)

    monkeypatch.setattr(pass_timing, "time_pass", time_pass)
    curve = calibration.measure_cost_curve(tiny_model("llama"), ks=(0, 4, 16), context=8)
    assert timed == [16, 0] + [0, 4, 16]  # the longest first, then one timed round (the default)
    assert curve.seconds == (0.2, 0.5, 0.9)
    timed.clear()
    curve = calibration.measure_cost_curve(tiny_model("llama"), ks=(0, 4, 16), context=8, repeats=2)
    assert timed == [16, 0] + [0, 4, 16] * 2 and curve.seconds == (0.1, 0.4, 0.7)  # interleaved, fastest kept
    with pytest.raises(ValueError, match="repeats"):
        calibration.measure_cost_curve(tiny_model("llama"), ks=(0, 4), repeats=0)


def test_a_length_timed_slower_than_a_longer_one_is_timed_again_once(monkeypatch):
    timed = []
    seconds = {0: [0.1], 4: [0.2], 8: [0.5, 0.25], 16: [0.4]}  # k = 8 slowed by chance the first time

    def time_pass(model, cache, ids, context, screen=None):
        k = ids.shape[1] - 1
        timed.append(k)
        return seconds[k].pop(0) if len(seconds[k]) > 1 else seconds[k][0]

    monkeypatch.setattr(pass_timing, "time_pass", time_pass)
    curve = calibration.measure_cost_curve(tiny_model("llama"), ks=(0, 4, 8, 16), context=8)
    assert timed == [16, 0] + [0, 4, 8, 16] + [8] and curve.seconds == (0.1, 0.2, 0.25, 0.4)
    assert calibration.slower_than_longer([0.1, 0.3, 0.2, 0.5, 0.15, 0.6]) == [1, 2, 3]
    assert calibration.slower_than_longer([0.1, 0.2, 0.3]) == []


def test_lengths_not_measured_are_interpolated_and_the_default_times_twelve(monkeypatch):
    timed = []

    def time_pass(model, cache, ids, context, screen=None):
        timed.append(ids.shape[1] - 1)
        return 0.1 + 0.01 * (ids.shape[1] - 1)

    monkeypatch.setattr(pass_timing, "time_pass", time_pass)
    curve = calibration.measure_cost_curve(tiny_model("llama"), ks=(0, 4, 8, 16), context=8, measured=(0, 8, 16))
    assert sorted(set(timed)) == [0, 8, 16] and curve.ks == (0, 4, 8, 16)
    assert curve.seconds == pytest.approx((0.1, 0.14, 0.18, 0.26))  # 4: half way from 0 to 8
    timed.clear()
    curve = calibration.measure_cost_curve(tiny_model("llama"), context=8)  # DEFAULT_KS
    assert sorted(set(timed)) == list(calibration.MEASURED_KS) and curve.ks == calibration.DEFAULT_KS
    assert curve.at(23) == pytest.approx(0.1 + 0.01 * 23) and curve.at(64) == pytest.approx(0.74)  # the line
    assert set(calibration.MEASURED_KS) < set(calibration.DEFAULT_KS)
    for bad in ((0,), (4, 8), (0, 5), (0, 8, 4), (0, 4, 4)):
        with pytest.raises(ValueError, match="measured"):
            calibration.measure_cost_curve(tiny_model("llama"), ks=(0, 4, 8, 16), context=8, measured=bad)


def test_default_lengths_hold_both_edges_of_every_8_row_stair():
    ks = calibration.DEFAULT_KS
    assert ks[0] == 0 and list(ks) == sorted(set(ks)) and ks[-1] == 64
    for rows in (8, 16, 24, 32, 48, 64):  # a pass over 1 + k rows
        assert rows - 1 in ks and rows in ks


def test_cache_is_reused_and_keyed_by_dtype_and_threads(cache_dir, monkeypatch):
    model = tiny_model("llama")
    calls = []
    real = calibration.measure_cost_curve

    def counting(m, ks=calibration.DEFAULT_KS, progress=None):
        calls.append(1)
        return real(m, ks=ks, context=16, repeats=1, progress=progress)

    monkeypatch.setattr(calibration, "measure_cost_curve", counting)
    first = calibration.cached_cost_curve(model)
    store.forget_read_files()
    assert calibration.cached_cost_curve(model) == first and len(calls) == 1  # read back from disk
    assert len(list((cache_dir / "calibration").glob("*-cost-*.json"))) == 1
    assert len(list((cache_dir / "calibration").glob(f"*-{calibration.PLANS_KIND}.json"))) == 1
    assert not list((cache_dir / "calibration").glob(".*"))  # written whole, then renamed: no staging file left
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1 if threads > 1 else 2)
        calibration.cached_cost_curve(model)  # another thread count: measured again
    finally:
        torch.set_num_threads(threads)
    assert len(calls) == 2
    calibration.cached_cost_curve(model.to(torch.float64))  # another dtype: measured again
    assert len(calls) == 3
    model.to(torch.float32)
    assert calibration.cached_cost_curve(model) == first and len(calls) == 3
    # the same cache directory on another machine (a network home): measured again there
    monkeypatch.setattr(calibration_key, "_cpu_model_name", lambda: "Another CPU")
    calibration.cached_cost_curve(model)
    assert len(calls) == 4


def test_unreadable_cache_file_is_measured_again(cache_dir, monkeypatch):
    model = tiny_model("llama")
    kind = calibration.cost_kind(calibration.DEFAULT_KS)
    path = cache_dir / "calibration" / f"{calibration.calibration_key(model)}-{kind}.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    monkeypatch.setattr(
        calibration, "measure_cost_curve", lambda m, ks=None, progress=None: CostCurve((0, 1), (1.0, 2.0))
    )
    assert calibration.cached_cost_curve(model) == CostCurve((0, 1), (1.0, 2.0))
    assert "unreadable" not in path.read_text()


def test_ks_must_start_at_zero():
    with pytest.raises(ValueError, match="start at 0"):
        calibration.measure_cost_curve(tiny_model("llama"), ks=(1, 2))


def test_linear_plans_are_well_formed_and_survive_the_cache_file(cache_dir):
    model = tiny_model("llama")
    groups = linear_plan.plain_linears(model)
    assert model.get_output_embeddings() in groups[tuple(model.get_output_embeddings().weight.shape)]
    assert sum(map(len, groups.values())) == sum(type(m) is torch.nn.Linear for m in model.modules())
    plan = linear_plan.measure_plan(groups[next(iter(groups))], max_rows=5, wide_rows=(8, 16), repeats=1)
    assert len(plan.pad_to) == 6 and all(m <= p <= 5 for m, p in enumerate(plan.pad_to))
    assert [rows for rows, _ in plan.wide] == [8, 16]
    assert linear_plan.LinearPlan.from_json(json.loads(json.dumps(plan.to_json()))) == plan
    plans = linear_plan.measure_linear_plans(model, max_rows=3, wide_rows=(), repeats=1)
    assert all(shape in groups and not p.is_identity for shape, p in plans.by_shape)
    assert linear_plan.LinearPlans.from_json(json.loads(json.dumps(plans.to_json()))) == plans
    cached = calibration.cached_linear_plans(model)  # measured once, then read back from the cache file
    store.forget_read_files()
    assert calibration.cached_linear_plans(model) == cached


def test_recalibrate_replaces_what_is_cached(cache_dir, monkeypatch):
    model = tiny_model("llama")
    curves = iter([CostCurve((0, 1), (9.0, 18.0)), CostCurve((0, 1), (1.0, 2.0))])  # a busy day, then a quiet one
    monkeypatch.setattr(calibration, "measure_cost_curve", lambda m, ks=None, progress=None: next(curves))
    kind = calibration.cost_kind(calibration.DEFAULT_KS)
    assert calibration.cached_cost_curve(model) == CostCurve((0, 1), (9.0, 18.0))
    path = cache_dir / "calibration" / f"{calibration.calibration_key(model)}-{kind}.json"
    assert json.loads(path.read_text())["seconds"] == [9.0, 18.0]
    curve, plans, inexact = calibration.recalibrate(model)
    assert curve == CostCurve((0, 1), (1.0, 2.0)) and inexact == ()  # the CPU: no pass-length check
    assert json.loads(path.read_text())["seconds"] == [1.0, 2.0]
    assert calibration.cached_cost_curve(model) == curve  # the process's memo holds the new one too
    assert plans == calibration.cached_linear_plans(model)


def test_calibrate_command_prints_the_new_curve(cache_dir, tmp_path, capsys):
    from tiny_models import tiny_tokenizer

    from draftless.integration.cli import main

    tok = tiny_tokenizer()
    model = tiny_model("llama", vocab=len(tok))
    model.save_pretrained(tmp_path / "tiny")
    tok.save_pretrained(tmp_path / "tiny")
    main(["calibrate", "--model", str(tmp_path / "tiny")])
    out = capsys.readouterr().out
    assert "c(k), ms" in out and "k =  0:" in out and "k = 64:" in out
    assert list((cache_dir / "calibration").glob("*-cost-*.json"))
    with pytest.raises(SystemExit):
        main(["calibrate", "--model", str(tmp_path / "tiny"), "--device", "tpu9"])


def test_a_curve_measured_on_a_slower_machine_is_reported_once(cache_dir, caplog):
    from draftless.integration import SpeculativeGenerator

    model = tiny_model("llama")
    kind = calibration.cost_kind(calibration.DEFAULT_KS)
    path = cache_dir / "calibration" / f"{calibration.calibration_key(model)}-{kind}.json"
    path.parent.mkdir(parents=True)
    ks = list(calibration.DEFAULT_KS)
    path.write_text(json.dumps({"ks": ks, "seconds": [10.0 + k for k in ks]}))  # 10 s a pass: no tiny model
    store.forget_read_files()
    gen = SpeculativeGenerator(model)
    prompt = torch.randint(0, 64, (1, 12), generator=torch.Generator().manual_seed(0))
    with caplog.at_level("WARNING", logger="draftless.integration.speculative"):
        gen.generate(prompt, max_new_tokens=40)
        assert gen.last_stats.passes >= 16
        gen.generate(prompt, max_new_tokens=40)
    stale = [r for r in caplog.records if "draftless calibrate" in r.getMessage()]
    assert len(stale) == 1 and gen.proposer.cost.scale < 0.5
    store.forget_read_files()


def test_output_layer_times_filled_in_out_of_range_are_dropped_not_raised(monkeypatch, caplog):
    clocks = []

    class Clock:  # stands in for ``HeadClock``: the output layer's seconds of the pass just timed
        def __init__(self, model):
            self.last = None
            clocks.append(self)

        def installed(self):
            return contextlib.nullcontext()

    def curve_with(head):
        def timed(model, cache, ids, context, screen=None):
            clocks[-1].last = head[ids.shape[1] - 1]
            return 0.01 + 1e-4 * ids.shape[1]

        monkeypatch.setattr(pass_timing, "time_pass", timed)
        return calibration.measure_cost_curve(tiny_model("llama"), ks=(0, 31, 63, 64), context=8, measured=(0, 31, 63))

    monkeypatch.setattr(calibration, "HeadClock", Clock)
    monkeypatch.setattr(calibration.ScreenedHead, "for_model", classmethod(lambda cls, model: None))  # unscreened
    kept = curve_with({0: 1e-4, 31: 2e-3, 63: 4e-3})
    assert kept.head == pytest.approx((1e-4, 2e-3, 4e-3, 4e-3 + 2e-3 / 32))  # tiny llama's logits: stageable
    with caplog.at_level("INFO", logger="draftless.integration.calibration"):
        # k = 31's output layer timed slow by chance: the line from it through k = 63 runs below 0 by k = 64
        dropped = curve_with({0: 1e-4, 31: 4e-3, 63: 6e-5})
    assert dropped.head == () and dropped.at(64) > dropped.at(63) > 0
    assert any("filled in out of range" in r.getMessage() for r in caplog.records)


def test_a_calibration_on_a_busy_machine_serves_its_process_only(cache_dir, monkeypatch, caplog):
    """Unsteady timings (another process on the cores) are used, not kept: the next process measures again."""
    from draftless.integration import store

    model = tiny_model("llama")
    monkeypatch.setattr(store, "timing_spread", lambda: 3.0)
    with caplog.at_level(logging.WARNING):
        curve = calibration.cached_cost_curve(model)
    assert "busy" in caplog.text and not list(cache_dir.glob("calibration/*.json"))
    assert calibration.cached_cost_curve(model) is curve  # this process keeps what it measured
    store.forget_read_files()  # a new process, the machine idle again: measured and kept
    monkeypatch.setattr(store, "timing_spread", lambda: 1.0)
    calibration.cached_cost_curve(model)
    assert list(cache_dir.glob("calibration/*-cost-*.json"))


def test_a_plans_race_past_its_budget_keeps_plain_products_for_the_process(cache_dir, monkeypatch):
    monkeypatch.setattr(calibration, "PLANS_BUDGET_S", -1.0)  # the deadline already passed
    model = tiny_model("llama")
    plans = calibration.cached_linear_plans(model)
    assert plans.is_identity  # no shape raced
    assert not list(cache_dir.glob(f"calibration/*-{calibration.PLANS_KIND}.json"))


def test_the_timing_spread_is_the_median_over_the_fastest_of_its_products(monkeypatch):
    monkeypatch.undo()  # the real probe, not the suite's steady stand-in
    from draftless.integration import store

    durations = iter([1, 3, 2, 2, 9, 2, 1, 4, 2])  # sorted: 1 1 2 2 2 2 3 4 9; median 2, fastest 1
    clock = {"now": 0.0, "started": False}

    def perf_counter():
        if clock["started"]:
            clock["now"] += next(durations)
        clock["started"] = not clock["started"]
        return clock["now"]

    monkeypatch.setattr(store.time, "perf_counter", perf_counter)
    assert store.timing_spread() == 2.0

"""The cost curve's learned shape kept across processes (``integration.kept_state``): a generator saves what its
requests learned beside the calibration, the next one starts from it and records it for replay, a shape
learned against another calibration or an unreadable file is ignored, a rate of 0 keeps nothing, and a
recalibration forgets it. The policy's arithmetic under a given starting shape is ``OnlineCost``'s own."""

import json
import logging

import numpy as np
import pytest
import torch
from tiny_models import repetitive_prompt, tiny_model

from draftless.integration import SpeculativeGenerator, calibration
from draftless.integration.fastpass import FastPassOptions
from draftless.integration.kept_state import KEPT_SHAPE_BOUND, load_learned_shape, save_learned_shape, shape_path
from draftless.lookup import AdaptiveConfig
from draftless.lookup.cost_model import SHAPE_BOUND, CostCurve, OnlineCost

CURVE = CostCurve((0, 8, 16, 32, 64), (1.0, 1.5, 2.0, 3.0, 5.0))


def test_a_starting_shape_is_checked_and_learning_goes_on_from_it():
    start = np.array([0.0, 0.2, -0.1, 0.3, 0.0])
    cost = OnlineCost(CURVE, shape_rate=0.1, log_shape=start)
    assert np.array_equal(cost.learned_shape(), start) and cost.learned_shape() is not cost.log_shape
    assert cost.cost(8) / cost.cost(0) == pytest.approx(1.5 * np.exp(0.2))
    cost.observe(0, 1.0)
    cost.observe(16, 4.0)
    assert cost.log_shape[2] > -0.1  # moved on from where it started
    for bad, error in (
        ([0.0, 0.1], ValueError),
        ([0.1, 0, 0, 0, 0], ValueError),
        ("00000", TypeError),
        ([0, float("nan"), 0, 0, 0], ValueError),
        ([0, np.log(SHAPE_BOUND) + 0.1, 0, 0, 0], ValueError),
        ([0, "a", 0, 0, 0], TypeError),
        (3, TypeError),
    ):
        with pytest.raises(error, match="log_shape"):
            OnlineCost(CURVE, log_shape=bad)


def _generate(model, config=None):
    gen = SpeculativeGenerator(model, config=config)
    ids = repetitive_prompt(30)
    out = gen.generate(ids, max_new_tokens=40, eos_token_id=None)
    assert torch.equal(out, model.generate(ids, do_sample=False, max_new_tokens=40, eos_token_id=None))
    return gen


def test_the_next_generator_starts_from_the_shape_the_last_one_kept(cache_dir):
    model = tiny_model("llama")
    first = _generate(model)
    assert first.last_stats.start_shape == (0.0,) * len(first.proposer.cost.curve.ks)  # nothing kept yet
    learned = first.proposer.cost.learned_shape()
    assert learned.any()  # the tiny model's passes are not the calibration's to the microsecond
    path = shape_path(model, first.proposer.cost.curve)
    assert path.exists() and json.loads(path.read_text())["log_shape"] == learned.tolist()
    second = _generate(model)
    bound = np.log(KEPT_SHAPE_BOUND)  # a kept shape moves no knot further than this when a process starts
    assert second.last_stats.start_shape == tuple(np.clip(learned, -bound, bound))  # recorded for replay
    assert not np.array_equal(second.proposer.cost.learned_shape(), learned)  # and learned on from it
    kept = load_learned_shape(model, second.proposer.cost.curve)
    assert np.array_equal(kept, np.clip(second.proposer.cost.learned_shape(), -bound, bound))


def test_a_kept_shape_cannot_move_a_knot_past_its_bound(cache_dir):
    """A shape learned against a curve measured while the machine was busy (a knot at half its price, the longer
    ones near theirs) starts the next process within ``KEPT_SHAPE_BOUND`` of the curve either way."""
    model = tiny_model("llama")
    cost = OnlineCost(CURVE, shape_rate=0.1, log_shape=np.log([1.0, 0.8, 0.5, 1.0, 2.0]))
    cost.observed = 1  # as after a pass: a shape worth keeping
    save_learned_shape(model, cost)
    kept = np.exp(load_learned_shape(model, CURVE))
    assert kept == pytest.approx([1.0, 0.8, 1 / KEPT_SHAPE_BOUND, 1.0, KEPT_SHAPE_BOUND])


def test_a_rate_of_zero_neither_reads_nor_keeps_a_shape(cache_dir):
    model = tiny_model("llama")
    gen = _generate(model, AdaptiveConfig(shape_rate=0.0))
    assert not shape_path(model, gen.proposer.cost.curve).exists()
    save_learned_shape(
        model,
        OnlineCost(
            gen.proposer.cost.curve, shape_rate=0.1, log_shape=[0.0] + [0.5] * (len(gen.proposer.cost.curve.ks) - 1)
        ),
    )  # learned nothing: no pass
    assert not shape_path(model, gen.proposer.cost.curve).exists()
    _generate(model)
    assert shape_path(model, gen.proposer.cost.curve).exists()
    again = _generate(model, AdaptiveConfig(shape_rate=0.0))
    assert not again.proposer.cost.learned_shape().any() and not any(again.last_stats.start_shape)


def test_a_mismatched_or_unreadable_shape_is_ignored_and_recalibrating_forgets_it(cache_dir, caplog):
    model = tiny_model("llama")
    gen = _generate(model)
    curve = gen.proposer.cost.curve
    path = shape_path(model, curve)
    other = CostCurve(curve.ks, tuple(2 * s for s in curve.seconds))  # the same lengths, remeasured
    assert load_learned_shape(model, other) is None and load_learned_shape(model, curve) is not None
    for text in (
        "{not json",
        json.dumps({"curve": list(curve.seconds), "log_shape": [9.0] * len(curve.ks)}),
        json.dumps({"log_shape": [0.0] * len(curve.ks)}),
    ):
        path.write_text(text)
        with caplog.at_level(logging.WARNING):
            assert load_learned_shape(model, curve) is None
        assert "ignoring an unreadable learned cost-curve shape" in caplog.text
        caplog.clear()
        assert not SpeculativeGenerator(model).proposer.cost.learned_shape().any()
    with pytest.raises(TypeError, match="curve"):
        load_learned_shape(model, [1.0, 2.0])
    with pytest.raises(TypeError, match="cost"):
        save_learned_shape(model, curve)
    _generate(model)
    assert path.exists()
    calibration.recalibrate(model)
    assert not path.exists()


def test_a_cache_that_cannot_be_written_loses_the_shape_with_one_warning(cache_dir, monkeypatch, caplog):
    import draftless.integration.speculative as speculative

    def refuse(model, cost):
        raise PermissionError("read-only cache")

    monkeypatch.setattr(speculative, "save_learned_shape", refuse)
    model = tiny_model("llama")
    with caplog.at_level(logging.WARNING):
        gen = _generate(model)
        gen.generate(repetitive_prompt(30), max_new_tokens=10, eos_token_id=None)
    assert caplog.text.count("cannot be kept on disk") == 1


def test_runs_timed_unlike_the_calibration_teach_nothing_beyond_themselves(cache_dir, monkeypatch):
    """Sampled passes, and greedy ones whose output layer is not screened where the calibration's is, cost otherwise
    than the passes the curve is timed over: such a run learns from them (its stats say so) but leaves the shape
    kept on disk and the generator's cost model as they were."""
    from draftless.integration.fastpass.screened_head import ScreenedHead

    model = tiny_model("llama")
    gen = _generate(model)
    path = shape_path(model, gen.proposer.cost.curve)
    kept, before = path.read_text(), gen.proposer.cost.snapshot()

    def unchanged():
        after = gen.proposer.cost.snapshot()
        return (
            path.read_text() == kept
            and before[:2] == after[:2]
            and all(np.array_equal(a, b) for a, b in zip(before[2:], after[2:]))
        )

    ids = repetitive_prompt(30)
    gen.generate(ids, max_new_tokens=40, eos_token_id=None, do_sample=True, seed=1, top_k=20)
    assert gen.last_stats.passes > 0 and unchanged()
    may_serve = ScreenedHead.may_serve
    monkeypatch.setattr(ScreenedHead, "may_serve", staticmethod(lambda model, min_weights=None: True))
    off = SpeculativeGenerator(
        model, fast_pass=FastPassOptions(screened_head=False)
    )  # a screening host, the screen off
    off.generate(ids, max_new_tokens=40, eos_token_id=None)
    assert path.read_text() == kept
    gen.generate(ids, max_new_tokens=40, eos_token_id=None, repetition_penalty=1.2)  # processors: not screened
    assert unchanged()
    monkeypatch.setattr(ScreenedHead, "may_serve", may_serve)  # (undo() would drop this test's own cache dir too)
    gen.generate(ids, max_new_tokens=40, eos_token_id=None)  # greedy as the calibration: learned and kept
    assert not unchanged()

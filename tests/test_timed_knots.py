"""Knots above the longest one the loop timed follow it (``OnlineCost.follow_timed``, ``AdaptiveConfig.follow_timed``):
the passes behind each knot counted, kept on disk with the shape and recorded for replay."""

import json

import numpy as np
import pytest
import torch
from tiny_models import repetitive_prompt, tiny_model

from draftless.integration import SpeculativeGenerator
from draftless.integration.kept_state import load_learned_state, shape_path
from draftless.lookup import AdaptiveConfig
from draftless.lookup.adaptive import cost_model
from draftless.lookup.cost_model import CostCurve, OnlineCost

CURVE = CostCurve((0, 8, 16, 32, 64), (1.0, 1.5, 2.0, 3.0, 5.0))


def test_the_passes_behind_each_knot_are_counted_by_interpolation_weight():
    cost = OnlineCost(CURVE, shape_rate=0.1)
    cost.observe(0, 1.0)  # the level
    cost.observe(16, 1.5)
    cost.observe(24, 2.0)  # half way between the knots at 16 and 32
    assert cost.learned_evidence().tolist() == [0.0, 0.0, 1.5, 0.5, 0.0]
    assert cost.learned_evidence() is not cost.evidence


def test_knots_above_the_longest_timed_one_start_from_its_multiplier():
    cheap_at_16 = np.array([0.0, 0.0, -0.2, 0.0, 0.0])
    timed = np.array([0.0, 30.0, 10.0, 2.0, 0.0])  # 16 timed (10 passes at rate 0.1: 65 % of the way), 32 hardly
    follow = OnlineCost(CURVE, shape_rate=0.1, log_shape=cheap_at_16, evidence=timed, follow_timed=True)
    plain = OnlineCost(CURVE, shape_rate=0.1, log_shape=cheap_at_16, evidence=timed)
    assert plain.cost(64) / plain.cost(0) == pytest.approx(5.0)  # never drafted there: the calibration's, for good
    assert follow.cost(64) / follow.cost(0) == pytest.approx(5.0 * np.exp(-0.2))
    assert follow.cost(32) / follow.cost(0) == pytest.approx(3.0 * np.exp(-0.2 * 0.9**2))  # 2 passes its own
    assert follow.cost(16) == pytest.approx(plain.cost(16)) and follow.cost(8) == pytest.approx(plain.cost(8))
    dear_at_16 = OnlineCost(CURVE, shape_rate=0.1, log_shape=-cheap_at_16, evidence=timed, follow_timed=True)
    assert dear_at_16.cost(64) / dear_at_16.cost(0) == pytest.approx(5.0)  # only downwards
    hardly = OnlineCost(
        CURVE, shape_rate=0.1, log_shape=cheap_at_16, evidence=[0.0, 3.0, 3.0, 0.0, 0.0], follow_timed=True
    )
    assert hardly.cost(64) / hardly.cost(0) == pytest.approx(5.0)  # no knot timed yet: nothing followed
    fixed = OnlineCost(CURVE, log_shape=cheap_at_16, evidence=timed, follow_timed=True)
    assert fixed.cost(64) / fixed.cost(0) == pytest.approx(5.0)  # a shape not learned (rate 0): as it is


def test_a_followed_knot_once_drafted_is_learned():
    follow = OnlineCost(
        CURVE,
        shape_rate=0.5,
        log_shape=[0.0, 0.0, -0.3, 0.0, 0.0],
        evidence=[0.0, 0.0, 4.0, 0.0, 0.0],
        follow_timed=True,
    )
    follow.observe(0, 1.0)
    for _ in range(12):  # passes at 64 cost what the calibration said after all
        follow.observe(64, 5.0 * follow.scale)
    assert follow.cost(64) / follow.cost(0) == pytest.approx(5.0, rel=0.02)


@pytest.mark.parametrize(
    "bad, error",
    [
        ([1.0, 2.0], ValueError),
        ([0.0, -1.0, 0.0, 0.0, 0.0], ValueError),
        ([0.0, float("nan"), 0.0, 0.0, 0.0], ValueError),
        ("00000", TypeError),
    ],
)
def test_evidence_is_checked(bad, error):
    with pytest.raises(error, match="evidence"):
        OnlineCost(CURVE, evidence=bad)


def test_evidence_is_kept_with_the_shape_and_recorded_for_replay(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTLESS_CACHE", str(tmp_path))
    model = tiny_model("llama")
    ids = repetitive_prompt(60)
    first = SpeculativeGenerator(model)
    first.generate(ids, max_new_tokens=24, eos_token_id=None)
    curve = first.proposer.cost.curve
    shape, evidence = load_learned_state(model, curve)
    assert np.array_equal(evidence, first.proposer.cost.learned_evidence()) and evidence.sum() > 0
    second = SpeculativeGenerator(model)
    out = second.generate(ids, max_new_tokens=24, eos_token_id=None)
    assert second.last_stats.start_evidence == tuple(evidence)  # recorded: a replay starts where the loop did
    assert torch.equal(out, model.generate(ids, max_new_tokens=24, do_sample=False, eos_token_id=None))
    data = json.loads(shape_path(model, curve).read_text())
    del data["evidence"]  # a file kept earlier: the shape read, no knot timed yet
    shape_path(model, curve).write_text(json.dumps(data))
    assert load_learned_state(model, curve)[1] is None and load_learned_state(model, curve)[0] is not None
    config = AdaptiveConfig()
    assert config.follow_timed and cost_model(config, curve, shape, evidence).follow_timed
    assert not cost_model(AdaptiveConfig(follow_timed=False), curve).follow_timed

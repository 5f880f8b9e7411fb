"""``experiments.shape_drift``: a run's passes fed to the learned cost shape from several starts."""

import json

import numpy as np
import pytest

from draftless.lookup import AdaptiveConfig
from draftless.lookup.cost_model import CostCurve
from experiments import shape_drift

CURVE = CostCurve((0, 2, 8, 16), (1.0, 1.2, 1.6, 2.0))
TRUE = {0: 1.0, 2: 0.9, 8: 1.1, 16: 1.0}  # the passes' cost over the calibration's, the plain step's 1


def passes(n=3000, seed=0):
    """Mostly 2-token drafts, now and then a plain step or a longer draft, timed at ``TRUE`` with 2 % noise."""
    rng = np.random.default_rng(seed)
    ks = rng.choice([0, 2, 8, 16], size=n, p=[0.03, 0.77, 0.1, 0.1])
    return [(int(k), float(CURVE.at(k) * TRUE[int(k)] * rng.lognormal(0, 0.02))) for k in ks]


def test_a_flat_start_learns_the_passes_shape_and_a_low_level_is_not_corrected():
    config = AdaptiveConfig()
    data = passes()
    shape, scale = shape_drift.settle(CURVE, data, None, config)
    assert abs(shape[1] - TRUE[2]) < 0.05 and abs(shape[2] - TRUE[8]) < 0.05 and abs(scale - 1) < 0.05
    low = np.log([1.0, 0.7, 0.7, 0.7])
    shape, scale = shape_drift.settle(CURVE, data[:1000], low, config)
    assert shape[1] < TRUE[2] - 0.08 and scale > 1.05  # knots and scale moved against each other: the level stays
    shape, scale = shape_drift.settle(CURVE, data, low, config, leak=0.003)
    assert abs(shape[1] - TRUE[2]) < 0.06 and abs(scale - 1) < 0.06  # pinned to the calibration's level
    shape, scale = shape_drift.settle(CURVE, data, low, config, plain_level=True)
    assert abs(shape[1] - TRUE[2]) < 0.05 and abs(scale - 1) < 0.05  # the plain steps set the level


def test_observed_shape_is_relative_to_the_plain_step():
    obs = shape_drift.observed_shape(CURVE, passes())
    assert obs[0] == 1.0 and obs[2] == pytest.approx(0.9, abs=0.02) and obs[8] == pytest.approx(1.1, abs=0.02)
    assert shape_drift.observed_shape(CURVE, [(2, 1.0)] * 6) == {}  # no plain step: nothing to be relative to


def test_the_command_reads_a_recorded_run(tmp_path, capsys):
    data = passes(400)
    run = {
        "cost_curve": {"ks": list(CURVE.ks), "seconds": list(CURVE.seconds)},
        "draftless_config": {"kind": "adaptive", "shape_rate": 0.1, "follow_timed": True},
        "runs": [
            {
                "method": "draftless",
                "draft_trace": [[k, 0] for k, _ in data],
                "pass_seconds": [s for _, s in data],
                "start_shape": [0.0, -0.3, -0.3, -0.3],
            },
            {"method": "vanilla"},
        ],
    }
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    out = tmp_path / "out.json"
    assert shape_drift.main([str(path), "--leak", "0,0.01", "--plain-level", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [(r["leak"], r["plain_level"], r["start"]) for r in rows] == [
        (leak, plain, start)
        for leak, plain in ((0.0, False), (0.01, False), (0.0, True))
        for start in ("flat", "kept", "all 0.7")
    ]
    assert "400 passes" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        shape_drift.main([str(path), "--leak", "1.5"])
    run["runs"] = [{"method": "vanilla"}]
    path.write_text(json.dumps(run))
    with pytest.raises(ValueError, match="no draftless"):
        shape_drift.main([str(path)])

"""The linear plans' evidence tools: shortcuts against the long way, and what a cheaper race costs."""

import pytest

from draftless.integration.fastpass import linear_plan


def test_calibration_evidence_compares_both_shortcuts_with_the_long_way(tmp_path, monkeypatch):
    from tiny_models import tiny_model

    from draftless.integration import calibration, store
    from experiments import calibration_evidence

    monkeypatch.setenv("DRAFTLESS_CACHE", str(tmp_path))
    store.forget_read_files()
    model = tiny_model("llama")
    lines = calibration_evidence.compare_plans(model, probe_mib=1, rounds=1)
    rows = [line for line in lines if line.startswith("| ") and line[2].isdigit()]
    assert [int(r.split("|")[1]) for r in rows] == list(calibration_evidence.PLAN_KS)
    assert all(float(r.split("|")[4]) > 0 for r in rows)  # a ratio of two measured passes
    lines = calibration_evidence.compare_curves(model, rounds=1)
    rows = [line for line in lines if line.startswith("| ") and line[2].isdigit()]
    assert [int(r.split("|")[1]) for r in rows] == list(calibration.DEFAULT_KS)
    assert [r.split("|")[5].strip() == "timed" for r in rows] == [
        k in calibration.MEASURED_KS for k in calibration.DEFAULT_KS
    ]
    assert "1 round(s) after warming the ends" in lines[0]
    lines = calibration_evidence.compare_forms(model, rounds=1)
    assert "(oneDNN raced here: True)" in lines[0]
    shapes = [line for line in lines if line.startswith("| ") and " x " in line.split("|")[1]]
    assert len(shapes) >= 1 and all(len(r.split("|")[2].split(",")) == 8 for r in shapes)  # 1..8 rows each
    rows = [line for line in lines if line.startswith("| ") and line[2].isdigit() and line not in shapes]
    assert [int(r.split("|")[1]) for r in rows] == list(calibration_evidence.FORM_KS)
    assert all(float(r.split("|")[4]) > 0 for r in rows)
    edges = linear_plan.wide_edges
    lines = calibration_evidence.compare_wide(model, rounds=1)
    assert linear_plan.wide_edges is edges  # the rule earlier stands only while its plans are raced
    shapes = [line for line in lines if line.startswith("| ") and " x " in line.split("|")[1]]
    assert len(shapes) >= 1 and all(len(r.split("|")[3].split(",")) == len(linear_plan.WIDE_ROWS) for r in shapes)
    rows = [line for line in lines if line.startswith("| ") and line[2].isdigit() and line not in shapes]
    assert [int(r.split("|")[1]) for r in rows] == list(calibration_evidence.WIDE_KS)
    assert all(float(r.split("|")[4]) > 0 for r in rows)
    with calibration_evidence.upper_edge_only():
        assert linear_plan.wide_edges(8, (16, 32)) == [(16, 16), (32, 32)]
    assert linear_plan.wide_edges(8, (16, 32)) == [(9, 16), (17, 32)]
    with pytest.raises(SystemExit):
        calibration_evidence.main(["curve", "--rounds", "0"])
    with pytest.raises(SystemExit):
        calibration_evidence.main(["wide", "--rounds", "0"])
    with pytest.raises(SystemExit):
        calibration_evidence.main(["forms", "--rounds", "0"])


def test_plan_regret_prices_each_setting_against_the_fastest_plans():
    from tiny_models import tiny_model

    from experiments import plan_regret

    gain = linear_plan.WIDE_CLEAR_GAIN
    lines = plan_regret.compare(
        tiny_model("llama"), ["1:1:2:1", "1:3:3:2:1.5:0.5"], trials=2, truth_mib=1, truth_rounds=1
    )
    assert linear_plan.WIDE_CLEAR_GAIN == gain  # the rules a setting names are the library's again after it
    rows = [line.split("|")[1:-1] for line in lines if line.startswith("| 1:")]
    assert [r[0].strip() for r in rows] == ["1:1:2:1", "1:3:3:2:1.5:0.5"]
    for _, seconds, mean, worst, below, above, each in rows:
        regrets = [float(x) for x in each.split(",")]
        assert float(seconds) > 0 and len(regrets) == 2 and min(regrets) >= -1e-9  # no plan beats the fastest
        assert abs(float(mean) - sum(regrets) / 2) < 0.1 and abs(float(worst) - max(regrets)) < 0.06
        assert float(below) >= 0 and float(above) >= 0
    with pytest.raises(ValueError, match="MIB:FIRST:REPEATS:LATER"):
        plan_regret.parse_setting("96:6:3")
    assert plan_regret.parse_setting("96:6:2:1:1.5") == (96, 6, 2, 1, 1.5, None, None)
    assert plan_regret.parse_setting("64:1:2:1") == (64, 1, 2, 1, None, None, None)
    assert plan_regret.parse_setting("64:1:2:1:1.25:0.95") == (64, 1, 2, 1, 1.25, 0.95, None)
    assert plan_regret.parse_setting("64:1:2:1:1.25:0.95:0") == (64, 1, 2, 1, 1.25, 0.95, False)
    assert plan_regret.parse_setting("64:1:2:1:1.25:0.95:1") == (64, 1, 2, 1, 1.25, 0.95, True)
    for bad in ("64:1:2:1:1.25:0.95:2", "64:1:2:1:1.25:0.95:1:1", "64:1:2:1:1.25:0.95:yes"):
        with pytest.raises(ValueError, match="RETIME"):
            plan_regret.parse_setting(bad)
    with pytest.raises(ValueError, match="MIB:FIRST:REPEATS:LATER"):
        plan_regret.parse_setting("64:1:2:1:1.25:1.5")
    with pytest.raises(ValueError, match="MIB:FIRST:REPEATS:LATER"):
        plan_regret.parse_setting("96:6:2:1:0.5")
    with pytest.raises(SystemExit):
        plan_regret.main(["--settings", "96:0:3:2"])

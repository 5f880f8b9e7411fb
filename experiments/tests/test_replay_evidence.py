"""The replay-based evidence tools: the coarse curve, knob evidence, the policy gap."""

import json

import pytest

from draftless.lookup import AdaptiveProposer


def test_coarse_curve_prices_a_shorter_calibration(tmp_path):
    import numpy as np

    from benchmarks.replay import main as replay_main
    from draftless.lookup.cost_model import CostCurve
    from experiments.coarse_curve import coarse_curve
    from experiments.coarse_curve import main as coarse_main

    full = CostCurve((0, 1, 7, 8, 15, 16, 63, 64), (1.0, 1.05, 1.4, 1.8, 2.5, 3.1, 6.5, 7.2))
    two = coarse_curve(full, (0, 63), 0.0, np.random.default_rng(0))
    assert two.ks == (0, 63) and two.seconds == (1.0, 6.5)
    filled = coarse_curve(full, (0, 63), 0.0, np.random.default_rng(0), filled=True)  # as the library fills in
    assert filled.ks == full.ks and filled.seconds[0] == 1.0 and filled.seconds[-2] == 6.5
    assert filled.at(15) == pytest.approx(1.0 + 5.5 * 15 / 63) and filled.at(64) == pytest.approx(two.at(64))
    noisy = coarse_curve(full, None, 0.1, np.random.default_rng(0))
    assert noisy.ks == full.ks and noisy.seconds != full.seconds
    assert all(abs(np.log(a / b)) < 0.6 for a, b in zip(noisy.seconds, full.seconds))  # six sigma
    prompt = list(range(10, 40)) + [7]
    run = {
        "outputs": [
            {
                "suite": "code_edit",
                "prompt_id": "p",
                "prompt_len": len(prompt),
                "tokens": prompt + list(range(10, 40)) + [3, 4],
            },
            {"suite": "qa", "prompt_id": "q", "prompt_len": 3, "tokens": [1, 2, 3, 4, 5, 6]},
        ],
        "cost_curve": {"ks": list(full.ks), "seconds": list(full.seconds)},
    }
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    priced = coarse_main([str(path), "--noise", "0,0.1", "--seeds", "2", "--json", str(tmp_path / "c.json")])
    # the subsets naming a length this curve lacks (2-4, 31, 32) are left out; noise 0 is one draw, the rest two
    assert set(priced) == {
        (name, s, 0.0) for name in ("every calibrated length", "three: 0, 15, 63", "two: 0, 63") for s in (0.0, 0.1)
    }
    assert all(len(d) == (1 if s == 0 else 2) for (_, s, _), by in priced.items() for d in by.values())
    # every calibrated length without noise is the policy that replay calls draftless, under the run's curve
    replayed = {(r["config"], r["suite"]): r["est_speedup"] for r in replay_main([str(path)])}
    assert priced[("every calibrated length", 0.0, 0.0)]["code_edit"] == [replayed[("draftless", "code_edit")]] > [1.0]
    assert priced[("two: 0, 63", 0.0, 0.0)]["qa"] == [1.0]  # nothing repeats: plain steps under any curve
    assert json.loads((tmp_path / "c.json").read_text())["rows"]
    # another run's curve (a stale shape) and a policy learning the shape from noisy passes: one draw per seed
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**run, "cost_curve": {"ks": [0, 64], "seconds": [1.0, 1.1]}}))
    priced = coarse_main(
        [
            str(path),
            "--noise",
            "0",
            "--seeds",
            "3",
            "--shape-rates",
            "0,0.1",
            "--curve-from",
            str(other),
            "--subsets",
            "every,two",
        ]
    )
    assert {name for name, _, _ in priced} == {"every calibrated length", "two: 0, 63", "another run's curve"}
    assert [len(d) for d in priced[("another run's curve", 0.0, 0.1)].values()] == [3, 3, 3]
    assert [len(d) for d in priced[("another run's curve", 0.0, 0.0)].values()] == [1, 1, 1]
    # the run's own curve off by a factor alone: learning from the first pass's level drafts as under the right one
    for averaged in ([], ["--averaged-level"]):
        priced = coarse_main(
            [
                str(path),
                "--noise",
                "0",
                "--seeds",
                "2",
                "--shape-rates",
                "0.1",
                "--pass-noise",
                "0",
                "--subsets",
                "every",
                "--levels",
                "0.5,2",
            ]
            + averaged
        )
        assert {name for name, _, _ in priced} == {
            "every calibrated length",
            "the run's curve / 0.5",
            "the run's curve / 2",
        }
        if not averaged:
            assert priced[("the run's curve / 2", 0.0, 0.1)] == priced[("every calibrated length", 0.0, 0.1)]
    # each request from the shape the one before it kept: at rate 0 nothing is learned, so nothing changes
    plain, kept = (
        coarse_main(
            [
                str(path),
                "--noise",
                "0",
                "--seeds",
                "2",
                "--shape-rates",
                "0,0.1",
                "--curve-from",
                str(other),
                "--subsets",
                "every",
            ]
            + extra
        )
        for extra in ([], ["--kept-shape"])
    )
    assert (
        set(plain) == set(kept) and plain[("another run's curve", 0.0, 0.0)] == kept[("another run's curve", 0.0, 0.0)]
    )
    # passes between knots told dearer (the stairs) teach nothing at rate 0, at knots only or not
    stairs = coarse_main(
        [
            str(path),
            "--noise",
            "0",
            "--seeds",
            "2",
            "--shape-rates",
            "0,0.1",
            "--curve-from",
            str(other),
            "--subsets",
            "every",
            "--kept-shape",
            "--stair-excess",
            "1.3",
            "--learn-at-knots",
        ]
    )
    assert stairs[("another run's curve", 0.0, 0.0)] == kept[("another run's curve", 0.0, 0.0)]
    # two lengths filled in at the others lie on the same line: unlearned, the policy drafts as under the two
    unfilled, filled = (
        coarse_main([str(path), "--noise", "0", "--seeds", "1", "--subsets", "every,two"] + extra)
        for extra in ([], ["--filled"])
    )
    for suite, draws in unfilled[("two: 0, 63", 0.0, 0.0)].items():
        assert filled[("two: 0, 63", 0.0, 0.0)][suite] == pytest.approx(draws)
    for bad in (
        ["--noise", "0.1"],
        ["--noise", "x"],
        ["--seeds", "0"],
        ["--shape-rates", "1"],
        ["--pass-noise", "-1"],
        ["--subsets", "two"],
        ["--subsets", "every,ten"],
        ["--levels", "0"],
        ["--levels", "x"],
        ["--kept-shape", "--across-requests"],
        ["--stair-excess", "0.5"],
    ):
        with pytest.raises(SystemExit):
            coarse_main([str(path)] + bad)


def test_knob_evidence_compares_one_knob_over_runs(tmp_path, capsys):
    from experiments.knob_evidence import main as knob_main

    passage = list(range(200, 330))  # copied whole: drafts capped at 16 tokens take more passes than at 64
    prompt = list(range(10, 40)) + passage + [5]
    run = {
        "outputs": [
            {"suite": "repetitive", "prompt_id": "p", "prompt_len": len(prompt), "tokens": prompt + passage},
            {"suite": "qa", "prompt_id": "q", "prompt_len": 3, "tokens": [1, 2, 3, 4, 5, 6]},
        ],
        "cost_curve": {"ks": [0, 1, 16, 32, 64], "seconds": [1.0, 1.01, 1.05, 1.1, 1.2]},
    }
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    gains = knob_main([str(path), str(path), "--knob", "max_draft", "--values", "16,64"])
    assert set(gains) == {64} and len(gains[64]) == 4  # two suite columns of each of the two runs
    by_suite = {where.split(": ")[1]: g for g, where, _ in gains[64]}
    assert by_suite["repetitive"] > 1.0 and by_suite["qa"] == 1.0
    out = capsys.readouterr().out
    assert "max_draft, against 16, over 4 suite columns of 2 runs" in out and "| run | all suites, 16 |" in out
    assert "| 64 | run | qa | 2 | +0.00 % | +0.00 % | +0.00 % |" in out  # per model (the name's "run") and suite
    for bad in (
        ["--knob", "nope", "--values", "1,2"],
        ["--knob", "reflow", "--values", "true"],
        ["--knob", "reflow", "--values", "false,maybe"],
        ["--knob", "prior", "--values", "a,b"],
        ["--knob", "copy_share", "--values", "0.4,2"],
    ):
        with pytest.raises(SystemExit):
            knob_main([str(path)] + bad)


def test_policy_gap_table_drafts_as_the_replayed_policy_and_splits_by_origin():
    # three requests that open alike: the later ones' first drafts are chosen under what the earlier carried
    # (``carried_starts``), in the table as in replay's "draftless" row
    from benchmarks.replay import AdaptiveFactory, replay_one
    from draftless.lookup import AdaptiveConfig
    from draftless.lookup.acceptance_model import ORIGINS
    from draftless.lookup.cost_model import CostCurve
    from draftless.lookup.request_start import carried_starts
    from experiments.policy_gap import CalibrationProbe, gap

    curve = CostCurve((0, 1, 16, 32, 64), (1.0, 1.05, 2.0, 3.5, 7.0))  # steep: the first draft is short at first
    prompt = list(range(10, 70)) + [10, 11]
    tokens = prompt + list(range(12, 60)) + [3, 4, 5] + list(range(20, 40))
    outputs = [
        {"suite": "code_edit", "prompt_id": str(i), "prompt_len": len(prompt), "tokens": tokens} for i in range(3)
    ]
    config = AdaptiveConfig()
    factory = AdaptiveFactory(config, cost=curve)
    carried = [replay_one(factory(tokens), tokens, len(prompt))[2] for _ in outputs]
    alone = replay_one(AdaptiveProposer(config, cost=curve), tokens, len(prompt))[2]
    assert carried[0] == alone and carried[1][0] > alone[0]  # what the first request showed lengthens the next

    def probes(start):  # the table's probes, replayed in run order with ``start`` shared
        out = []
        for _ in outputs:
            probe = CalibrationProbe(config, cost=curve, start=start)
            replay_one(probe, tokens, len(prompt))
            out += probe.records
        return out

    table, _ = gap({"outputs": outputs}, curve, firsts=(1,))
    expected = sum(e for _, e, _ in table["code_edit"].values())
    assert sum(n for n, _, _ in table["code_edit"].values()) == sum(d > 0 for run in carried for d in run)
    assert expected == pytest.approx(sum(e for _, e, _ in probes(carried_starts(config))))
    assert expected != pytest.approx(sum(e for _, e, _ in probes(None)))  # each request from the prior: not so
    split, _ = gap({"outputs": outputs}, curve, firsts=(1,), by_origin=True)
    assert all(kind[0] in ORIGINS and len(kind) == 4 for kind in split["code_edit"])
    assert not any(kind[0] in ORIGINS for kind in table["code_edit"])
    merged = {}  # the split rows sum to the unsplit ones
    for kind, (n, e, r) in split["code_edit"].items():
        row = merged.setdefault(kind[1:], [0, 0.0, 0])
        row[0], row[1], row[2] = row[0] + n, row[1] + e, row[2] + r
    assert merged.keys() == table["code_edit"].keys()
    for kind, (n, e, r) in table["code_edit"].items():
        assert merged[kind][0] == n and merged[kind][2] == r and merged[kind][1] == pytest.approx(e)


def test_policy_gap_checks_calibration_and_hindsight_lengths(tmp_path, capsys):

    from benchmarks.replay import main as replay_main
    from benchmarks.replay import replay_one
    from draftless.lookup.cost_model import CostCurve
    from experiments.policy_gap import HindsightStart
    from experiments.policy_gap import main as gap_main

    curve = CostCurve((0, 1, 16, 32, 64), (1.0, 1.01, 1.3, 1.6, 2.2))  # (1 + k) / c(k) rises with k: draft all
    prompt = list(range(10, 60)) + [10]
    tokens = prompt + list(range(11, 40)) + [3, 4, 5, 6]  # a 29-token copy, then new text
    # hindsight on the first pass drafts exactly the tokens the truth accepts from the policy's occurrence
    proposer = HindsightStart(tokens, 1, curve, cost=curve)
    passes, accepted, drafted, _ = replay_one(proposer, tokens, len(prompt))
    assert drafted[0] == accepted[0] == 28 and proposer.chosen[0][1] == 28  # the bonus token is the 29th
    assert sum(accepted) + passes == len(tokens) - len(prompt) - 1
    with_zero = HindsightStart(tokens, 1, curve, cost=curve, excluded=(28,))  # a length the device got wrong
    assert replay_one(with_zero, tokens, len(prompt))[2][0] < 28

    run = {
        "outputs": [
            {"suite": "code_edit", "prompt_id": "p", "prompt_len": len(prompt), "tokens": tokens},
            {"suite": "qa", "prompt_id": "q", "prompt_len": 3, "tokens": [1, 2, 3, 4, 5, 6]},
        ],
        "cost_curve": {"ks": list(curve.ks), "seconds": list(curve.seconds)},
    }
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    table, speed = gap_main([str(path), "--first", "1,2", "--json", str(tmp_path / "gap.json")])
    # the calibration rows count every draft the policy made, and their realised tokens are replay's accepted
    replayed = {(r["config"], r["suite"]): r for r in replay_main([str(path)])}
    code = replayed[("draftless", "code_edit")]
    _, accepted, drafted, _ = replay_one(AdaptiveProposer(cost=curve), tokens, len(prompt))
    assert sum(n for n, _, _ in table["code_edit"].values()) == sum(d > 0 for d in drafted) >= 1
    assert sum(r for _, _, r in table["code_edit"].values()) == sum(accepted)
    assert all(e > 0 for _, e, _ in table["all"].values())
    assert "qa" not in table  # nothing repeats there: no draft
    assert speed["draftless"]["code_edit"] == code["est_speedup"]
    hindsight = speed["hindsight length, first 2 passes"]["code_edit"]
    assert speed["draftless"]["code_edit"] <= hindsight <= speed["ceiling_any"]["code_edit"]
    assert speed["draftless"]["qa"] == speed["ceiling_any"]["qa"] == 1.0
    written = json.loads((tmp_path / "gap.json").read_text())
    assert written["calibration"] and written["speedup"]["ceiling_recent"]["code_edit"] > 1
    assert "| code_edit | copying" in capsys.readouterr().out
    for bad in (["--first", "0"], ["--first", "x"], ["--suite", "nope"]):
        with pytest.raises(SystemExit):
            gap_main([str(path)] + bad)

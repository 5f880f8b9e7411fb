"""The replay tools on recorded or synthetic runs (model-free): replay, the coarse-curve and knob evidence, the
policy gap, and replay's exactness on every run recorded in ``tests/fixtures``."""

import json
from pathlib import Path

import pytest

from draftless.lookup import AdaptiveProposer


def test_replay_on_a_recorded_run(tmp_path):
    from benchmarks.replay import configurations, replay_one
    from benchmarks.replay import main as replay_main

    prompt = [5, 6, 7, 8, 9, 5, 6]
    tokens = prompt + [7, 8, 9, 5, 6, 7, 8, 3]
    # the fixed-length suffix proposer: after "5 6 | 7" the match "5 6 7" drafts what followed it, "8 9 5 6 7" (up to
    # the end of the stream): all accepted, bonus 8. Then "... 7 8" drafts "9 ...", but the truth is the final 3.
    passes, accepted, drafted, _ = replay_one(configurations()["suffix_fixed"](tokens), tokens, len(prompt))
    assert sum(accepted) + passes == len(tokens) - len(prompt) - 1
    assert accepted == [5, 0] and drafted[0] == 5
    # with the run's larger budget the first draft runs past the recorded end (an EOS inside it): the pass
    # keeps the recorded tokens only, counted as the loop counts them
    passes, accepted, drafted, _ = replay_one(configurations()["suffix_fixed"](tokens), tokens[:11], len(prompt), 20)
    assert sum(accepted) + passes == 11 - len(prompt) - 1 and drafted[0] > accepted[0]
    # pass times told back: to a policy that learns from them, in order (a list, or a function of the length);
    # a rule that learns nothing from time, and passes past the recorded ones, are left alone
    assert replay_one(configurations()["suffix_fixed"](tokens), tokens, len(prompt), pass_seconds=[1.0])[0] == 2
    told = []
    policy = configurations()["draftless"](tokens)
    policy.record_pass = lambda k, seconds: told.append((k, seconds))
    passes, _, drafted, _ = replay_one(policy, tokens, len(prompt), pass_seconds=[0.5] * 40)
    assert told == [(k, 0.5) for k in drafted]
    told.clear()
    replay_one(policy, tokens, len(prompt), pass_seconds=lambda k: 1.0 + k)
    assert told and all(s == 1.0 + k for k, s in told)
    run = {
        "outputs": [
            {"suite": "code_edit", "prompt_id": "p", "prompt_len": len(prompt), "tokens": tokens},
            {"suite": "qa", "prompt_id": "q", "prompt_len": 3, "tokens": [1, 2, 3, 4, 5, 6]},
        ]
    }
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    rows = replay_main([str(path), "--grid", "--json", str(tmp_path / "replay.json")])
    by = {(r["config"], r["suite"]): r for r in rows}
    assert by[("suffix_fixed", "code_edit")]["mean_accepted"] == 3.5  # 7 tokens in 2 passes
    assert by[("suffix_fixed", "qa")]["mean_accepted"] == 1.0  # nothing repeats: one token per pass
    assert by[("draftless", "qa")]["mean_accepted"] == 1.0 and by[("draftless", "code_edit")]["passes"] >= 1
    assert by[("oracle_k8", "code_edit")]["mean_accepted"] == 7.0  # the truth in one pass
    assert by[("rule_pld", "code_edit")]["passes"] >= 1
    assert by[("ceiling_any", "code_edit")]["est_speedup"] >= by[("ceiling_recent", "code_edit")]["est_speedup"] > 1
    assert ("suffix_frequent_k8_m1", "all") in by and ("adaptive[prior=flat0.5]", "all") in by
    assert json.loads((tmp_path / "replay.json").read_text())["rows"]
    # the same outputs under the near-flat accelerator stand-in: the oracle's one 6-token draft costs 1.05 steps
    from benchmarks.replay import NEAR_FLAT

    flat = {(r["config"], r["suite"]): r for r in replay_main([str(path), "--cost", "near_flat"])}
    assert flat[("oracle_k8", "code_edit")]["est_speedup"] == round(7 / NEAR_FLAT.at(6), 3)
    assert flat[("oracle_k8", "code_edit")]["est_speedup"] > by[("oracle_k8", "code_edit")]["est_speedup"]
    assert flat[("suffix_fixed", "code_edit")]["passes"] == by[("suffix_fixed", "code_edit")]["passes"]


def test_replayed_history_drafts_from_earlier_records_only(tmp_path):
    from benchmarks.replay import main as replay_main

    answer = list(range(20, 50))  # the second request's answer is the first one's: only a history drafts it
    run = {
        "outputs": [
            {"suite": "qa", "prompt_id": "a", "prompt_len": 3, "tokens": [10, 11, 12] + answer},
            {"suite": "math", "prompt_id": "b", "prompt_len": 3, "tokens": [13, 14, 15] + answer},
        ]
    }
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    for _ in range(2):  # a second replay starts from an empty history again
        by = {(r["config"], r["suite"]): r for r in replay_main([str(path), "--history"])}
        assert by[("draftless_history", "qa")]["mean_accepted"] == by[("draftless", "qa")]["mean_accepted"] == 1.0
        assert by[("draftless_history", "math")]["mean_accepted"] > 5 and by[("draftless", "math")]["passes"] == 29
        assert by[("draftless_history_requests", "math")]["mean_accepted"] > 5


FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _recorded_runs():
    """Every recorded run; those that drafted re-flowed or stepped copies replay with their model's tokenizer, which
    the slow tests' cache holds (the bundled model converted there)."""
    runs = []
    for path in sorted(p for p in FIXTURES.glob("*.json")):
        config = json.loads(path.read_text()).get("draftless_config", {})
        tokenizer = config.get("reflow", False) or config.get("stepped_copy", False)
        runs.append(pytest.param(path.name, marks=pytest.mark.slow) if tokenizer else path.name)
    return runs


@pytest.mark.parametrize("name", _recorded_runs())
def test_replay_reproduces_the_draft_lengths_measured_with_the_model(name):
    """Replay is exact: fed a recorded run's outputs, the policy that ran (its config and calibrated cost curve)
    chooses the same draft lengths and gets the same acceptances as it did in the verification loop. (The
    loop's online cost scale multiplies the whole curve, so it never changes the best k; a learned shape does,
    so the run's recorded pass times are told to the policy as the loop told them.) Where an output
    stopped at EOS, runs recorded before 9bb5fc5 counted draft tokens accepted past the EOS, which the record
    does not hold: that pass is compared by its draft length only."""
    from benchmarks.recorded_run import (
        recorded_config,
        recorded_request_start,
        recorded_start,
        run_digit_tokens,
        run_text_classes,
    )
    from benchmarks.replay import replay_one
    from draftless.lookup.cost_model import CostCurve

    data = json.loads((FIXTURES / name).read_text())
    config = recorded_config(data)
    curve = data["cost_curve"]  # with the output layer's times ( on): staged passes replay as run
    cost = CostCurve(tuple(curve["ks"]), tuple(curve["seconds"]), tuple(curve.get("head", ())))
    runs = {(r["suite"], r["prompt_id"]): r for r in data["runs"] if r["method"] == "draftless"}
    traces = {key: r["draft_trace"] for key, r in runs.items()}
    # a policy that learns its curve's shape is told each pass's recorded seconds, as the loop told it
    seconds = {(r["suite"], r["prompt_id"]): r.get("pass_seconds") for r in data["runs"] if r["method"] == "draftless"}
    assert len(traces) == len(data["outputs"]) > 0
    # a run whose output is not vanilla's followed another stream, which the record does not hold (the GPU run,
    # where some pass lengths gave wrong logits: see integration/pass_check.py)
    differing = {(m["suite"], m["prompt_id"]) for m in data["mismatches"] if m["method"] == "draftless"}
    assert len(differing) <= len(traces) // 4
    for out in data["outputs"]:
        if (out["suite"], out["prompt_id"]) in differing:
            continue
        key = (out["suite"], out["prompt_id"])  # from the shape earlier requests kept, where the run recorded one,
        # and from what earlier requests' first drafts had shown ( on)
        proposer = AdaptiveProposer(
            config,
            cost=recorded_start(cost, config, runs[key]),
            excluded=tuple(data.get("inexact_drafts", ())),
            text_classes=run_text_classes(data) if config.reflow else None,
            start=recorded_request_start(config, runs[key]),
            digit_tokens=run_digit_tokens(data) if config.stepped_copy else None,
        )
        assert config.shape_rate == 0 or seconds[key] is not None, "a shape-learning run must record pass_seconds"
        passes, accepted, drafted, _ = replay_one(
            proposer, out["tokens"], out["prompt_len"], data["max_new_tokens"], seconds[key]
        )
        measured = traces[(out["suite"], out["prompt_id"])]
        replayed = [list(p) for p in zip(drafted, accepted)]
        if len(out["tokens"]) - out["prompt_len"] < data["max_new_tokens"]:  # stopped at EOS
            assert replayed[:-1] == measured[:-1] and replayed[-1][0] == measured[-1][0]
        else:
            assert replayed == measured

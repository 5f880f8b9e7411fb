"""A sampled benchmark run: the loop's methods write the loop's plain-step text for each prompt's seed, which the
run checks, records as the outputs and lets the oracle draft (no timing assertions)."""

import json

from test_benchmarks import tiny_dir  # noqa: F401 (a fixture)

from benchmarks import report
from benchmarks.recorded_run import recorded_config, recorded_cost, recorded_request_start, recorded_start
from benchmarks.replay import replay_one
from benchmarks.run import main as run_main
from draftless.lookup import AdaptiveProposer


def test_a_sampled_run_checks_the_loops_methods_against_its_plain_steps(tiny_dir, tmp_path):
    out = tmp_path / "s.json"
    result = run_main(
        [
            "--model",
            str(tiny_dir),
            "--suite",
            "repetitive,code_edit",
            "--limit",
            "1",
            "--max-new-tokens",
            "24",
            "--temperature",
            "0.8",
            "--methods",
            "hf_pld,draftless,rule_ngram32,no_draft,oracle",
            "--json",
            str(out),
        ]
    )
    assert result["sampling"]["do_sample"] and not result["mismatches"]
    loop = {"draftless", "rule_ngram32", "no_draft", "oracle_k8", "oracle_k16", "oracle_k32"}
    assert {r["method"] for r in result["runs"]} == loop | {"vanilla", "hf_pld"}
    for r in result["runs"]:
        assert r["identical_to_vanilla"] is None  # transformers' sampled text differs by chance
        assert r["identical_to_no_draft"] is (True if r["method"] in loop else None)
    # the oracle drafts the loop's text for the seed, and its verification accepts every draft token
    oracle = [r for r in result["runs"] if r["method"] == "oracle_k8"]
    assert all(r["mean_accepted"] > 1 for r in oracle)
    rows = {(r["suite"], r["method"]): r for r in result["summary"]}
    assert rows[("all", "draftless")]["identical_to_no_draft"] is True
    assert rows[("all", "hf_pld")]["identical_to_no_draft"] is None
    assert rows[("all", "draftless")]["fraction_of_oracle"] is not None
    table = report.markdown(result["summary"], "m")
    assert "same seed, same text" in table and "n/a (sampled)" in table
    # the outputs are the loop's text: the recorded draft trace replays pass for pass, told the recorded pass times
    data = json.loads(out.read_text())
    # a sampled request learns its passes' costs for itself: the next one starts from the shape the first did (its
    # passes are not the calibration's: ``screened_head.timed_like_calibration``), and the run records it
    learned = [r for r in data["runs"] if r["method"] == "draftless"]
    assert len(learned) == 2 and learned[1].get("start_shape") == learned[0].get("start_shape")
    for rec, run in zip(data["outputs"], [r for r in data["runs"] if r["method"] == "draftless"]):
        config = recorded_config(data)  # each request starts from the shape it recorded
        proposer = AdaptiveProposer(
            config, cost=recorded_start(recorded_cost(data), config, run), start=recorded_request_start(config, run)
        )
        passes, accepted, drafted, _ = replay_one(
            proposer, rec["tokens"], rec["prompt_len"], data["max_new_tokens"], run["pass_seconds"]
        )
        assert [list(p) for p in zip(drafted, accepted)] == run["draft_trace"]

"""The benchmark suite end to end on a tiny model (no timing assertions); its parts alone in
``test_benchmark_parts.py``."""

import json

import pytest
from tiny_models import tiny_model, tiny_tokenizer

from benchmarks.methods import expand
from benchmarks.run import main as run_main
from benchmarks.run import run as run_benchmark
from draftless.lookup import AdaptiveConfig


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny")
    tok = tiny_tokenizer()
    model = tiny_model("llama", vocab=len(tok))
    model.config.max_position_embeddings = 4096
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_end_to_end_run_writes_json_markdown_and_plot(tiny_dir, tmp_path):
    out = tmp_path / "r.json"
    result = run_main(
        [
            "--model",
            str(tiny_dir),
            "--suite",
            "code_edit,repetitive,multi_turn",
            "--limit",
            "1",
            "--max-new-tokens",
            "12",
            "--json",
            str(out),
            "--markdown",
            str(tmp_path / "r.md"),
            "--plot",
            str(tmp_path / "r.png"),
        ]
    )
    data = json.loads(out.read_text())
    assert data["model"] == str(tiny_dir) and not data["mismatches"]
    run_keys = {
        "suite",
        "prompt_id",
        "method",
        "new_tokens",
        "prefill_s",
        "decode_s",
        "total_s",
        "identical_to_vanilla",
        "mean_accepted",
    }
    assert all(run_keys <= set(r) for r in data["runs"])
    assert {r["method"] for r in data["runs"]} == set(expand(["draftless"] + list(result["methods"])))
    assert {r["prompt_id"] for r in data["runs"] if r["suite"] == "multi_turn"} == {"sb_81_t1", "sb_81_t2"}
    summary_keys = {"suite", "method", "decode_tok_s", "speedup_vs_vanilla", "ratio_vs_hf_pld", "fraction_of_oracle"}
    assert all(summary_keys <= set(r) for r in data["summary"])
    assert all(r["identical_to_vanilla"] for r in data["runs"])
    assert {r["method"] for r in data["summary"]} >= {
        "vanilla",
        "hf_pld",
        "draftless",
        "rule_ngram32",
        "rule_sam",
        "rule_rest",
        "rule_llamacpp",
        "oracle",
    }
    assert "| code_edit | draftless |" in (tmp_path / "r.md").read_text()
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"
    assert len(data["outputs"]) == 4  # code_edit, repetitive, and two multi_turn turns
    assert data["cost_curve"]["ks"][0] == 0 and all(s > 0 for s in data["cost_curve"]["seconds"])
    assert data["device"] == "cpu" and data["dtype"] == "torch.float32" and data["inexact_drafts"] == []
    for r in data["runs"]:
        if r["method"] == "draftless":  # the default policy's choices, one (drafted, accepted) pair per pass
            assert len(r["draft_trace"]) == r["passes"] and all(0 <= a <= d for d, a in r["draft_trace"])


def test_draftless_history_drafts_from_the_earlier_prompts_outputs_only(tiny_dir, monkeypatch):
    from benchmarks import methods

    seen = []  # the history's documents when each draftless_history run starts
    real = methods.history_corpus
    monkeypatch.setattr(
        methods,
        "history_corpus",
        lambda model: (lambda c: seen.append([d.tolist() for d in c.documents()]) or c)(real(model)),
    )
    result = run_main(
        [
            "--model",
            str(tiny_dir),
            "--suite",
            "repetitive,code_edit",
            "--limit",
            "2",
            "--max-new-tokens",
            "12",
            "--methods",
            "draftless_history",
            "--repeats",
            "2",
        ]
    )
    assert all(r["identical_to_vanilla"] for r in result["runs"]) and not result["mismatches"]
    answers = [o["tokens"][o["prompt_len"] :] for o in result["outputs"]]
    # both repeats of prompt i see the outputs of prompts 0 .. i-1, never their own
    assert seen == [answers[:i] for i in range(len(answers)) for _ in range(2)]


def test_draftless_quick_drafts_under_a_two_length_curve_measured_before_the_runs(tiny_dir, monkeypatch):
    from benchmarks import methods

    calls = []
    real = methods.measure_cost_curve
    monkeypatch.setattr(methods, "measure_cost_curve", lambda model, **kw: calls.append(kw) or real(model, **kw))
    result = run_main(
        [
            "--model",
            str(tiny_dir),
            "--suite",
            "repetitive,code_edit",
            "--limit",
            "1",
            "--max-new-tokens",
            "16",
            "--methods",
            "draftless,draftless_quick",
        ]
    )
    assert calls == [{"ks": methods.QUICK_KS, "repeats": 1}]  # once, before any run, not once per run
    quick = result["prepared_cost_curves"]["draftless_quick"]
    assert quick["ks"] == [0, 63] and all(s > 0 for s in quick["seconds"])
    assert isinstance(result["prepare_s"], float) and result["prepare_s"] >= 0  # rounded to 10 ms: 0.0 on a tiny model
    assert {r["method"] for r in result["runs"]} == {"vanilla", "draftless", "draftless_quick"}
    assert all(r["identical_to_vanilla"] for r in result["runs"]) and not result["mismatches"]
    assert all(r["passes"] for r in result["runs"] if r["method"] == "draftless_quick")
    plain = run_main(
        ["--model", str(tiny_dir), "--suite", "qa", "--limit", "1", "--max-new-tokens", "4", "--methods", "draftless"]
    )
    assert plain["prepared_cost_curves"] == {} and "draftless_quick" not in methods.DEFAULT_METHODS


def test_a_draftless_variant_runs_the_default_policy_with_its_knobs_set(tiny_dir, capsys, monkeypatch):
    from benchmarks import methods
    from benchmarks.methods import variant_config

    configs = []  # the config each loop run was built with
    real = methods.SpeculativeGenerator

    def recording(model, tokenizer, config=None, **kw):
        configs.append(config)
        return real(model, tokenizer, config=config, **kw)

    monkeypatch.setattr(methods, "SpeculativeGenerator", recording)
    variant = "draftless[max_draft=4+earliest_in_prompt=0]"
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
            "--methods",
            f"draftless,{variant}",
        ]
    )
    assert {r["method"] for r in result["runs"]} == {"vanilla", "draftless", variant}
    assert all(r["identical_to_vanilla"] for r in result["runs"]) and not result["mismatches"]
    variant_configs = [AdaptiveConfig(max_draft=4, earliest_in_prompt=0)] * 2
    assert sorted(configs, key=lambda c: c is None) == variant_configs + [None] * 2  # None: the default
    traces = [r["draft_trace"] for r in result["runs"] if r["method"] == variant]
    assert len(traces) == 2 and all(k <= 4 for trace in traces for k, _ in trace)
    assert variant_config(variant) == AdaptiveConfig(max_draft=4, earliest_in_prompt=0)
    assert variant_config("draftless[reflow=false]").reflow is False and variant_config("draftless") is None
    for bad, word in (
        ("draftless[nope=1]", "knob must be one of"),
        ("draftless[max_draft=x]", "of type int"),
        ("draftless[max_draft=0]", "max_draft"),
        ("draftless[prior=0.5]", "tuple"),
        ("draftless[reflow=yes]", "true or false"),
        ("draftless[max_draft]", "needs a value"),
        ("draftless[max_draft=4+max_draft=8]", "twice"),
        ("draftless[]", "unknown method"),
    ):
        with pytest.raises(SystemExit) as exit_:
            run_main(["--model", str(tiny_dir), "--methods", bad])
        assert exit_.value.code == 2 and word in capsys.readouterr().err, bad


def test_a_variant_carrying_how_requests_start_records_it_and_replays_exactly(tiny_dir):
    from benchmarks.methods import variant_config
    from benchmarks.recorded_run import recorded_config, recorded_cost, recorded_request_start, recorded_start
    from benchmarks.replay import replay_one
    from draftless.lookup import AdaptiveProposer

    variant = "draftless[start_memory=0.8]"
    result = run_main(
        [
            "--model",
            str(tiny_dir),
            "--suite",
            "repetitive",
            "--limit",
            "3",
            "--max-new-tokens",
            "24",
            "--methods",
            variant,
        ]
    )
    runs = [r for r in result["runs"] if r["method"] == variant]
    assert "start_acceptance" not in runs[0] and sum(runs[-1]["start_acceptance"]["trials"]) > 0
    data = json.loads(json.dumps(result))  # as written to and read from the JSON file
    config = variant_config(variant)
    for rec, run in zip(data["outputs"], runs):
        proposer = AdaptiveProposer(
            config, cost=recorded_start(recorded_cost(data), config, run), start=recorded_request_start(config, run)
        )
        _, accepted, drafted, _ = replay_one(
            proposer, rec["tokens"], rec["prompt_len"], data["max_new_tokens"], run["pass_seconds"]
        )
        assert [list(p) for p in zip(drafted, accepted)] == run["draft_trace"]
    assert recorded_config(data) == AdaptiveConfig()  # the run's default policy (keyed openings, start_memory 0.5)


def test_trace_plot_of_the_default_policy(tiny_dir, tmp_path):
    from benchmarks.trace_plot import main as trace_main

    result = trace_main(
        [
            "--model",
            str(tiny_dir),
            "--suite",
            "repetitive",
            "--max-new-tokens",
            "20",
            "--plot",
            str(tmp_path / "k.png"),
            "--json",
            str(tmp_path / "k.json"),
        ]
    )
    assert result["identical_to_vanilla"] and len(result["draft_trace"]) == result["passes"]
    assert sum(a + 1 for _, a in result["draft_trace"]) == result["new_tokens"] - 1  # the prefill's token
    assert (tmp_path / "k.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((tmp_path / "k.json").read_text())["prompt_id"]
    run = tmp_path / "run.json"  # a run's calibrated curve, replayed instead of calibrating here
    run.write_text(json.dumps({"cost_curve": {"ks": [0, 16, 64], "seconds": [1.0, 1.1, 1.3]}}))
    again = trace_main(
        [
            "--model",
            str(tiny_dir),
            "--suite",
            "repetitive",
            "--max-new-tokens",
            "20",
            "--cost-from",
            str(run),
            "--plot",
            str(tmp_path / "k2.png"),
        ]
    )
    assert again["identical_to_vanilla"] and len(again["draft_trace"]) == again["passes"]
    with pytest.raises(ValueError, match="no prompt"):
        trace_main(["--model", str(tiny_dir), "--prompt-id", "nope", "--plot", str(tmp_path / "x.png")])


def test_bad_options_are_refused(tiny_dir, capsys):
    with pytest.raises(SystemExit):
        run_main(["--model", str(tiny_dir), "--suite", "poetry"])
    with pytest.raises(SystemExit):
        run_main(["--model", str(tiny_dir), "--methods", "magic"])
    with pytest.raises(SystemExit):
        run_main(["--model", str(tiny_dir), "--limit", "0"])
    with pytest.raises(SystemExit):
        run_main(["--model", str(tiny_dir), "--repeats", "0"])
    with pytest.raises(SystemExit):
        run_main(["--model", str(tiny_dir), "--device", "abacus"])
    with pytest.raises(SystemExit):
        run_main(["--model", str(tiny_dir), "--dtype", "int8"])
    for bad, word in (
        (["--model", str(tiny_dir.parent / "none")], "local transformers directory"),
        (["--model", str(tiny_dir), "--device", "cuda:99"], "not available"),
        (["--model", str(tiny_dir), "--json", str(tiny_dir / "no" / "run.json")], "--json"),
        (["--model", str(tiny_dir), "--plot", str(tiny_dir / "no" / "k.png")], "--plot"),
    ):
        with pytest.raises(SystemExit) as exit_:
            run_main(bad)
        assert exit_.value.code == 2 and word in capsys.readouterr().err
    with pytest.raises(ValueError, match="repeats"):
        run_benchmark(str(tiny_dir), ["code_edit"], ["draftless"], 1, 4, progress=False, repeats=0)
    with pytest.raises(SystemExit) as exit_:  # through the console script, named as the user typed it
        run_main(["--model", str(tiny_dir), "--suite", "poetry"], prog="draftless-bench")
    assert exit_.value.code == 2 and "usage: draftless-bench" in capsys.readouterr().err


def test_repeats_pool_every_run_of_a_prompt(tiny_dir):
    result = run_main(
        [
            "--model",
            str(tiny_dir),
            "--suite",
            "code_edit,multi_turn",
            "--limit",
            "1",
            "--methods",
            "draftless,hf_pld",
            "--max-new-tokens",
            "8",
            "--repeats",
            "3",
        ]
    )
    assert result["repeats"] == 3 and not result["mismatches"]
    assert len(result["outputs"]) == 3  # recorded once per prompt and turn, not once per repeat
    for prompt in ("code_0", "sb_81_t1", "sb_81_t2"):
        for method in ("vanilla", "draftless", "hf_pld"):
            rows = [r for r in result["runs"] if r["prompt_id"] == prompt and r["method"] == method]
            assert sorted(r["repeat"] for r in rows) == [0, 1, 2] and all(r["identical_to_vanilla"] for r in rows)
    for row in result["summary"]:
        assert row["runs"] == 3 * row["prompts"]
        pooled = [r for r in result["runs"] if row["suite"] in (r["suite"], "all") and r["method"] == row["detail"]]
        tokens = sum(r["new_tokens"] - 1 for r in pooled)
        assert row["decode_tok_s"] == pytest.approx(tokens / sum(r["decode_s"] for r in pooled), rel=1e-3)


def test_batch_run_compares_generate_and_draftless_on_batches(tiny_dir, tmp_path):
    out = tmp_path / "b.json"
    args = ["--model", str(tiny_dir), "--batch-size", "1,3", "--suite", "code_edit,mixed", "--limit", "3"]
    result = run_main(args + ["--max-new-tokens", "10", "--json", str(out), "--markdown", str(tmp_path / "b.md")])
    rows = json.loads(out.read_text())["batches"]
    assert rows == result["batches"] and len(rows) == 4
    assert {(r["suite"], r["batch_size"]) for r in rows} == {(s, b) for s in ("code_edit", "mixed") for b in (1, 3)}
    assert all(r["identical"] and r["prompts"] == 3 and r["draftless_tok_s"] > 0 for r in rows)
    assert "| mixed | 3 | 3 |" in (tmp_path / "b.md").read_text()
    equal_alone = {r["batch_size"]: r["rows_equal_alone"] for r in rows}
    assert equal_alone[1] is None and equal_alone[3].endswith("/3")  # each prompt of the batch met alone at B = 1
    with pytest.raises(SystemExit):
        run_main(["--model", str(tiny_dir), "--suite", "mixed"])  # a batch suite without --batch-size

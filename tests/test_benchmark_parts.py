"""The benchmarks' parts on their own: the suites' prompts, the report's summary and tables, the oracle and the
lookup ceiling, the targets' checks and transformers' prompt lookup on the planned layers (no model run end to end;
``test_benchmarks.py`` runs one)."""

import pytest
from tiny_models import tiny_model, tiny_tokenizer

from benchmarks import report
from benchmarks.methods import OracleProposer
from benchmarks.suites import SUITES, build, interleaved, render


def test_every_suite_builds_and_renders_in_both_formats():
    chat = tiny_tokenizer()
    chat.chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"
    plain = tiny_tokenizer()
    for suite in SUITES:
        tasks = build(suite, limit=2)
        assert len(tasks) == 2 and all(t.suite == suite for t in tasks)
        task = tasks[0]
        answers = ("first answer",) if len(task.turns) > 1 else ()
        text = render(task, plain, answers)
        assert task.turns[-1][-30:] in text or task.turns[0][-30:] in text
        assert render(task, chat, answers).endswith("<assistant>")
    multi = build("multi_turn", 1)[0]
    assert "first answer" in render(multi, plain, ("first answer",))


def test_tasks_run_in_round_robin_over_the_suites():
    tasks = interleaved(["qa", "code_edit", "rag"], limit=3)
    assert [t.suite for t in tasks] == ["qa", "code_edit", "rag"] * 3
    assert [t.prompt_id for t in tasks[::3]] == [t.prompt_id for t in build("qa", 3)]
    uneven = interleaved(["code_edit", "qa"])  # a suite that runs out leaves the others going
    assert len(uneven) == len(build("code_edit")) + len(build("qa"))
    assert [t.suite for t in uneven[-3:]] == ["qa"] * 3 and interleaved([]) == []


def test_summary_ratios_and_markdown():
    runs = []
    for method, decode in [
        ("vanilla", 10.0),
        ("hf_pld", 5.0),
        ("draftless", 2.5),
        ("oracle_k8", 2.0),
        ("oracle_k16", 1.0),
        ("rule_pld", 5.0),
        ("rule_sam", 4.0),
    ]:
        runs.append(
            {
                "suite": "s",
                "prompt_id": "p",
                "method": method,
                "new_tokens": 11,
                "prefill_s": 1.0,
                "decode_s": decode,
                "total_s": decode + 1,
                "identical_to_vanilla": True,
                "mean_accepted": None if method in ("vanilla", "hf_pld") else 3.0,
            }
        )
    rows = {(r["suite"], r["method"]): r for r in report.summarize(runs)}
    d = rows[("s", "draftless")]
    assert d["decode_tok_s"] == 4.0 and d["speedup_vs_vanilla"] == 4.0 and d["ratio_vs_hf_pld"] == 2.0
    assert d["fraction_of_oracle"] == 0.4  # the best oracle (k16, 10 tok/s)
    assert d["best_rule"] == "rule_sam" and d["ratio_vs_best_rule"] == 1.6  # the fastest of the peer rules run
    assert rows[("s", "oracle")]["detail"] == "oracle_k16"
    assert ("all", "draftless") in rows
    table = report.markdown(report.summarize(runs), "m")
    assert "| s | oracle_k16 |" in table and (
        "| s | draftless | 1 | 4.00 | 4.00x | 2.00 | 1.60 (rule_sam) | 0.40 | 3.00 | yes |" in table
    )


def test_mean_accepted_pools_the_passes_of_a_suite():
    """Tokens per pass over the suite, as the loop's stats count them: a prompt copied in 2 passes of 64 tokens
    and one written in 64 passes of 2 make 256 tokens in 66 passes, 3.88 a pass, not 33 (the mean of 64 and 2)."""
    runs = [
        {
            "suite": "s",
            "prompt_id": p,
            "method": "draftless",
            "new_tokens": 129,
            "prefill_s": 0.1,
            "decode_s": 1.0,
            "total_s": 1.1,
            "identical_to_vanilla": True,
            "mean_accepted": m,
            "passes": n,
        }
        for p, m, n in (("a", 64.0, 2), ("b", 2.0, 64))
    ]
    rows = {(r["suite"], r["method"]): r for r in report.summarize(runs)}
    assert rows[("s", "draftless")]["mean_accepted"] == round(256 / 66, 2)
    for r in runs:  # runs recorded without their pass count: the mean over runs
        del r["passes"]
    assert {(r["suite"], r["method"]): r for r in report.summarize(runs)}[("s", "draftless")]["mean_accepted"] == 33.0


def test_oracle_proposer_drafts_the_reference():
    p = OracleProposer([1, 2, 3, 4, 5, 6], k=3)
    p.reset([1, 2])
    assert p.propose(10).tolist() == [3, 4, 5] and p.propose(2).tolist() == [3, 4]
    p.update([3, 4])
    assert p.propose(10).tolist() == [5, 6]


def test_lookup_ceiling_drafts_the_agreeing_part_of_an_earlier_occurrence():
    from benchmarks.lookup_ceiling import LookupCeilingProposer
    from draftless.lookup.cost_model import FLAT, CostCurve

    prompt = [1, 2, 3, 4, 9, 1, 2, 3, 5, 6, 1, 2, 3]  # "1 2 3" was followed by "4 9" first, by "5 6" last
    truth = prompt + [4, 9, 8, 7]
    recent, anywhere = LookupCeilingProposer(truth, FLAT, "recent"), LookupCeilingProposer(truth, FLAT, "any")
    for p in (recent, anywhere):
        p.reset(prompt)
    assert recent.propose(10).size == 0  # the most recent occurrence's "5" is wrong at once
    assert anywhere.propose(10).tolist() == [4, 9]  # the first occurrence agrees for two tokens, then "1" != "8"
    assert anywhere.propose(1).tolist() == [4]  # never past the budget
    steep = LookupCeilingProposer(truth, CostCurve((0, 1), (1.0, 5.0)), "any")
    steep.reset(prompt)
    assert steep.propose(10).size == 0  # two accepted tokens do not pay for a pass that costs 9 plain steps
    with pytest.raises(ValueError, match="occurrence"):
        LookupCeilingProposer(truth, FLAT, "frequent")


def test_targets_are_checked_against_the_summary():
    from benchmarks.targets import check, markdown

    def row(suite, method, tok_s, **extra):
        return {"suite": suite, "method": method, "decode_tok_s": tok_s, **extra}

    result = {
        "model": "m",
        "mismatches": [],
        "runs": [{"identical_to_vanilla": True}],
        "summary": [
            row("code_edit", "draftless", 10.0, ratio_vs_hf_pld=2.0, fraction_of_oracle=0.7),
            row("code_edit", "rule_pld", 5.0),
            row("code_edit", "rule_ngram32", 10.0),
            row("code_edit", "rule_sam", 9.0),
            row("qa", "draftless", 1.0, speedup_vs_vanilla=0.99),
            row("qa", "rule_llamacpp", 1.2),
            row("all", "draftless", 3.0),
        ],
    }
    met = {(s, t.split(" (")[0]): ok for _, s, t, _, _, ok in check(result)}
    assert met == {
        ("code_edit", "vs the best peer rule, rule_ngram32"): True,  # a tie is as fast: the best of all six rules
        ("qa", "vs the best peer rule, rule_llamacpp"): False,
        ("code_edit", "vs hf_pld"): True,
        ("code_edit", "fraction of oracle"): False,
        ("qa", "vs vanilla"): True,
        ("all", "greedy outputs identical to vanilla"): True,
    }
    assert "| m | code_edit | fraction of oracle | 0.700 | 0.8 | NO |" in markdown(check(result))


def test_hf_pld_planned_is_prompt_lookup_on_the_planned_layers(monkeypatch):
    import torch

    from benchmarks import methods
    from draftless.integration.fastpass import linear_plan

    model = tiny_model("llama")
    every = linear_plan.LinearPlan((0, 2, 2, 4, 4), (False, True, True, True, True), ((16, True),))
    plans = linear_plan.LinearPlans(tuple(sorted((s, every) for s in linear_plan.plain_linears(model))))
    seen = []
    real = linear_plan._planned_forward
    monkeypatch.setattr(methods, "cached_linear_plans", lambda m: plans)
    monkeypatch.setattr(linear_plan, "_planned_forward", lambda *a: seen.append(1) or real(*a))
    inputs = {"input_ids": torch.tensor([[5, 6, 7, 8, 5, 6, 7, 8, 5, 6]]), "attention_mask": torch.ones(1, 10)}
    plain, _ = methods.METHODS["hf_pld"](model, None, inputs, 12, None, None, {})
    planned, _ = methods.METHODS["hf_pld_planned"](model, None, inputs, 12, None, None, {})
    assert torch.equal(plain, planned) and seen  # the same tokens, computed through the plans
    assert not any("forward" in m.__dict__ for m in model.modules())

"""The pass-cost tool: passes timed over both caches."""

import json

import pytest
from tiny_models import tiny_model, tiny_tokenizer

from experiments import pass_cost


def test_pass_cost_tool_times_both_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTLESS_CACHE", str(tmp_path / "cache"))
    model = tiny_model("llama")
    rows = pass_cost.measure(model, contexts=[20, 40], ks=[0, 3], repeats=1)
    assert [(r["context"], r["k"]) for r in rows] == [(20, 0), (20, 3), (40, 0), (40, 3)]
    assert all(r["transformers_ms"] > 0 and r["draftless_ms"] > 0 for r in rows)
    assert pass_cost.markdown(rows).count("\n") == 2 + len(rows)
    model.save_pretrained(tmp_path / "tiny")
    tiny_tokenizer().save_pretrained(tmp_path / "tiny")
    out = tmp_path / "p.json"
    pass_cost.main(["--model", str(tmp_path / "tiny"), "--contexts", "16", "--ks", "0,2", "--json", str(out)])
    assert [r["k"] for r in json.loads(out.read_text())["rows"]] == [0, 2]
    for bad in (["--contexts", "a,b"], ["--ks", "-1"], ["--contexts", "0"]):
        with pytest.raises(SystemExit):
            pass_cost.main(["--model", str(tmp_path / "tiny"), *bad])

"""The lean-passes timing tool."""

import json

import pytest
from tiny_models import tiny_model, tiny_tokenizer


def test_lean_passes_tool_times_both_ways(cache_dir, tmp_path):
    from experiments import lean_passes

    rows = lean_passes.measure(tiny_model("qwen3"), context=12, ks=[0, 2], repeats=2)
    assert [r["k"] for r in rows] == [0, 2] and all(r["own_ms"] > 0 and r["lean_ms"] > 0 for r in rows)
    assert lean_passes.markdown(rows).count("\n") == 2 + len(rows)
    with pytest.raises(ValueError, match="no lean decoder layers"):
        lean_passes.measure(tiny_model("gpt2"), context=12, ks=[0], repeats=1)
    small = dict(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
    )
    model = lean_passes.shaped_model("qwen3-0.6b", **small)
    assert type(model).__name__ == "Qwen3ForCausalLM" and not model.training
    with pytest.raises(ValueError, match="shape"):
        lean_passes.shaped_model("qwen9")
    tiny_model("llama").save_pretrained(tmp_path / "tiny")
    tiny_tokenizer().save_pretrained(tmp_path / "tiny")
    out = tmp_path / "lean.json"
    lean_passes.main(
        ["--model", str(tmp_path / "tiny"), "--context", "10", "--ks", "0,1", "--repeats", "1", "--json", str(out)]
    )
    assert [r["k"] for r in json.loads(out.read_text())["rows"]] == [0, 1]
    for bad in (["--shape", "qwen9"], ["--ks", "-1"], ["--model", "x", "--shape", "qwen2-0.5b"]):
        with pytest.raises(SystemExit):
            lean_passes.main(bad)

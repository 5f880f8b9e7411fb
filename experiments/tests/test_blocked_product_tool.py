"""The blocked-product timing tool."""

import json

import pytest
from tiny_models import tiny_model, tiny_tokenizer

from draftless.integration.fastpass import blocked_product


def test_the_blocked_product_tool_times_both_ways(tmp_path, small_blocks):
    from experiments import blocked_product as tool

    model = tiny_model("llama")
    result = tool.measure(model, rows=[2, 9], ks=[0, 3], context=12, rounds=2)
    assert [r["rows"] for r in result["product"]] == [2, 9] and [r["k"] for r in result["pass"]] == [0, 3]
    assert all(r["whole_ms"] > 0 and r["blocked_ms"] > 0 for part in result.values() for r in part)
    assert blocked_product.BLOCKED_FROM_ROWS == 2  # switched back on after the whole rounds
    assert tool.markdown(result).count("| 9 |") == 1
    model.save_pretrained(tmp_path / "tiny")
    tiny_tokenizer().save_pretrained(tmp_path / "tiny")
    out = tmp_path / "b.json"
    tool.main(
        [
            "--model",
            str(tmp_path / "tiny"),
            "--rows",
            "3",
            "--ks",
            "2,0",
            "--context",
            "8",
            "--rounds",
            "1",
            "--json",
            str(out),
        ]
    )
    saved = json.loads(out.read_text())
    assert [r["k"] for r in saved["pass"]] == [0, 2] and saved["context"] == 8 and saved["rounds"] == 1
    for bad in (["--rows", "0"], ["--ks", "a"], ["--rounds", "0"]):
        with pytest.raises(SystemExit):
            tool.main(["--model", str(tmp_path / "tiny"), *bad])

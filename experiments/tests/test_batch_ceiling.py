"""The batch-loop ceiling tool: every drafter's output equal to generate's, one row of figures per suite."""

import json

import pytest
from tiny_models import tiny_model, tiny_tokenizer


def test_batch_ceiling_measures_every_drafter_on_the_same_batches(cache_dir, tmp_path):
    from experiments import batch_ceiling

    tok = tiny_tokenizer()
    model = tiny_model("llama", vocab=len(tok))
    model.config.max_position_embeddings = 4096
    model.save_pretrained(tmp_path / "tiny")
    tok.save_pretrained(tmp_path / "tiny")
    out = tmp_path / "ceiling.json"
    args = ["--model", str(tmp_path / "tiny"), "--suite", "code_edit,mixed", "--limit", "3", "--batch-size", "2"]
    rows = batch_ceiling.main(args + ["--max-new-tokens", "8", "--ks", "2,4", "--cap", "4", "--json", str(out)])
    assert json.loads(out.read_text())["rows"] == rows and [r["suite"] for r in rows] == ["code_edit", "mixed"]
    for row in rows:
        assert row["prompts"] == 3 and row["generate_tok_s"] > 0
        for name in ("draftless", "oracle2", "oracle4", "ceiling_any"):
            assert row[f"{name}_tok_s"] > 0 and row[f"{name}_speedup"] > 0
    assert batch_ceiling.markdown(rows).count("\n") == 2 + len(rows)
    for bad in (["--ks", "0"], ["--batch-size", "0"], ["--cap", "0"]):
        with pytest.raises(SystemExit):
            batch_ceiling.main(bad)

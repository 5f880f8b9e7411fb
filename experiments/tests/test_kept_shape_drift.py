"""``experiments.kept_shape_drift``: the cache its processes share, the table, and one process's report. No timing
assertions."""

import json
import os

import pytest
from tiny_models import tiny_model, tiny_tokenizer


def test_the_shared_cache_holds_the_calibration_but_no_kept_shape(tmp_path):
    from experiments.kept_shape_drift import shared_cache

    user = tmp_path / "user"
    (user / "calibration").mkdir(parents=True)
    for name in ("k-cost-v12-0-1.json", "k-linear-plans-v3.json", "k-shape-v2-0-1.json", "k-shape-v1-0-1.json"):
        (user / "calibration" / name).write_text("{}")
    (user / "models").mkdir()
    (user / "models" / "weights").write_text("w")
    shared = shared_cache(user, tmp_path / "shared")
    assert sorted(p.name for p in (shared / "calibration").iterdir()) == [
        "k-cost-v12-0-1.json",
        "k-linear-plans-v3.json",
    ]
    assert (shared / "models").is_symlink() and (shared / "models" / "weights").read_text() == "w"
    assert not (shared / "gguf").exists()  # the user had none
    assert shared_cache(user, shared) == shared  # again over the same folder: no error


def test_main_runs_a_process_per_index_in_the_shared_cache_and_tables_the_kept_shape(monkeypatch, tmp_path, capsys):
    import experiments.kept_shape_drift as drift
    from draftless.integration import models

    monkeypatch.setattr(models, "cache_root", lambda: tmp_path / "user")
    monkeypatch.setenv("DRAFTLESS_CACHE", "before")
    seen = []

    def fresh(command, repeats, env=None):
        seen.append((command, env["DRAFTLESS_CACHE"]))
        i = int(command[command.index("--index") + 1])
        return [
            {
                "prompt": f"p{i}",
                "passes": 3,
                "tokens_per_pass": 2.5,
                "ks": [0, 1, 2, 4, 8, 16, 32, 64],
                "multiplier": [1.0, 1.0, 1.0 - 0.1 * i, 1.0, 1.0, 1.0, 1.0, 1.0],
                "evidence": [],
            }
        ] * repeats

    monkeypatch.setattr(drift, "run_fresh", fresh)
    out = tmp_path / "drift.json"
    runs = drift.main(["--model", "m", "--processes", "3", "--suite", "qa", "--json", str(out)])
    assert [c[c.index("--index") + 1] for c, _ in seen] == ["0", "1", "2"]
    assert all("--once" in c and c[c.index("--suite") + 1] == "qa" for c, _ in seen)
    assert len({cache for _, cache in seen}) == 1 and seen[0][1] != "before"  # one shared cache, not the user's
    assert os.environ["DRAFTLESS_CACHE"] == "before"  # given back
    text = capsys.readouterr().out
    assert "| 3 | p2 | 3 | 2.50 | 1.000 | 0.800 |" in text and "k = 64" in text
    assert json.loads(out.read_text())["runs"] == runs and len(runs) == 3
    for bad in (["--processes", "0"], ["--new-tokens", "0"], ["--prompts", "0"]):
        with pytest.raises(SystemExit):
            drift.main(bad)


def test_one_process_reports_its_passes_and_the_shape_it_kept(tmp_path, cache_dir, capsys):
    from experiments.kept_shape_drift import main

    tokenizer = tiny_tokenizer()
    tiny_model("llama", vocab=len(tokenizer)).save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    main(
        [
            "--model",
            str(tmp_path / "tiny"),
            "--once",
            "--suite",
            "code_edit",
            "--prompts",
            "2",
            "--index",
            "3",
            "--new-tokens",
            "6",
        ]
    )
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["prompt"] == "code_1" and report["passes"] >= 1  # index 3 of two prompts: the second
    assert len(report["multiplier"]) == len(report["ks"]) and report["multiplier"][0] == 1.0
    assert all(m > 0 for m in report["multiplier"])

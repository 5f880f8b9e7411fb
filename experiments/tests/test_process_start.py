"""What a first calibration and a process start cost, timed in fresh processes."""

import json
import os
from pathlib import Path

from tiny_models import tiny_model, tiny_tokenizer

from draftless.integration import calibration, store


def test_first_calibration_times_each_stage_and_then_nothing(cache_dir, short_curve):
    from experiments.first_calibration import time_first_calibration

    model = tiny_model("llama")
    first = time_first_calibration(model)
    stages = [part for part in first if part in calibration.STAGES]
    assert stages == list(calibration.STAGES[:2]) and all(first[s] > 0 for s in stages)
    assert first["total"] >= sum(first[s] for s in stages) > 0
    assert 0 < first["curve passes after the first"] < first["cost curve"]
    again = time_first_calibration(model)  # everything cached: no stage measured
    assert set(again) == {"total"}


def test_process_start_times_every_stage_of_a_local_model(tmp_path, cache_dir, short_curve, capsys):
    from experiments.process_start import main

    tokenizer = tiny_tokenizer()
    tiny_model("llama", vocab=len(tokenizer)).save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    main(["--model", str(tmp_path / "tiny"), "--once", "--new-tokens", "4"])
    seconds = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert list(seconds) == [
        "import torch",
        "import transformers",
        "import draftless.integration",
        "load_model (its tokenizer and weights)",
        "build the generator",
        "first generate",
        "second generate",
    ]
    assert all(value >= 0 for value in seconds.values()) and seconds["first generate"] > 0


def test_process_start_with_an_empty_calibration_calibrates_elsewhere(
    tmp_path, cache_dir, short_curve, capsys, monkeypatch
):
    from experiments.process_start import main

    tokenizer = tiny_tokenizer()
    tiny_model("llama", vocab=len(tokenizer)).save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    monkeypatch.setenv("DRAFTLESS_CACHE", str(cache_dir))  # restored after: --once moves it, as its process may
    before = sorted(p.name for p in cache_dir.rglob("*"))
    main(["--model", str(tmp_path / "tiny"), "--once", "--new-tokens", "4", "--empty-calibration"])
    seconds = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert seconds["first generate"] > 0 and len(seconds) == 7
    assert sorted(p.name for p in cache_dir.rglob("*")) == before  # the user's cache untouched
    elsewhere = os.environ["DRAFTLESS_CACHE"]
    assert elsewhere != str(cache_dir) and not Path(elsewhere).exists()  # the empty cache removed after
    assert store.read_files() and all(key.startswith(elsewhere) for key in store.read_files())  # calibrated there


def test_process_start_both_ways_reports_what_the_first_calibration_adds(monkeypatch, tmp_path, capsys):
    import experiments.process_start as process_start

    commands = []

    def fresh(command, repeats):  # cached processes: 1.5 s to build and first generate, empty ones 4.5 s
        commands.append(command)
        empty = "--empty-calibration" in command
        return [
            {"load": 2.0, "build the generator": 2.5 if empty else 0.5, "first generate": 2.0 if empty else 1.0}
        ] * repeats

    monkeypatch.setattr(process_start, "run_fresh", fresh)
    out = tmp_path / "start.json"
    runs = process_start.main(["--model", "m", "--calibration", "both", "--repeats", "2", "--json", str(out)])
    assert ["--empty-calibration" in c for c in commands] == [False, False, True, False, True]  # one untimed first
    assert len(runs["cached"]) == len(runs["empty"]) == 2
    assert "adds 3.00 s to building the generator and its first generate" in capsys.readouterr().out
    written = json.loads(out.read_text())
    assert written["first_calibration_felt"] == 3.0 and written["calibration"] == "both"
    single = process_start.main(["--model", "m", "--calibration", "empty", "--repeats", "1"])
    assert single[0]["first generate"] == 2.0 and "--empty-calibration" in commands[-1]


def test_fresh_process_timings_are_tabled_with_their_median():
    from experiments.fresh_processes import median_table

    table = median_table("title", [{"a": 1.0, "b": 4.0}, {"a": 3.0, "b": 2.0}, {"a": 2.0, "b": 3.5}])
    assert table.splitlines()[:4] == ["title", "", "| part | run 1 | run 2 | run 3 | median |", "|---|---|---|---|---|"]
    assert table.splitlines()[4:] == ["| a | 1.00 | 3.00 | 2.00 | 2.00 |", "| b | 4.00 | 2.00 | 3.50 | 3.50 |"]

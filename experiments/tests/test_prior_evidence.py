"""``experiments.prior_evidence``: the acceptance prior changed cell by cell, and fitted on recorded outputs, replayed
against the default."""

import json

import numpy as np
import pytest

from benchmarks.replay import replay_one
from draftless.lookup import AdaptiveConfig, AdaptiveProposer
from draftless.lookup.acceptance_model import CORPUS, DEFAULT_PRIOR, ORIGINS
from experiments.prior_evidence import CellPriorProposer, cell_table, fitted_table, gather_evidence, main, parse_cells

CYCLE = list(range(200, 216))
PROMPT = list(range(10, 40)) + CYCLE
RUN = {
    "outputs": [
        {"suite": "repetitive", "prompt_id": "p", "prompt_len": len(PROMPT), "tokens": PROMPT + CYCLE * 6},
        {"suite": "qa", "prompt_id": "q", "prompt_len": 3, "tokens": [1, 2, 3, 4, 5, 6]},
    ],
    "cost_curve": {"ks": [0, 1, 16, 32, 64], "seconds": [1.0, 1.01, 1.05, 1.1, 1.2]},
    "model": "tiny",
}


def test_cells_parse_and_fill_the_table():
    cells = parse_cells("copying/prompt/2-4=0.8,0.85,0.9; any/generated/11=0.99")
    table = cell_table(cells)
    assert table.shape == (2, len(ORIGINS), len(DEFAULT_PRIOR))
    assert list(table[1, 1, 2:5]) == [0.8, 0.85, 0.9] and list(table[0, 1, 2:5]) == list(DEFAULT_PRIOR[2:5])
    assert table[0, 0, 11] == table[1, 0, 11] == 0.99 and table[1, 1, 11] == DEFAULT_PRIOR[11]
    assert list(cell_table(parse_cells("any/any/0-1=0.5"))[1, 3, :2]) == [0.5, 0.5]  # one rate for every bucket
    assert list(cell_table([])[0, CORPUS]) == list(AdaptiveConfig().corpus_prior)
    for bad in (
        "copying/prompt/2=1.0",
        "copying/prompt/12=0.5",
        "copying/prompt/1-3=0.5,0.6",
        "often/prompt/1=0.5",
        "copying/elsewhere/1=0.5",
        "copying/prompt=0.5",
        "",
        "copying/prompt/a=0.5",
    ):
        with pytest.raises(ValueError):
            parse_cells(bad)


def test_the_default_table_drafts_as_the_library_does():
    tokens = PROMPT + CYCLE * 3 + [7, 8] + CYCLE * 2
    kw = {"cost": None}
    ours = replay_one(CellPriorProposer(cell_table([]), AdaptiveConfig(), **kw), tokens, len(PROMPT))
    library = replay_one(AdaptiveProposer(AdaptiveConfig(), **kw), tokens, len(PROMPT))
    assert ours[:3] == library[:3] and ours[2] and max(ours[2]) > 8  # the same drafts, long ones among them


def test_evidence_counts_judged_positions(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(RUN))
    evidence = gather_evidence([path])
    hits, trials = evidence["tiny"]["hits"], evidence["tiny"]["trials"]
    assert trials.sum() > 0 and np.all(hits <= trials) and hits.sum() > 0
    table = fitted_table(evidence, ["tiny"], pseudo=0.0)
    seen = trials > 0
    seen[:, CORPUS] = False
    assert np.allclose(table[seen], np.clip(hits[seen] / trials[seen], 0.02, 0.98))
    assert np.all(table[~seen & (trials == 0)] == cell_table([])[~seen & (trials == 0)])  # no evidence: default


def test_main_reports_each_variant_against_the_default(tmp_path, capsys):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(RUN))
    same = "any/any/0-11=" + ",".join(map(str, DEFAULT_PRIOR))
    main([str(path), str(path), "--variant", f"same={same}", "--variant", "low=any/any/0-11=0.05", "--fitted", "own"])
    out = capsys.readouterr().out
    assert "over 4 suite columns of 2 runs" in out
    assert "- same: +0.00 %, worst +0.0 %" in out  # the default's rates written out: the default
    assert "- low: -" in out and "tiny repetitive -" in out  # a prior that never drafts loses the repeats
    assert "- fitted (own):" in out and "| copying, prompt |" in out and "| regime, origin | 1 | 2 | 3 | 4-5 |" in out
    for bad in (
        ["--variant", "noequals"],
        ["--variant", "x=copying/prompt/1=2"],
        [],
        ["--fitted", "mine"],
        ["--fitted", "own", "--pseudo", "-1"],
    ):
        with pytest.raises(SystemExit):
            main([str(path)] + bad)

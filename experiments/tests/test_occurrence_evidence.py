"""The occurrence evidence tool."""

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures"


def test_occurrence_evidence_reports_every_column(capsys):
    from experiments.occurrence_evidence import main

    run = FIXTURES / "gemma-h200-qa-rag.json"
    gains = main([str(run), "--memory", "0.6", "--margin", "1,2"])
    assert all(g == 1.0 for g in gains["frequent"]) and len(gains[(0.6, 1.0)]) == 3  # qa, rag, all
    out = capsys.readouterr().out
    assert "| memory | margin 1 | margin 2 |" in out and "| 0.6 | " in out
    with pytest.raises(SystemExit):
        main([str(run), "--margin", "-1"])  # refused by AdaptiveConfig, reported by the parser

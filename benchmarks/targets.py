"""The adaptive-drafting targets, checked against a run's summary.

    python -m benchmarks.targets RUN.json [RUN.json ...]

For each run (written by ``benchmarks.run --json``) and each target that its suites allow, prints the
measured figure, the bar it must clear and whether it does, as a Markdown table. The targets:

- every suite: ``draftless`` at least as fast as the best peer rule the run has, inside the same loop
  (``rule_pld``, transformers' prompt lookup; ``rule_ngram32``, vLLM's n-gram; ``rule_suffix``, SuffixDecoding;
  ``rule_sam``, SAM-Decoding; ``rule_rest``, REST; ``rule_llamacpp``, llama.cpp's lookup);
- ``code_edit``: at least 1.5x ``hf_pld`` and 0.8 of the oracle;
- ``summarization``, ``rag``: at least 1.3x ``hf_pld``;
- ``qa``, ``translation``, ``math``: at least 0.98x ``vanilla``;
- ``repetitive``: at least 0.8 of the oracle;
- every greedy output identical to ``vanilla``'s.
"""

import argparse
import json
import sys
from pathlib import Path

from .report import PEER_RULES


def check(result):
    """Rows ``(model, suite, target, measured, bar, met)`` for one run's result."""
    by = {(r["suite"], r["method"]): r for r in result["summary"]}
    suites = [s for s in dict.fromkeys(r["suite"] for r in result["summary"]) if s != "all"]
    model = result["model"]
    rows = []

    def add(suite, target, measured, bar, strict=False):
        if measured is not None:
            rows.append((model, suite, target, round(measured, 3), bar, measured > bar if strict else measured >= bar))

    for suite in suites:
        mine = by.get((suite, "draftless"))
        if mine is None:
            continue
        rules = {m: by[(suite, m)]["decode_tok_s"] for m in PEER_RULES if (suite, m) in by}
        if rules:
            best = max(rules, key=rules.get)
            add(suite, f"vs the best peer rule, {best} (at least as fast)", mine["decode_tok_s"] / rules[best], 1.0)
        if suite == "code_edit":
            add(suite, "vs hf_pld", mine["ratio_vs_hf_pld"], 1.5)
            add(suite, "fraction of oracle", mine["fraction_of_oracle"], 0.8)
        if suite in ("summarization", "rag"):
            add(suite, "vs hf_pld", mine["ratio_vs_hf_pld"], 1.3)
        if suite in ("qa", "translation", "math"):
            add(suite, "vs vanilla", mine["speedup_vs_vanilla"], 0.98)
        if suite == "repetitive":
            add(suite, "fraction of oracle", mine["fraction_of_oracle"], 0.8)
    identical = not result.get("mismatches") and all(r["identical_to_vanilla"] is not False for r in result["runs"])
    rows.append((model, "all", "greedy outputs identical to vanilla", 1.0 if identical else 0.0, 1.0, identical))
    return rows


def markdown(rows):
    lines = ["| model | suite | target | measured | bar | met |", "|---|---|---|---|---|---|"]
    lines += [f"| {m} | {s} | {t} | {v:.3f} | {b} | {'yes' if ok else 'NO'} |" for m, s, t, v, b, ok in rows]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.targets", description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="JSON files written by benchmarks.run --json")
    args = parser.parse_args(argv)
    rows = [row for path in args.runs for row in check(json.loads(path.read_text()))]
    sys.stdout.write(markdown(rows))
    return rows


if __name__ == "__main__":
    main()

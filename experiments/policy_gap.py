"""Where the adaptive policy falls short of the hindsight ceiling, and whether its acceptance model is to blame.

    python -m experiments.policy_gap RUN.json [--suite code_edit] [--first 1,3] [--by-origin] [--cost run|cpu|near_flat]
        [--json PATH]

Replays the outputs of a run recorded by ``benchmarks.run`` through the library's default policy (model-free, as
``benchmarks.replay`` does, under the run's cost curve) and reports per suite:

- **Calibration**: per kind of draft (the output copying or writing, the match shorter than ``copy_length`` or not,
  a draft of up to 8 tokens or longer; with
  ``--by-origin`` also where the occurrence lies, ``acceptance_model.ORIGINS``), how many drafts the policy made,
  the accepted tokens its acceptance model expected at the length it chose (a request's first drafts: the model of
  how requests start they were chosen under, carried from record to record as ``replay`` carries it), and the
  accepted tokens realised. Expected well below realised means the policy drafts too short for the text; above, too
  long.
- **Hindsight**: the modelled speedup of the policy, of the policy given the best length in hindsight on each
  request's first N passes (``--first``: the same occurrence and bookkeeping, only the length told by the
  truth, as ``benchmarks.lookup_ceiling`` chooses it), and of the ceilings ``ceiling_recent`` and
  ``ceiling_any`` (hindsight length on every pass, and also hindsight occurrence). The gap between the policy
  and a calibrated model's hindsight figures is information the index does not hold, not a fault of the policy.
"""

import argparse
import json
import sys
from collections import defaultdict

import numpy as np

from benchmarks.lookup_ceiling import LookupCeilingProposer
from benchmarks.recorded_run import run_digit_tokens, run_text_classes
from benchmarks.replay import AdaptiveFactory, parse_run_arguments, replay, replay_one
from draftless.lookup.acceptance_model import ORIGINS
from draftless.lookup.adaptive import AdaptiveConfig, AdaptiveProposer
from draftless.lookup.copy_regime import COPY_LENGTH
from draftless.lookup.occurrence import agreement, periodic_continuation
from draftless.lookup.request_start import carried_starts


def draft_kind(copying, match_length, k, copy_length, origin=None):
    """The calibration table's row for a draft: regime, match length class, draft length class, preceded by the
    occurrence's origin (a name of ``ORIGINS``) where one is given."""
    kind = (
        "copying" if copying else "writing",
        "short match" if match_length < copy_length else "long match",
        "k <= 8" if k <= 8 else "k > 8",
    )
    return kind if origin is None else (origin,) + kind


class CalibrationProbe(AdaptiveProposer):
    """The adaptive policy, recording per draft its kind (with ``by_origin``, the occurrence's origin first), the
    accepted tokens it expected and those realised."""

    def __init__(self, *args, by_origin=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.by_origin = bool(by_origin)
        self.records = []  # (kind, expected, realised)
        self._expected = None

    def propose(self, max_tokens):
        draft = super().propose(max_tokens)
        self._expected = None
        if self._pending is not None:
            length, origin, copying, _ = self._pending
            model = self.request_start if self._starting else self.acceptance  # the model it was chosen under
            expected = model.expected(length, origin, draft.size, copying)[draft.size]
            self._expected = (
                draft_kind(copying, length, draft.size, COPY_LENGTH, ORIGINS[origin] if self.by_origin else None),
                float(expected),
            )
        return draft

    def update(self, tokens):
        if self._expected is not None:
            tokens = np.asarray(tokens, dtype=np.int64).ravel()
            kind, expected = self._expected
            self.records.append((kind, expected, agreement(self._pending[3], tokens[:-1])))
            self._expected = None
        super().update(tokens)


class HindsightStart(AdaptiveProposer):
    """The adaptive policy, except that on each request's first ``first`` passes the draft length is the one that
    pays best given how many tokens of the policy's own continuation the truth accepts (a plain step included)."""

    def __init__(self, truth, first, curve, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.truth = np.asarray(truth, dtype=np.int64)
        self.first = int(first)
        self.curve = curve  # the CostCurve the hindsight length is chosen under

    def reset(self, tokens):
        super().reset(tokens)
        self.passes = 0

    def propose(self, max_tokens):
        draft = super().propose(max_tokens)
        self.passes += 1
        match = self.index.longest_match()
        k_cap = min(int(max_tokens), self.config.max_draft)
        if self.passes > self.first or match.length < self.config.min_match or k_cap <= 0:
            return draft
        end = self.source_end(match)  # the occurrence the policy drafted from
        longest = periodic_continuation(self.index, end, k_cap)
        pos = len(self.index)
        right = agreement(longest, self.truth[pos : pos + longest.size])
        ks = np.arange(right + 1)
        value = (1.0 + ks) / np.asarray(self.curve.at(ks), dtype=np.float64)
        value[[k for k in self.excluded if k <= right]] = -np.inf
        k = int(np.argmax(value))
        self.chosen[-1] = (pos, k)
        self._pending = (match.length, end < self.prompt_len, self.regime.copying, longest[:k]) if k else None
        return longest[:k]


class HindsightFactory(AdaptiveFactory):
    """Makes ``HindsightStart`` for each record replayed, the records' first drafts carried from one to the next as
    ``AdaptiveFactory`` carries them."""

    def __init__(self, first, curve, config, **kw):
        self.first, self.curve = first, curve
        super().__init__(config, **kw)

    def __call__(self, truth):
        return HindsightStart(truth, self.first, self.curve, self.config, start=self.request_start, **self.kw)


def calibration(outputs, make):
    """``{suite: {kind: [drafts, expected accepted, realised accepted]}}`` (sums), ``"all"`` included; ``make()``
    makes each record's probe, in run order."""
    table = defaultdict(lambda: defaultdict(lambda: [0, 0.0, 0]))
    for rec in outputs:
        probe = make()
        replay_one(probe, rec["tokens"], rec["prompt_len"])
        for kind, expected, realised in probe.records:
            for suite in (rec["suite"], "all"):
                row = table[suite][kind]
                row[0] += 1
                row[1] += expected
                row[2] += realised
    return table


def gap(data, cost, firsts=(1, 3), by_origin=False):
    """``(calibration table, {config: {suite: modelled speedup}})`` for one recorded run; the table's probes carry
    the records' first drafts from one to the next (``carried_starts``) as ``replay``'s ``AdaptiveFactory`` does,
    so that they draft as its "draftless" row."""
    config = AdaptiveConfig()  # the library's policy, as replay's "draftless" row
    excluded = tuple(data.get("inexact_drafts", ()))
    kw = {
        "cost": cost,
        "excluded": excluded,
        "text_classes": run_text_classes(data),
        "digit_tokens": run_digit_tokens(data),
    }
    start = carried_starts(config)
    table = calibration(data["outputs"], lambda: CalibrationProbe(config, start=start, by_origin=by_origin, **kw))
    configs = {"draftless": AdaptiveFactory(config, **kw)}
    for n in firsts:
        configs[f"hindsight length, first {n} passes"] = HindsightFactory(n, cost, config, **kw)
    configs["ceiling_recent"] = lambda truth: LookupCeilingProposer(truth, cost, "recent")
    configs["ceiling_any"] = lambda truth: LookupCeilingProposer(truth, cost, "any")
    speed = defaultdict(dict)
    for row in replay(data["outputs"], configs, cost):
        speed[row["config"]][row["suite"]] = row["est_speedup"]
    return table, dict(speed)


def markdown(table, speed, suites):
    lines = [
        "Calibration: drafts, and accepted tokens per draft expected by the acceptance model at the chosen "
        "length / realised.",
        "",
        "| suite | kind of draft | drafts | expected | realised |",
        "|---|---|---|---|---|",
    ]
    for suite in suites:
        for kind, (n, expected, realised) in sorted(table.get(suite, {}).items()):
            lines.append(f"| {suite} | {', '.join(kind)} | {n} | {expected / n:.2f} | {realised / n:.2f} |")
    lines += [
        "",
        "Modelled speedup over plain decoding.",
        "",
        "| config | " + " | ".join(suites) + " |",
        "|---|" + "---|" * len(suites),
    ]
    for name, by_suite in speed.items():
        lines.append(
            f"| {name} | " + " | ".join(f"{by_suite[s]:.2f}x" if s in by_suite else "-" for s in suites) + " |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.policy_gap", description=__doc__.splitlines()[0])
    parser.add_argument("--suite", help="comma-separated suites to report (default: every suite and all)")
    parser.add_argument("--first", default="1,3", help="comma-separated pass counts given the hindsight length")
    parser.add_argument(
        "--by-origin",
        action="store_true",
        help="split the calibration table by where the occurrence lies (generated, prompt, ...)",
    )
    args, data, cost = parse_run_arguments(parser, argv)
    try:
        firsts = tuple(int(x) for x in args.first.split(","))
    except ValueError:
        parser.error(f"--first must be comma-separated integers, got {args.first!r}")
    if not firsts or any(n < 1 for n in firsts):
        parser.error(f"--first must hold pass counts >= 1, got {args.first!r}")
    recorded = sorted({rec["suite"] for rec in data["outputs"]}) + ["all"]
    suites = recorded if args.suite is None else [s.strip() for s in args.suite.split(",") if s.strip()]
    unknown = sorted(set(suites) - set(recorded))
    if unknown or not suites:
        parser.error(f"--suite must name suites of the run ({', '.join(recorded)}), got {args.suite!r}")
    table, speed = gap(data, cost, firsts, args.by_origin)
    sys.stdout.write(markdown(table, speed, suites))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "source": str(args.run_json),
                    "calibration": [
                        {"suite": s, "kind": list(k), "drafts": n, "expected": e / n, "realised": r / n}
                        for s in suites
                        for k, (n, e, r) in sorted(table.get(s, {}).items())
                    ],
                    "speedup": {name: {s: v for s, v in by.items() if s in suites} for name, by in speed.items()},
                },
                indent=1,
            )
        )
    return table, speed


if __name__ == "__main__":
    main()

"""The evidence for the acceptance model's prior (``AdaptiveConfig.prior``, a tuple ``knob_evidence`` cannot set):
replay every recorded run with the prior changed in some cells and report, against the library's default, the
geometric mean gain in modelled speedup over every suite column of every run, the worst and best columns, and the
mean per model and suite (each run's pooled column, ``all``, among them).

    python -m experiments.prior_evidence RUN.json ... \\
        --variant "long=any/any/8-11=0.99" --variant "short=copying/prompt/2-4=0.8,0.85,0.92" --fitted other

A variant is ``NAME=CELLS``, ``CELLS`` one or more ``REGIME/ORIGIN/BUCKETS=RATES`` joined by ``;``: ``REGIME``
``writing``, ``copying`` or ``any``, ``ORIGIN`` one of ``acceptance_model.ORIGINS`` or ``any``, ``BUCKETS`` a
bucket of ``LENGTH_EDGES`` or a range ``i-j``, ``RATES`` one rate for all of them or one each. ``--fitted``
adds a variant whose every cell of the request's own text (generated, prompt, reflowed) starts from the rate
its judged draft positions were accepted at when the run's outputs were replayed at the default
(``--pseudo`` positions of the default prior added): fitted on the other model's runs (``other``), on the same
model's (``own``) or on both (``both``). Each run is replayed under its own curve, as ``benchmarks.replay`` does.
"""

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from tqdm import tqdm

from benchmarks.replay import AdaptiveFactory, recorded_inputs, replay
from draftless.lookup import AdaptiveConfig
from draftless.lookup.acceptance_model import CORPUS, DEFAULT_PRIOR, LENGTH_EDGES, ORIGINS, bucket
from draftless.lookup.adaptive import AdaptiveProposer

REGIMES = ("writing", "copying")


def parse_cells(text):
    """``[(regimes, origins, buckets, rates)]`` from a variant's ``CELLS`` (see the module doc)."""
    out = []
    for part in (p.strip() for p in text.split(";") if p.strip()):
        try:
            where, rates = part.split("=")
            regime, origin, span = where.split("/")
            low, _, high = span.partition("-")
            buckets = list(range(int(low), int(high or low) + 1))
            values = [float(r) for r in rates.split(",")]
        except ValueError:
            raise ValueError(f"a cell must be REGIME/ORIGIN/BUCKETS=RATES, got {part!r}") from None
        regimes = range(2) if regime == "any" else [REGIMES.index(regime)] if regime in REGIMES else None
        origins = range(len(ORIGINS)) if origin == "any" else [ORIGINS.index(origin)] if origin in ORIGINS else None
        if regimes is None or origins is None:
            raise ValueError(f"regime must be one of {REGIMES} or any, origin one of {ORIGINS} or any; got {part!r}")
        if len(values) == 1:
            values *= len(buckets)
        if (
            not buckets
            or buckets[0] < 0
            or buckets[-1] >= len(LENGTH_EDGES)
            or len(values) != len(buckets)
            or not all(0 < v < 1 for v in values)
        ):
            raise ValueError(
                f"buckets must lie in 0..{len(LENGTH_EDGES) - 1} with one rate in (0, 1) each, or one "
                f"for all; got {part!r}"
            )
        out.append((list(regimes), list(origins), buckets, values))
    if not out:
        raise ValueError(f"a variant needs at least one cell, got {text!r}")
    return out


def cell_table(cells):
    """The ``[regime, origin, bucket]`` prior of ``AcceptanceModel`` under the default, ``cells`` changed."""
    table = np.tile(np.asarray(DEFAULT_PRIOR, dtype=np.float64), (2, len(ORIGINS), 1))
    table[:, CORPUS] = AdaptiveConfig().corpus_prior
    for regimes, origins, buckets, values in cells:
        for r in regimes:
            for o in origins:
                table[r, o, buckets] = values
    return table


class CellPriorProposer(AdaptiveProposer):
    """The adaptive policy whose acceptance model starts each request from ``table`` (every cell its own rate);
    with ``evidence`` (``{"hits", "trials"}`` arrays of the table's shape), it adds each verification's judged
    positions there, as the acceptance model counts them."""

    def __init__(self, table, *args, evidence=None, **kwargs):
        self.table, self.evidence = table, evidence
        super().__init__(*args, **kwargs)

    def reset(self, tokens):
        super().reset(tokens)
        self.acceptance.prior = self.table.copy()
        if self.evidence is not None:
            observe = self.acceptance.observe

            def counted(length, origin, accepted, drafted, copying=True):
                if drafted > 0:
                    cell = (int(bool(copying)), int(origin))
                    judged = bucket(self.acceptance.judged_lengths(length, min(accepted + 1, drafted), copying))
                    np.add.at(self.evidence["trials"][cell], judged, 1.0)
                    np.add.at(self.evidence["hits"][cell], judged[:accepted], 1.0)
                observe(length, origin, accepted, drafted, copying)

            self.acceptance.observe = counted


def length_label(b):
    """The matched lengths of bucket ``b``: ``"4-5"``, ``"3"``, ``"64+"``."""
    if b == len(LENGTH_EDGES) - 1:
        return f"{LENGTH_EDGES[b]}+"
    low, high = int(LENGTH_EDGES[b]), int(LENGTH_EDGES[b + 1]) - 1
    return f"{low}" if low == high else f"{low}-{high}"


def speedups(data, cost, makers):
    """``{name: {suite: modelled speedup}}``."""
    out = defaultdict(dict)
    for row in replay(data["outputs"], makers, cost):
        out[row["config"]][row["suite"]] = row["est_speedup"]
    return out


def model_of(data, path):
    return str(data.get("model") or Path(path).stem.split("_")[0])


def gather_evidence(paths):
    """``{model: {"hits", "trials"}}``: judged draft positions per cell, replayed at the default."""
    evidence = {}
    default = cell_table([])
    for path in tqdm(paths, desc="evidence", file=sys.stderr):
        data, cost, kw = recorded_inputs(path)
        ev = evidence.setdefault(
            model_of(data, path), {"hits": np.zeros_like(default), "trials": np.zeros_like(default)}
        )
        speedups(data, cost, {"d": lambda truth: CellPriorProposer(default, AdaptiveConfig(), evidence=ev, **kw)})
    return evidence


def fitted_table(evidence, models, pseudo):
    """The default table, each cell of the request's own text the rate its evidence from ``models`` shows, with
    ``pseudo`` positions at the default rate, within [0.02, 0.98]."""
    table = cell_table([])
    hits = sum((evidence[m]["hits"] for m in models), np.zeros_like(table))
    trials = sum((evidence[m]["trials"] for m in models), np.zeros_like(table))
    own = [o for o in range(len(ORIGINS)) if o != CORPUS]
    weight = trials[:, own] + pseudo
    fitted = (hits[:, own] + pseudo * table[:, own]) / np.where(weight > 0, weight, 1.0)
    table[:, own] = np.where(weight > 0, np.clip(fitted, 0.02, 0.98), table[:, own])  # no evidence: the default
    return table


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.prior_evidence", description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="JSON files written by benchmarks.run --json")
    parser.add_argument("--variant", action="append", default=[], help="NAME=CELLS (see the module doc)")
    parser.add_argument("--fitted", choices=("other", "own", "both"), help="add the prior fitted on recorded runs")
    parser.add_argument("--pseudo", type=float, default=20.0, help="default-prior positions added to a fitted cell")
    args = parser.parse_args(argv)
    try:
        variants = {}
        for text in args.variant:
            name, sep, cells = text.partition("=")
            if not sep or not name:
                raise ValueError(f"a variant must be NAME=CELLS, got {text!r}")
            variants[name] = cell_table(parse_cells(cells))
        if not variants and not args.fitted:
            raise ValueError("give at least one --variant or --fitted")
        if not args.pseudo >= 0:
            raise ValueError(f"--pseudo must be >= 0, got {args.pseudo}")
    except ValueError as err:
        parser.error(str(err))
    evidence = gather_evidence(args.runs) if args.fitted else None
    names = list(variants) + ([f"fitted ({args.fitted})"] if args.fitted else [])
    gains = defaultdict(list)
    by_model = defaultdict(list)
    for path in tqdm(args.runs, desc="runs", file=sys.stderr):
        data, cost, kw = recorded_inputs(path)
        model = model_of(data, path)
        tables = dict(variants)
        if args.fitted:
            fit_on = {"own": [model], "both": list(evidence), "other": [m for m in evidence if m != model] or [model]}[
                args.fitted
            ]
            tables[names[-1]] = fitted_table(evidence, fit_on, args.pseudo)
        makers = {"default": AdaptiveFactory(AdaptiveConfig(), **kw)}
        for name, table in tables.items():
            makers[name] = lambda truth, table=table: CellPriorProposer(table, AdaptiveConfig(), **kw)
        result = speedups(data, cost, makers)
        for name in names:
            for suite, speed in result[name].items():
                gain = speed / result["default"][suite]
                if suite != "all":  # the run's pooled column is reported per model only
                    gains[name].append((gain, f"{path.stem}: {suite}"))
                by_model[(name, model, suite)].append(gain)
    lines = [
        f"Against the default prior, over {len(gains[names[0]])} suite columns of {len(args.runs)} runs: "
        "geometric mean gain in modelled speedup, worst and best column.",
        "",
    ]
    for name in names:
        values = np.array([g for g, _ in gains[name]])
        worst, best = min(gains[name]), max(gains[name])
        lines.append(
            f"- {name}: {100 * (np.exp(np.log(values).mean()) - 1):+.2f} %, worst {100 * (worst[0] - 1):+.1f} % "
            f"({worst[1]}), best {100 * (best[0] - 1):+.1f} % ({best[1]})"
        )
        per = [(m, s, 100 * (np.exp(np.mean(np.log(v))) - 1)) for (n, m, s), v in sorted(by_model.items()) if n == name]
        lines.append("  " + "; ".join(f"{m} {s} {g:+.1f} %" for m, s, g in per))
    if evidence is not None:
        lines += [
            "",
            "Judged draft positions kept, replayed at the default, every model pooled (positions):",
            "",
            "| regime, origin | " + " | ".join(length_label(b) for b in range(len(LENGTH_EDGES))) + " |",
            "|---|" + "---|" * len(LENGTH_EDGES),
        ]
        hits = sum(ev["hits"] for ev in evidence.values())
        trials = sum(ev["trials"] for ev in evidence.values())
        for r, regime in enumerate(REGIMES):
            for o, origin in enumerate(ORIGINS):
                if o != CORPUS and trials[r, o].sum():
                    lines.append(
                        f"| {regime}, {origin} | "
                        + " | ".join(f"{h / t:.2f} ({int(t)})" if t else "-" for h, t in zip(hits[r, o], trials[r, o]))
                        + " |"
                    )
        lines.append("| the default prior | " + " | ".join(f"{p:.2f}" for p in DEFAULT_PRIOR) + " |")
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

"""The evidence behind the learned occurrence rule's two knobs: replay recorded runs with the rule at a grid of
``occurrence_memory`` x ``occurrence_margin`` and report, against ``occurrence="frequent"``, the geometric mean
gain in modelled speedup over every suite column of every run, and the worst column.

    python -m experiments.occurrence_evidence RUN.json [RUN.json ...] [--memory 0.6,0.7,0.8] [--margin 0,0.5,1,2]

Each run is replayed under its own calibrated cost curve, with the draft lengths its device did not verify
exactly left out, as ``benchmarks.replay`` does.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

from benchmarks.recorded_run import recorded_cost, run_digit_tokens, run_text_classes
from benchmarks.replay import AdaptiveFactory, replay
from draftless.lookup import AdaptiveConfig


def columns(path, configs):
    """``{config name: {suite: modelled speedup}}`` for one recorded run."""
    data = json.loads(Path(path).read_text())
    cost = recorded_cost(data)
    excluded = tuple(data.get("inexact_drafts", ()))
    kw = {
        "cost": cost,
        "excluded": excluded,
        "text_classes": run_text_classes(data),
        "digit_tokens": run_digit_tokens(data),
    }
    factories = {name: AdaptiveFactory(cfg, **kw) for name, cfg in configs.items()}
    out = {}
    for row in replay(data["outputs"], factories, cost):
        out.setdefault(row["config"], {})[row["suite"]] = row["est_speedup"]
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m experiments.occurrence_evidence", description=__doc__.splitlines()[0]
    )
    parser.add_argument("runs", nargs="+", type=Path, help="JSON files written by benchmarks.run --json")
    parser.add_argument("--memory", default="0.6,0.7,0.8")
    parser.add_argument("--margin", default="0,0.5,1,2")
    args = parser.parse_args(argv)
    try:
        memories = [float(x) for x in args.memory.split(",")]
        margins = [float(x) for x in args.margin.split(",")]
        configs = {"frequent": AdaptiveConfig(occurrence="frequent")}
        for m in memories:
            for g in margins:
                configs[(m, g)] = AdaptiveConfig(occurrence="learned", occurrence_memory=m, occurrence_margin=g)
    except ValueError as err:
        parser.error(str(err))
    gains = {name: [] for name in configs}
    worst = {name: (np.inf, "") for name in configs}
    for path in tqdm(args.runs, desc="runs", file=sys.stderr):
        result = columns(path, configs)
        for name in configs:
            for suite, speedup in result[name].items():
                gain = speedup / result["frequent"][suite]
                gains[name].append(gain)
                worst[name] = min(worst[name], (gain, f"{path.stem}: {suite}"))
    lines = [
        f'Against occurrence="frequent", over {len(gains["frequent"])} suite columns of {len(args.runs)} runs: '
        "geometric mean gain in modelled speedup, and the worst column.",
        "",
        "| memory | " + " | ".join(f"margin {g:g}" for g in margins) + " |",
        "|---|" + "---|" * len(margins),
    ]
    for m in memories:
        cells = []
        for g in margins:
            mean = float(np.exp(np.mean(np.log(gains[(m, g)])))) - 1
            cells.append(f"{100 * mean:+.1f} %, worst {100 * (worst[(m, g)][0] - 1):+.1f} % ({worst[(m, g)][1]})")
        lines.append(f"| {m:g} | " + " | ".join(cells) + " |")
    sys.stdout.write("\n".join(lines) + "\n")
    return gains


if __name__ == "__main__":
    main()

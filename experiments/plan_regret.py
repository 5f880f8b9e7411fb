"""How much slower the linear layers run under plans a probe chose than under the fastest plans, for several ways
of timing the probe, measured on the real model in one process.

Every form of every weight shape (``linear_plan._raced``) is first timed carefully: over a large probe
(``--truth-mib``, whole, so nothing stays in cache), best of ``--truth-rounds`` interleaved rounds, once before
and once after the calibrations, keeping the faster. Each setting then chooses the plans ``--trials`` times,
interleaved with the others, as the library does. A plan's cost at a row count is the careful time of the form it
chooses there, scaled from the probe to all of the model's layers of that shape and summed over the shapes; its
regret is that cost summed over the row counts 1..8, 16, 32 and 64, against the fastest form's at each.

A setting is ``MIB:FIRST:REPEATS:LATER[:OUT_OF_RACE[:WIDE_CLEAR_GAIN[:RETIME]]]``: a probe of ``MIB`` MiB (the
library's is ``weight_probe.probe_bytes``), the first round over ``FIRST`` parts of it, ``REPEATS`` rounds in all,
the later ones over ``LATER`` parts (``linear_plan.measure_plan``), forms that far behind after the first round
out of the race (``linear_plan.OUT_OF_RACE``), and above 8 rows another form than the plain product taken where
it takes less than that fraction of its time (``linear_plan.WIDE_CLEAR_GAIN``), and with ``RETIME`` 1 the forms
behind each departure from the plain product timed once more (``linear_plan.RETIME_DEPARTURES``; 0: not); the
library's where not given.
The regret is also given in milliseconds at 1-8 rows and above. ``64:1:2:1:1.25`` is the library's (on a
CPU with a 32 MiB cache), ``64:6:2:1:1.5`` a cheaper first round, measured and left out.

    python -m experiments.plan_regret --model gemma-3-270m --settings 64:1:2:1:1.25,64:6:2:1:1.5 --trials 12
"""

import argparse
import contextlib
import functools
import sys
import time

import torch
from tqdm import tqdm

from draftless.integration import calibration, load_model
from draftless.integration.fastpass import linear_plan, weight_probe

# 1 to 8 rows, then both edges of each wide range (9 and 16, 17 and 32, 33 and 64), where plans choose
ROWS = tuple(linear_plan.row_counts(linear_plan.MAX_PADDED_ROWS, linear_plan.WIDE_ROWS))


def parse_setting(text):
    """``(mib, first_parts, repeats, later_parts, out_of_race, wide_clear_gain, retime)`` from
    ``MIB:FIRST:REPEATS:LATER[:OUT_OF_RACE[:WIDE_CLEAR_GAIN[:RETIME]]]`` (the library's ``linear_plan.OUT_OF_RACE``,
    ``linear_plan.WIDE_CLEAR_GAIN`` and ``linear_plan.RETIME_DEPARTURES`` where not given: None; ``RETIME`` 0 or
    1)."""
    fields = text.split(":")
    try:
        values = tuple(int(x) for x in fields[:4]) + tuple(float(x) for x in fields[4:6])
    except ValueError:
        values = ()
    if len(fields) == 7 and len(values) == 6:
        values = values + (fields[6] == "1",) if fields[6] in ("0", "1") else ()
    values += (None,) * (7 - len(values)) if 4 <= len(values) <= 7 else ()
    if (
        len(values) != 7
        or len(fields) > 7
        or min(values[:4]) < 1
        or (values[4] is not None and not values[4] >= 1)
        or (values[5] is not None and not 0 < values[5] <= 1)
    ):
        raise ValueError(
            f"a setting is MIB:FIRST:REPEATS:LATER[:OUT_OF_RACE[:WIDE_CLEAR_GAIN[:RETIME]]], four "
            f"positive integers, a ratio of at least 1, one in (0, 1] and 0 or 1, got {text!r}"
        )
    return values


@contextlib.contextmanager
def race_rules(out_of_race=None, wide_clear_gain=None, retime=None):
    """Within the block, ``linear_plan.OUT_OF_RACE``, ``linear_plan.WIDE_CLEAR_GAIN`` and
    ``linear_plan.RETIME_DEPARTURES`` are these (where not None)."""
    saved = linear_plan.OUT_OF_RACE, linear_plan.WIDE_CLEAR_GAIN, linear_plan.RETIME_DEPARTURES
    linear_plan.OUT_OF_RACE = saved[0] if out_of_race is None else out_of_race
    linear_plan.WIDE_CLEAR_GAIN = saved[1] if wide_clear_gain is None else wide_clear_gain
    linear_plan.RETIME_DEPARTURES = saved[2] if retime is None else retime
    try:
        yield
    finally:
        linear_plan.OUT_OF_RACE, linear_plan.WIDE_CLEAR_GAIN, linear_plan.RETIME_DEPARTURES = saved


@torch.no_grad()
def careful_seconds(groups, mib, rounds):
    """``{shape: {(rows, form): seconds}}``: each raced form over a whole ``mib`` MiB probe, best of ``rounds``,
    scaled to all of the model's layers of that shape."""
    table = {}
    for shape, modules in groups.items():
        weight = modules[0].weight
        probed = weight_probe.probe_weights(modules, mib << 20)
        scale = len(modules) * weight.numel() * weight.element_size() / weight_probe.part_bytes(probed)
        inputs = linear_plan.row_inputs(weight, ROWS)

        def timed(rows, form):
            return linear_plan.time_products(probed, inputs[rows], rows, form)

        raced = linear_plan._raced(linear_plan.forms_for(weight), linear_plan.MAX_PADDED_ROWS, linear_plan.WIDE_ROWS)
        best = linear_plan.fastest_of_rounds([functools.partial(timed, *rf) for rf in raced], rounds)
        table[shape] = {rf: s * scale for rf, s in zip(raced, best)}
    return table


def plan_cost(plans, table):
    """Seconds of the linear layers at each of ``ROWS`` under ``plans`` (``{shape: LinearPlan}``)."""
    return [sum(table[shape][plans[shape].choice(rows)] for shape in table) for rows in ROWS]


def fastest_cost(table):
    """Seconds of the linear layers at each of ``ROWS`` under the fastest form for each shape and row count."""

    def best(forms, rows):
        top = linear_plan.MAX_PADDED_ROWS
        return min(
            s
            for (r, f), s in forms.items()
            if (rows <= r <= top if rows <= top else r == rows) and linear_plan.serves((r, f), rows)
        )

    return [sum(best(table[shape], rows) for shape in table) for rows in ROWS]


def compare(model, settings, trials, truth_mib=128, truth_rounds=5, progress=None, greedy=False):
    """Markdown lines: per setting, the seconds its plans took and their regret over ``trials`` calibrations; with
    ``greedy``, of the plans a greedy run reads (the output layer's left out where it is kept apart:
    ``calibration.output_layer_apart``)."""
    apart = calibration.output_layer_apart(model) if greedy else None
    groups = {shape: modules for shape, modules in linear_plan.plain_linears(model).items() if shape != apart}
    before = careful_seconds(groups, truth_mib, truth_rounds)
    chosen = {s: [] for s in settings}
    for _ in range(trials):
        for setting in settings:
            mib, first, repeats, later, ratio, wide_gain, retime = parse_setting(setting)
            with race_rules(ratio, wide_gain, retime):
                t0 = time.perf_counter()
                plans = {
                    shape: linear_plan.measure_plan(modules, repeats=repeats, nbytes=mib << 20, parts=(first, later))
                    for shape, modules in groups.items()
                }
            chosen[setting].append((time.perf_counter() - t0, plans))
            if progress is not None:
                progress()
    after = careful_seconds(groups, truth_mib, truth_rounds)
    table = {shape: {rf: min(before[shape][rf], after[shape][rf]) for rf in before[shape]} for shape in before}
    fastest_rows = fastest_cost(table)
    fastest = sum(fastest_rows)
    narrow = linear_plan.MAX_PADDED_ROWS  # the padded row counts come first in ROWS
    drift = sum(map(sum, (t.values() for t in after.values()))) / sum(map(sum, (t.values() for t in before.values())))
    lines = [
        f"careful timings over {truth_mib} MiB, best of {truth_rounds}: the fastest plans' linear layers "
        f"{1e3 * fastest:.1f} ms summed over {len(ROWS)} row counts; the careful timings after the "
        f"calibrations / before: {drift:.3f}",
        "",
        "| setting | plans (s), mean | regret (%), mean | worst | at 1-8 rows (ms) | above (ms) | "
        "each calibration's (%) |",
        "|---|---|---|---|---|---|---|",
    ]
    for setting in settings:
        costs = [plan_cost(plans, table) for _, plans in chosen[setting]]
        regrets = [100 * (sum(c) / fastest - 1) for c in costs]
        below = 1e3 * sum(sum(c[:narrow]) - sum(fastest_rows[:narrow]) for c in costs) / trials
        above = 1e3 * sum(sum(c[narrow:]) - sum(fastest_rows[narrow:]) for c in costs) / trials
        seconds = sum(s for s, _ in chosen[setting]) / trials
        lines.append(
            f"| {setting} | {seconds:.2f} | {sum(regrets) / trials:.2f} | {max(regrets):.2f} | "
            f"{below:.2f} | {above:.2f} | " + ", ".join(f"{r:.1f}" for r in regrets) + " |"
        )
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.plan_regret", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument(
        "--settings",
        default="64:1:2:1:1.25,64:6:2:1:1.5",
        help="MIB:FIRST:REPEATS:LATER[:OUT_OF_RACE[:WIDE_CLEAR_GAIN[:RETIME]]], comma-separated",
    )
    parser.add_argument("--trials", type=int, default=12, help="calibrations per setting")
    parser.add_argument("--truth-mib", type=int, default=128)
    parser.add_argument("--truth-rounds", type=int, default=5)
    parser.add_argument(
        "--greedy",
        action="store_true",
        help="only the plans a greedy run reads: the output layer's left out where a screen serves it",
    )
    args = parser.parse_args(argv)
    settings = [s for s in args.settings.split(",") if s]
    try:
        for setting in settings:
            parse_setting(setting)
    except ValueError as error:
        parser.error(str(error))
    if not settings or min(args.trials, args.truth_mib, args.truth_rounds) < 1:
        parser.error("--settings must name one and --trials, --truth-mib and --truth-rounds be at least 1")
    model, _ = load_model(args.model)
    with tqdm(total=args.trials * len(settings), desc="calibrations") as bar:
        lines = compare(model, settings, args.trials, args.truth_mib, args.truth_rounds, bar.update, args.greedy)
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

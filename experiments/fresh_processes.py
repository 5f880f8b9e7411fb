"""Timings taken each in a fresh process (what a user's first run, or each new process, meets), and their table."""

import json
import statistics
import subprocess


def run_fresh(command, repeats, env=None):
    """The JSON object each of ``repeats`` runs of ``command`` (a ``python -m ... --once`` command line) prints as
    its last line of output, each run with the environment ``env`` (this process's where None); a ``RuntimeError``
    with the run's standard error where one fails."""
    runs = []
    for _ in range(repeats):
        done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
        if done.returncode:
            raise RuntimeError(f"{' '.join(command)} failed (exit {done.returncode}):\n{done.stderr}")
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return runs


def median_table(title, runs):
    """A markdown table: one row per part of the runs (``{part: seconds}``, the first run's parts in order), one
    column per run and their median."""
    lines = [
        title,
        "",
        "| part | " + " | ".join(f"run {i + 1}" for i in range(len(runs))) + " | median |",
        "|---|" + "---|" * (len(runs) + 1),
    ]
    for part in runs[0]:
        values = [run.get(part, float("nan")) for run in runs]
        lines.append(f"| {part} | " + " | ".join(f"{v:.2f}" for v in values) + f" | {statistics.median(values):.2f} |")
    return "\n".join(lines) + "\n"

"""Model-free replay: feed the greedy outputs recorded by ``benchmarks.run`` through drafting policies.

    python -m benchmarks.replay RUN.json [--grid] [--history] [--cost run|cpu|near_flat] [--json PATH]

No model runs: the recorded continuation is the truth, so each step accepts the longest draft prefix that
equals it, then one bonus token, exactly as greedy verification would. Per drafting configuration and suite
it reports passes, mean accepted length (tokens per pass, bonus included), acceptance rate per draft
position, the drafting cost per step, and a speedup estimate: tokens produced per unit of modelled time,
with each pass of k draft tokens costing c(k) of a cost curve (the one the run calibrated, when its JSON
holds one; otherwise Gemma 3 270M on a 2-core CPU),
relative to plain decoding at c(0) per token. It takes seconds, which is how drafting defaults get chosen.
The default policy drafts re-flowed and stepped copies as the loop did, with the token texts and the digits' tokens
of the run's model's tokenizer (``recorded_run.run_text_classes`` and ``run_digit_tokens``: a bundled model's,
converted on first use like its weights, or a local directory's).
``--cost`` replays the same outputs under another curve: ``cpu`` (Gemma 3 270M on a 2-core CPU) or
``near_flat`` (an accelerator's shape, where a longer pass costs little more), so that a default chosen on
this CPU can be checked against the flat curve the policy must also serve. ``--history`` adds the default
policy drafting also from a ``ReferenceCorpus`` of the records replayed before, in the run's order: their
outputs (``draftless_history``, as ``benchmarks.run --methods draftless_history`` measures it) or their
prompts and outputs (``draftless_history_requests``).
"""

import argparse
import itertools
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from draftless.lookup import DraftConfig, ReferenceCorpus, SuffixProposer, carried_starts
from draftless.lookup.acceptance_model import DEFAULT_PRIOR
from draftless.lookup.adaptive import CPU_SMALL_MODEL, AdaptiveConfig, AdaptiveProposer
from draftless.lookup.cost_model import CostCurve, head_products
from draftless.lookup.occurrence import agreement

from .lookup_ceiling import LookupCeilingProposer
from .oracle import ORACLE_KS, OracleProposer
from .peer_rules import NgramRule, PromptLookupRule, SuffixDecodingRule
from .peer_rules_retrieval import LlamaCppLookupRule, RestRule, SamDecodingRule
from .recorded_run import recorded_cost, run_digit_tokens, run_text_classes

PRIOR_NAMES = {
    DEFAULT_PRIOR: "fitted",
    (0.5,) * len(DEFAULT_PRIOR): "flat0.5",
    (0.8,) * len(DEFAULT_PRIOR): "flat0.8",
    tuple(min(p, 0.9) for p in DEFAULT_PRIOR): "fitted_cap0.9",
    tuple(max(p, 0.995) if i >= 7 else p for i, p in enumerate(DEFAULT_PRIOR)): "fitted_cap0.995",
}
# c(k)/c(0) of a device far from saturation, as on a GPU serving one request: a 64-token pass at 1.4 plain
# steps. A stand-in, not a measurement (a GPU pass for a model this small is flatter still).
NEAR_FLAT = CostCurve((0, 1, 2, 4, 8, 16, 32, 64), (1.0, 1.02, 1.03, 1.04, 1.06, 1.1, 1.2, 1.4))
ADAPTIVE_KNOBS = {
    "occurrence": ("frequent", "recent", "first"),
    "min_match": (1, 2, 3),
    "max_draft": (16, 32, 64, 128),
    "prior_strength": (1.0, 2.0, 8.0),
    "prior": tuple(PRIOR_NAMES),
    "copy_share": (0.0, 0.3, 0.4, 0.5, 1.0),
    "stepped_copy": (False, True),
}


class AdaptiveFactory:
    """Makes the adaptive policy under ``config`` for each record replayed, the records' first drafts carried
    from one to the next as the library carries them within a process (``carried_starts``, started afresh by
    ``start``, which ``replay`` calls before the first record)."""

    def __init__(self, config, **kw):
        self.config, self.kw = config, kw
        self.start()

    def start(self):
        self.request_start = carried_starts(self.config)

    def __call__(self, truth):
        return AdaptiveProposer(self.config, start=self.request_start, **self.kw)


class HistoryFactory:
    """Makes the default policy over a corpus of the records replayed before this one (``replay`` calls ``start``
    before the first record and ``done`` after each): their outputs, or with ``prompts`` whole requests."""

    def __init__(self, cost, excluded, prompts=False, text_classes=None, digit_tokens=None):
        self.cost, self.excluded, self.prompts, self.text_classes = cost, excluded, prompts, text_classes
        self.digit_tokens = digit_tokens
        self.start()

    def start(self):
        self.corpus = ReferenceCorpus()
        self.request_start = carried_starts(AdaptiveConfig())  # as the library's default

    def done(self, rec):
        self.corpus.add(rec["tokens"][0 if self.prompts else rec["prompt_len"] :])

    def __call__(self, truth):
        return AdaptiveProposer(
            AdaptiveConfig(),
            cost=self.cost,
            excluded=self.excluded,
            corpus=self.corpus,
            text_classes=self.text_classes,
            start=self.request_start,
            digit_tokens=self.digit_tokens,
        )


def configurations(grid=False, cost=CPU_SMALL_MODEL, excluded=(), history=False, text_classes=None, digit_tokens=None):
    """Named proposer factories (each takes the true sequence, which only the oracle and the lookup ceilings
    read): the library's default, the fixed-length suffix proposer, the peers' rules, the oracle and the
    hindsight ceilings of lookup drafting (``lookup_ceiling``), plus with ``grid`` a grid of suffix and
    adaptive settings. ``excluded``: draft lengths the run's device did not verify exactly, which the adaptive
    policy never chose there (a run's ``inexact_drafts``). ``history``: the ``HistoryFactory`` configurations too.
    ``text_classes`` (``run_text_classes``) and ``digit_tokens`` (``run_digit_tokens``): the adaptive configurations
    draft re-flowed and stepped copies as the loop does."""
    tokens = {"text_classes": text_classes, "digit_tokens": digit_tokens}
    configs = {
        "draftless": AdaptiveFactory(AdaptiveConfig(), cost=cost, excluded=excluded, **tokens),
        "suffix_fixed": lambda truth: SuffixProposer(DraftConfig()),
        "rule_pld": lambda truth: PromptLookupRule(),
        "rule_ngram32": lambda truth: NgramRule(),
        "rule_suffix": lambda truth: SuffixDecodingRule(),
        "rule_sam": lambda truth: SamDecodingRule(),
        "rule_rest": lambda truth: RestRule(),
        "rule_llamacpp": lambda truth: LlamaCppLookupRule(),
        **{f"oracle_k{k}": lambda truth, k=k: OracleProposer(truth, k) for k in ORACLE_KS},
        "ceiling_recent": lambda truth: LookupCeilingProposer(truth, cost, "recent"),
        "ceiling_any": lambda truth: LookupCeilingProposer(truth, cost, "any"),
    }
    if history:
        configs["draftless_history"] = HistoryFactory(cost, excluded, **tokens)
        configs["draftless_history_requests"] = HistoryFactory(cost, excluded, prompts=True, **tokens)
    if grid:
        for occurrence, max_draft, min_match in itertools.product(
            ("recent", "first", "frequent"), (8, 16, 32), (1, 2, 3)
        ):
            cfg = DraftConfig(min_match=min_match, max_draft=max_draft, occurrence=occurrence)
            configs[f"suffix_{occurrence}_k{max_draft}_m{min_match}"] = lambda truth, cfg=cfg: SuffixProposer(cfg)
        for knob, values in ADAPTIVE_KNOBS.items():  # one knob at a time away from the default
            for value in values:
                cfg = AdaptiveConfig(**{knob: value})
                label = value if knob != "prior" else PRIOR_NAMES[value]
                configs[f"adaptive[{knob}={label}]"] = AdaptiveFactory(cfg, cost=cost, excluded=excluded, **tokens)
    return configs


def replay_one(proposer, tokens, prompt_len, max_new_tokens=None, pass_seconds=None, head_rows=None):
    """Replay one recorded sequence; returns (passes, accepted per pass list, drafted per pass, seconds).
    ``head_rows``, a list, gets each pass's output-layer products (``head_products``: staged where the proposer
    asked, by its ``first_rows``, as the loop stages them).
    With ``max_new_tokens`` (the run's), each draft is capped by the token budget the loop had, rather than by
    the recorded tokens left, which differ when the output stopped early at EOS. ``pass_seconds``: the
    seconds the loop told the proposer each pass took (a run's ``pass_seconds``), or a callable of the draft
    length; told to its ``record_pass`` as the loop does, between the pass and ``update``."""
    tokens = np.asarray(tokens, dtype=np.int64)
    pos = prompt_len + 1  # the prefill's token is not drafted
    if pos >= tokens.size:
        return 0, [], [], 0.0
    spent = 0.0
    t0 = time.perf_counter()
    proposer.reset(tokens[:pos])
    spent += time.perf_counter() - t0
    accepted, drafted = [], []
    while pos < tokens.size:
        t0 = time.perf_counter()
        left = tokens.size if max_new_tokens is None else prompt_len + max_new_tokens
        draft = np.asarray(proposer.propose(left - pos - 1), dtype=np.int64)
        spent += time.perf_counter() - t0
        # a draft that runs past the recorded end (the output stopped at EOS inside it) keeps the recorded tokens
        # only, the last of them counting as the pass's own token, as the loop's stats count it
        n = min(agreement(draft, tokens[pos : pos + draft.size]), tokens.size - pos - 1)
        accepted.append(n)
        drafted.append(int(draft.size))
        new = tokens[pos : pos + n + 1]
        pos += new.size
        first_rows = getattr(proposer, "first_rows", None) if draft.size else None
        products = head_products(int(draft.size), first_rows, n)
        if head_rows is not None:
            head_rows.append(products)
        staged = () if first_rows is None else (products,)  # told as the loop tells it: only for a staged pass
        record = getattr(proposer, "record_pass", None)  # the peers' rules learn nothing from time
        if record is not None and callable(pass_seconds):
            record(int(draft.size), float(pass_seconds(draft.size, *staged)), *staged)
        elif record is not None and pass_seconds is not None and len(accepted) <= len(pass_seconds):
            record(int(draft.size), float(pass_seconds[len(accepted) - 1]), *staged)  # past them: diverged
        t0 = time.perf_counter()
        proposer.update(new)
        spent += time.perf_counter() - t0
    return len(accepted), accepted, drafted, spent


def replay(outputs, configs, cost=CPU_SMALL_MODEL, told=None):
    """Rows of per-suite figures for each named proposer factory in ``configs`` replayed on ``outputs``, every
    pass charged at ``cost``; ``told``: a callable of the draft length giving the seconds each pass is told
    to take (``replay_one``'s ``pass_seconds``), for a policy that learns its curve's shape."""
    rows = []
    for make in configs.values():  # load compiled kernels before anything is timed
        replay_one(make(np.array([1, 2, 3, 1, 2, 3, 1, 2])), [1, 2, 3, 1, 2, 3, 1, 2], 3)
    for name, make in configs.items():
        per_suite = defaultdict(
            lambda: {
                "passes": 0,
                "accepted": 0,
                "drafted": 0,
                "seconds": 0.0,
                "model_s": 0.0,
                "hits": defaultdict(int),
                "tries": defaultdict(int),
            }
        )
        getattr(make, "start", lambda: None)()
        for rec in outputs:
            products = []
            passes, accepted, drafted, seconds = replay_one(
                make(rec["tokens"]), rec["tokens"], rec["prompt_len"], pass_seconds=told, head_rows=products
            )
            getattr(make, "done", lambda rec: None)(rec)
            for suite in (rec["suite"], "all"):
                agg = per_suite[suite]
                agg["passes"] += passes
                agg["accepted"] += sum(accepted)
                agg["drafted"] += sum(drafted)
                agg["seconds"] += seconds
                agg["model_s"] += sum(cost.staged_at(d, rows) for d, rows in zip(drafted, products))
                for a, d in zip(accepted, drafted):
                    for i in range(d):
                        agg["tries"][i] += 1
                        agg["hits"][i] += i < a
        for suite, agg in per_suite.items():
            passes = max(1, agg["passes"])
            positions = sorted(agg["tries"])[:32]
            rows.append(
                {
                    "config": name,
                    "suite": suite,
                    "passes": agg["passes"],
                    "mean_accepted": round((agg["accepted"] + agg["passes"]) / passes, 3),
                    "acceptance_rate": round(agg["accepted"] / agg["drafted"], 3) if agg["drafted"] else 0.0,
                    "accept_per_position": [round(agg["hits"][i] / agg["tries"][i], 3) for i in positions],
                    "draft_us_per_step": round(agg["seconds"] / passes * 1e6, 2),
                    "est_speedup": round((agg["accepted"] + agg["passes"]) * cost.at(0) / agg["model_s"], 3)
                    if agg["model_s"]
                    else 1.0,
                }
            )
    return rows


def recorded_inputs(path):
    """``(run, cost, policy keywords)`` of the run recorded at ``path``: its cost curve, and what an
    ``AdaptiveFactory`` needs to draft as it did (the lengths its device did not verify exactly left out, its
    tokenizer's texts and digits)."""
    data = json.loads(Path(path).read_text())
    cost = recorded_cost(data)
    kw = {
        "cost": cost,
        "excluded": tuple(data.get("inexact_drafts", ())),
        "text_classes": run_text_classes(data),
        "digit_tokens": run_digit_tokens(data),
    }
    return data, cost, kw


def suite_speedups(path, configs):
    """``{config name: {suite: modelled speedup}}`` for the run recorded at ``path``, replayed under its own cost
    curve with each of ``configs`` (``{name: AdaptiveConfig}``)."""
    data, cost, kw = recorded_inputs(path)
    factories = {name: AdaptiveFactory(cfg, **kw) for name, cfg in configs.items()}
    out = {}
    for row in replay(data["outputs"], factories, cost):
        out.setdefault(row["config"], {})[row["suite"]] = row["est_speedup"]
    return out


def markdown(rows):
    suites = sorted({r["suite"] for r in rows}, key=lambda s: (s == "all", s))
    by = {(r["config"], r["suite"]): r for r in rows}
    configs = list(dict.fromkeys(r["config"] for r in rows))
    head = "| config | " + " | ".join(suites) + " | draft us/step |\n|---|" + "---|" * (len(suites) + 1) + "\n"

    def cell(c, s):
        r = by.get((c, s))
        return "-" if r is None else f"{r['mean_accepted']:.2f} ({r['est_speedup']:.2f}x)"

    lines = [
        f"| {c} | " + " | ".join(cell(c, s) for s in suites) + f" | {by[(c, 'all')]['draft_us_per_step']:.1f} |"
        for c in configs
    ]
    return (
        "Mean accepted length (tokens per pass, bonus included) and, in brackets, the modelled speedup over "
        "plain decoding, by suite.\n\n" + head + "\n".join(lines) + "\n"
    )


def parse_run_arguments(parser, argv):
    """Add the arguments every replay tool takes (a recorded run, ``--cost``, ``--json``) to ``parser``, parse
    ``argv`` and return ``(args, the run's data, the cost curve chosen)``."""
    parser.add_argument("run_json", type=Path, help="a JSON file written by benchmarks.run --json")
    parser.add_argument(
        "--cost",
        choices=("run", "cpu", "near_flat"),
        default="run",
        help="cost curve: the run's calibrated one (the default; the CPU stand-in for a run that "
        "recorded none), the CPU stand-in, or a near-flat accelerator stand-in",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    data = json.loads(args.run_json.read_text())
    if "outputs" not in data:
        parser.error(f"{args.run_json} has no recorded outputs (write it with benchmarks.run --json)")
    cost = NEAR_FLAT if args.cost == "near_flat" else CPU_SMALL_MODEL if args.cost == "cpu" else recorded_cost(data)
    return args, data, cost


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.replay", description=__doc__.splitlines()[0])
    parser.add_argument("--grid", action="store_true", help="also replay a grid of suffix-proposer settings")
    parser.add_argument(
        "--history", action="store_true", help="also replay drafting from the earlier records' outputs (and requests)"
    )
    args, data, cost = parse_run_arguments(parser, argv)
    configs = configurations(
        args.grid,
        cost,
        tuple(data.get("inexact_drafts", ())),
        history=args.history,
        text_classes=run_text_classes(data),
        digit_tokens=run_digit_tokens(data),
    )
    rows = replay(data["outputs"], configs, cost)
    sys.stdout.write(markdown(rows))
    if args.json:
        args.json.write_text(json.dumps({"source": str(args.run_json), "rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()

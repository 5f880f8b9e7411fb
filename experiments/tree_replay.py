"""Modelled tree verification: would verifying several lookup continuations in one pass pay?

    python -m experiments.tree_replay RUN.json [--cost run|cpu|near_flat] [--json PATH]

SpecInfer, Medusa, SAM-Decoding and SuffixDecoding verify a token tree: several candidate continuations
share one forward pass, each token attending to its own branch only, and the pass keeps the longest
branch the target agrees with. draftless verifies one branch. Before building the tree mask and the KV
compaction it needs, this replay measures what the tree could win, the way ``benchmarks.replay`` does: no
model runs, the recorded greedy output is the truth.

Each step the library's default policy drafts its own branch exactly as in the loop. The tree adds up to
``count`` other branches of up to ``length`` tokens, continuations of other earlier occurrences: the other
distinct tokens that followed the longest match (most frequent first), the earliest occurrences of the
match and of its last 5 tokens, then the latest and earliest occurrences of the next three shorter matched
suffixes; a branch that adds no new token is skipped. The tree never holds more than the policy's
``max_draft`` tokens, nor a size whose pass the run's device did not verify exactly. A pass keeps the
longest branch prefix that equals the recorded output plus the bonus token, and costs c(tree size), shared
prefixes counted once. That leaves out what the tree mask itself costs and lets the policy learn from its
own branch only, so the figures bound a tree on top of the current policy from above.
"""

import argparse
import json
import sys
from collections import defaultdict

import numpy as np

from benchmarks.recorded_run import run_digit_tokens, run_text_classes
from benchmarks.replay import parse_run_arguments
from draftless.lookup.adaptive import AdaptiveConfig, AdaptiveProposer
from draftless.lookup.occurrence import agreement

SHAPES = ((0, 0), (1, 4), (3, 4), (3, 8), (7, 4), (7, 8), (15, 4))  # (count, length) of the extra branches
SHORTER = 3  # shorter matched suffixes whose occurrences supply branches
SHORT = 5  # the earliest occurrence of the match's last this many tokens supplies a branch (vLLM's n-gram rule)


def _prefixes(branch):
    """The non-empty prefixes of a token sequence: the tree nodes it passes through."""
    return {tuple(int(t) for t in branch[: i + 1]) for i in range(len(branch))}


def tree_size(branches):
    """Tokens in the tree that holds ``branches`` (token sequences from the same root): distinct prefixes."""
    return len(set().union(*map(_prefixes, branches)))


def candidate_ends(index):
    """End positions of earlier occurrences whose continuations may become branches, best first."""
    match = index.longest_match()
    if match.length == 0:
        return []
    top = index.continuations(limit=16)
    ends = [int(e) - 1 for e in top.ends]  # ``ends`` point at the next token; the occurrence ends before it
    short = index.state_ends(index.suffix_state(SHORT))[1] if match.length > SHORT else match.first_end
    ends += [short, match.first_end, match.recent_end]
    for state, _, _ in index.suffix_states()[1 : 1 + SHORTER]:
        ends += list(index.state_ends(int(state)))
    return list(dict.fromkeys(e for e in ends if e >= -1))


def grow_tree(index, primary, count, length, depth, budget, excluded=()):
    """``[primary]`` plus up to ``count`` branches of up to ``min(length, depth)`` tokens, within ``budget``
    tokens in all and never at an ``excluded`` size."""
    extra = []
    nodes = _prefixes(primary)  # the tree's tokens, each as the path that reaches it
    for end in candidate_ends(index) if count else ():
        if len(extra) >= count:
            break
        branch = index.continuation(end, min(length, depth)).astype(np.int64)
        new = _prefixes(branch) - nodes
        size = len(nodes) + len(new)
        if not new or size > budget or size in excluded:
            continue
        extra.append(branch)
        nodes |= new
    return ([primary] if primary.size else []) + extra


def tree_replay_one(proposer, tokens, prompt_len, max_new_tokens, count, length, excluded=()):
    """Replay one recorded sequence with trees; returns (tokens kept per pass, tree size per pass)."""
    tokens = np.asarray(tokens, dtype=np.int64)
    pos = prompt_len + 1  # the prefill's token is not drafted
    proposer.reset(tokens[:pos])
    kept, sizes = [], []
    while pos < tokens.size:
        depth = prompt_len + max_new_tokens - pos - 1
        primary = np.asarray(proposer.propose(depth), dtype=np.int64)
        branches = grow_tree(proposer.index, primary, count, length, depth, proposer.config.max_draft, excluded)
        truth = tokens[pos : pos + max((b.size for b in branches), default=0)]
        n = min(max((agreement(b, truth) for b in branches), default=0), tokens.size - pos - 1)
        new = tokens[pos : pos + n + 1]
        kept.append(int(new.size))
        sizes.append(tree_size(branches))
        pos += new.size
        proposer.update(new)
    return kept, sizes


def tree_replay(run, cost, shapes=SHAPES):
    """Rows per tree shape and suite: passes, mean tokens per pass, mean tree size, modelled speedup over plain
    decoding and its ratio to the single branch (shape ``(0, 0)``, which is the library's default)."""
    excluded = tuple(run.get("inexact_drafts", ()))
    max_new = int(run.get("max_new_tokens", 128))
    rows = []
    classes, digits = run_text_classes(run), run_digit_tokens(run)
    for count, length in shapes:
        agg = defaultdict(lambda: [0, 0, 0, 0.0])  # passes, tokens, tree tokens, modelled time
        for rec in run["outputs"]:
            proposer = AdaptiveProposer(
                AdaptiveConfig(), cost=cost, excluded=excluded, text_classes=classes, digit_tokens=digits
            )
            kept, sizes = tree_replay_one(proposer, rec["tokens"], rec["prompt_len"], max_new, count, length, excluded)
            for suite in (rec["suite"], "all"):
                a = agg[suite]
                a[0] += len(kept)
                a[1] += sum(kept)
                a[2] += sum(sizes)
                a[3] += float(np.sum(cost.at(np.asarray(sizes)))) if sizes else 0.0
        for suite, (passes, kept, size, spent) in agg.items():
            rows.append(
                {
                    "count": count,
                    "length": length,
                    "suite": suite,
                    "passes": passes,
                    "mean_accepted": round(kept / max(1, passes), 3),
                    "mean_tree_size": round(size / max(1, passes), 2),
                    "est_speedup": round(kept * float(cost.at(0)) / spent, 3) if spent else 1.0,
                }
            )
    single = {r["suite"]: r["est_speedup"] for r in rows if r["count"] == 0}
    for r in rows:
        r["vs_single"] = round(r["est_speedup"] / single[r["suite"]], 3) if single.get(r["suite"]) else None
    return rows


def markdown(rows):
    suites = sorted({r["suite"] for r in rows}, key=lambda s: (s == "all", s))
    by = {(r["count"], r["length"], r["suite"]): r for r in rows}
    shapes = list(dict.fromkeys((r["count"], r["length"]) for r in rows))
    head = "| extra branches x tokens | " + " | ".join(suites) + " |\n|---|" + "---|" * len(suites) + "\n"

    def cell(key):
        r = by.get(key)
        return "-" if r is None else f"{r['est_speedup']:.2f}x ({r['vs_single']:.3f})"

    lines = [f"| {c} x {n} | " + " | ".join(cell((c, n, s)) for s in suites) + " |" for c, n in shapes]
    return (
        "Modelled speedup over plain decoding and, in brackets, its ratio to the single branch (0 x 0, the "
        "library's default), by suite.\n\n" + head + "\n".join(lines) + "\n"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.tree_replay", description=__doc__.splitlines()[0])
    args, data, cost = parse_run_arguments(parser, argv)
    rows = tree_replay(data, cost)
    sys.stdout.write(markdown(rows))
    if args.json:
        args.json.write_text(json.dumps({"source": str(args.run_json), "cost": args.cost, "rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()

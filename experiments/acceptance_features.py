"""What predicts that a lookup draft's next token is right: the evidence behind the acceptance model's inputs.

    python -m experiments.acceptance_features RUN.json [RUN.json ...] [--json PATH]

The issue names four things the index knows about a draft: the matched suffix's length, whether the
occurrence lies in the prompt or in generated text, how far back it is, and how often its continuation
followed the suffix. The acceptance model (``draftless.lookup.acceptance_model``) conditions on the first
two. This tool measures what each of the other two would add. At every generated position of every
recorded output (after the prefill's token, as replay walks them) where some suffix repeats, it asks
whether the token after the most recent occurrence of the longest matched suffix is the next token: the
event whose rate the model learns. It then reports:

- the rate and count per matched-length group and value of each feature;
- the log-loss of predicting that event from per-cell rates fitted on half the requests (even, odd) and
  scored on the other half, both ways: with length and origin only, and with each feature added. The
  difference, in bits per position, is what the feature would teach the model beyond what it knows.

Features: ``distance``, tokens from the occurrence's end to the stream's end; ``followers``, whether the
recent continuation is the only token that ever followed the suffix, the one most (more than half) of its
occurrences had, or a minority one; ``regime``, whether the output is copying or writing before the token
(``draftless.lookup.copy_regime`` with ``AdaptiveConfig``'s defaults, told one token at a time), the input
the model gained after this tool first ran.
"""

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from draftless.index import SuffixIndex
from draftless.lookup.acceptance_model import LENGTH_EDGES, bucket
from draftless.lookup.adaptive import AdaptiveConfig
from draftless.lookup.copy_regime import COPY_LENGTH, CopyRegime

# the acceptance model's first five length buckets (1, 2, 3, 4-5, 6-7 tokens), then every longer match pooled
LENGTH_GROUPS = tuple(str(a) if b == a + 1 else f"{a}-{b - 1}" for a, b in zip(LENGTH_EDGES[:5], LENGTH_EDGES[1:6])) + (
    f"{LENGTH_EDGES[5]}+",
)
DISTANCE_EDGES = (0, 32, 128, 512)
FEATURES = {
    "distance": tuple(f"{a}+" for a in DISTANCE_EDGES),
    "followers": ("only", "majority", "minority"),
    "regime": ("writing", "copying"),
}


def observations(tokens, prompt_len):
    """One dict per generated position with a repeated suffix: its length group, origin, features, and
    ``hit`` (the recent occurrence's next token is the true next token)."""
    tokens = np.asarray(tokens, dtype=np.int64)
    start = prompt_len + 1
    if start >= tokens.size:
        return []
    index = SuffixIndex(tokens[:start])
    config = AdaptiveConfig()
    regime = CopyRegime(config.copy_share)  # told one token at a time
    rows = []
    for pos in range(start, tokens.size):
        match = index.longest_match()
        if match.length:
            follower = int(index.continuation(match.recent_end, 1)[0])
            seen = index.continuations(limit=1 << 20)
            share = int(seen.counts[np.flatnonzero(seen.tokens == follower)[0]]) / int(seen.counts.sum())
            distance = len(index) - 1 - match.recent_end
            rows.append(
                {
                    "length": LENGTH_GROUPS[min(bucket(match.length), len(LENGTH_GROUPS) - 1)],
                    "origin": "prompt" if match.recent_end < prompt_len else "generated",
                    "distance": FEATURES["distance"][int(np.searchsorted(DISTANCE_EDGES, distance, side="right")) - 1],
                    "followers": "only" if seen.tokens.size == 1 else ("majority" if share > 0.5 else "minority"),
                    "regime": "copying" if regime.copying else "writing",
                    "hit": follower == int(tokens[pos]),
                }
            )
        index.extend(int(tokens[pos]))
        regime.observe(1, index.longest_match().length)
    return rows


def copied_share(tokens, prompt_len, copy_length=COPY_LENGTH):
    """The fraction of generated tokens (after the prefill's) that end a match of ``copy_length`` or more
    tokens with earlier text: how much of one output is copied."""
    tokens = np.asarray(tokens, dtype=np.int64)
    start = prompt_len + 1
    if start >= tokens.size:
        return 0.0
    index = SuffixIndex(tokens[:start])
    copied = 0
    for pos in range(start, tokens.size):
        index.extend(int(tokens[pos]))
        copied += index.longest_match().length >= copy_length
    return copied / (tokens.size - start)


def cross_validated_bits(requests, keys, shrink=10.0):
    """Log-loss (bits per position) of the hit event, cell rates over ``keys`` fitted on the even requests and
    scored on the odd ones and the other way round. A cell's rate is shrunk towards the pooled rate of its
    half (``shrink`` pseudo-observations), so that a cell seen rarely in one half costs little in the other."""
    total, count = 0.0, 0
    for held_out in (0, 1):
        fit = [r for i, req in enumerate(requests) if i % 2 != held_out for r in req]
        test = [r for i, req in enumerate(requests) if i % 2 == held_out for r in req]
        if not fit or not test:
            continue
        pooled = (sum(r["hit"] for r in fit) + 1) / (len(fit) + 2)
        hits, trials = defaultdict(float), defaultdict(float)
        for r in fit:
            cell = tuple(r[k] for k in keys)
            hits[cell] += r["hit"]
            trials[cell] += 1
        for r in test:
            cell = tuple(r[k] for k in keys)
            p = (hits[cell] + shrink * pooled) / (trials[cell] + shrink)
            total -= np.log2(p if r["hit"] else 1 - p)
            count += 1
    return total / count if count else float("nan")


def analyse(outputs):
    """Rates per (length group, feature value) and the cross-validated bits of each feature, as a dict."""
    requests = [observations(o["tokens"], o["prompt_len"]) for o in outputs]
    flat = [r for req in requests for r in req]
    base = cross_validated_bits(requests, ("length", "origin"))
    result = {
        "positions": len(flat),
        "hit_rate": round(float(np.mean([r["hit"] for r in flat])), 4) if flat else 0.0,
        "bits_length_origin": round(base, 4),
        "features": {},
        "copied_share": {},
    }
    shares = defaultdict(list)
    for o in outputs:
        shares[o.get("suite", "all")].append(copied_share(o["tokens"], o["prompt_len"]))
    for suite, values in sorted(shares.items()):
        result["copied_share"][suite] = {
            "mean": round(float(np.mean(values)), 3),
            "min": round(float(np.min(values)), 3),
            "max": round(float(np.max(values)), 3),
            "requests": len(values),
        }
    for name, values in FEATURES.items():
        table = []
        for group in LENGTH_GROUPS:
            for value in values:
                cell = [r["hit"] for r in flat if r["length"] == group and r[name] == value]
                if cell:
                    table.append({"length": group, name: value, "n": len(cell), "rate": round(float(np.mean(cell)), 3)})
        bits = cross_validated_bits(requests, ("length", "origin", name))
        result["features"][name] = {"bits": round(bits, 4), "bits_saved": round(base - bits, 4), "table": table}
    return result


def markdown(name, result):
    lines = [
        f"### {name}",
        "",
        f"{result['positions']} positions with a repeated suffix, the recent occurrence's "
        f"next token right at {result['hit_rate']:.3f} of them. Cross-validated log-loss, length and origin "
        f"only: {result['bits_length_origin']:.4f} bits per position.",
        "",
    ]
    for feature, values in FEATURES.items():
        info = result["features"][feature]
        lines += [
            f"`{feature}` added: {info['bits']:.4f} bits ({info['bits_saved']:+.4f} saved). Rate (n) by "
            "matched length:",
            "",
            "| length | " + " | ".join(values) + " |",
            "|---|" + "---|" * len(values),
        ]
        cells = {(row["length"], row[feature]): row for row in info["table"]}
        for group in LENGTH_GROUPS:
            row = [
                f"{cells[(group, v)]['rate']:.2f} ({cells[(group, v)]['n']})" if (group, v) in cells else "-"
                for v in values
            ]
            lines.append(f"| {group} | " + " | ".join(row) + " |")
        lines.append("")
    lines += [
        f"Copied share per request (generated tokens that end a match of {COPY_LENGTH}+ tokens), by suite:",
        "",
        "| suite | requests | mean | min | max |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {suite} | {v['requests']} | {v['mean']:.2f} | {v['min']:.2f} | {v['max']:.2f} |"
        for suite, v in result["copied_share"].items()
    ]
    return "\n".join(lines) + "\n\n"


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m experiments.acceptance_features", description=__doc__.splitlines()[0]
    )
    parser.add_argument("run_json", type=Path, nargs="+", help="JSON files written by benchmarks.run --json")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    results = {}
    for path in args.run_json:
        data = json.loads(path.read_text())
        if "outputs" not in data:
            parser.error(f"{path} has no recorded outputs (write it with benchmarks.run --json)")
        results[str(path)] = analyse(data["outputs"])
        sys.stdout.write(markdown(path.name, results[str(path)]))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()

"""Summaries, the Markdown table and the speedup plot of a benchmark run."""

from collections import defaultdict

ORACLE = "oracle"


def _method_group(name):
    return ORACLE if name.startswith("oracle_k") else name


def _pooled_mean_accepted(runs):
    """Tokens per verification pass over all of ``runs`` together (the bonus token counted, as
    ``GenerationStats.mean_accepted_length`` counts it), or None where no run verified anything. Runs recorded
    without their pass count fall back to the mean over runs."""
    rs = [x for x in runs if x.get("mean_accepted") is not None]
    if not rs:
        return None
    if all(x.get("passes") for x in rs):  # each run's tokens from passes, an integer, rebuilt from its mean
        return sum(round(x["mean_accepted"] * x["passes"]) for x in rs) / sum(x["passes"] for x in rs)
    return sum(x["mean_accepted"] for x in rs) / len(rs)


PEER_RULES = ("rule_pld", "rule_ngram32", "rule_suffix", "rule_sam", "rule_rest", "rule_llamacpp")


def summarize(runs):
    """One row per (suite, method) plus an ``all`` suite: decode throughput (prefill excluded), ratios."""
    groups = defaultdict(list)
    for r in runs:
        for suite in (r["suite"], "all"):
            groups[(suite, r["method"])].append(r)
    rate = {}
    for key, rs in groups.items():
        decode_s = sum(r["decode_s"] for r in rs)
        rate[key] = sum(max(0, r["new_tokens"] - 1) for r in rs) / decode_s if decode_s > 0 else 0.0
    suites = sorted({s for s, _ in groups}, key=lambda s: (s == "all", s))
    rows = []
    for suite in suites:
        oracle_keys = [k for k in groups if k[0] == suite and k[1].startswith("oracle_k")]
        best_oracle = max(oracle_keys, key=lambda k: rate[k]) if oracle_keys else None
        vanilla = rate.get((suite, "vanilla"))
        hf = rate.get((suite, "hf_pld"))
        # the strongest peer rule the run has on this suite, run inside draftless's own loop
        rules = [k for k in groups if k[0] == suite and k[1] in PEER_RULES]
        best_rule = max(rules, key=lambda k: rate[k])[1] if rules else None
        methods = [m for s, m in groups if s == suite and not m.startswith("oracle_k")]
        if best_oracle:
            methods.append(best_oracle[1])
        for method in methods:
            rs = groups[(suite, method)]
            r = rate[(suite, method)]
            accepted = _pooled_mean_accepted(rs)
            rows.append(
                {
                    "suite": suite,
                    "method": _method_group(method),
                    "detail": method,
                    "prompts": len({(x["suite"], x["prompt_id"]) for x in rs}),
                    "runs": len(rs),
                    "decode_tok_s": round(r, 3),
                    "total_s": round(sum(x["total_s"] for x in rs), 3),
                    "speedup_vs_vanilla": round(r / vanilla, 3) if vanilla else None,
                    "ratio_vs_hf_pld": round(r / hf, 3) if hf else None,
                    "ratio_vs_best_rule": round(r / rate[(suite, best_rule)], 3) if best_rule else None,
                    "best_rule": best_rule,
                    "fraction_of_oracle": round(r / rate[best_oracle], 3) if best_oracle else None,
                    "mean_accepted": None if accepted is None else round(accepted, 2),
                    "identical_to_vanilla": _all(x["identical_to_vanilla"] for x in rs),
                    "identical_to_no_draft": _all(x.get("identical_to_no_draft") for x in rs),
                }
            )
    return rows


def _all(flags):
    """True or False where every flag is a bool (all True), None where any is None (a check not made)."""
    flags = list(flags)
    return None if any(f is None for f in flags) else all(flags)


def markdown(summary, model):
    head = (
        "| suite | method | prompts | decode tok/s | speedup vs vanilla | vs hf_pld | vs best rule "
        "| fraction of oracle | mean accepted | identical |\n|---|---|---|---|---|---|---|---|---|---|\n"
    )

    def cell(v, fmt="{:.2f}"):
        return "-" if v is None else fmt.format(v)

    lines = [
        f"| {r['suite']} | {r['detail'] if r['method'] == ORACLE else r['method']} | {r['prompts']} | "
        f"{cell(r['decode_tok_s'])} | {cell(r['speedup_vs_vanilla'])}x | {cell(r['ratio_vs_hf_pld'])} | "
        f"{_versus_rule(r, cell)} | "
        f"{cell(r['fraction_of_oracle'])} | {cell(r['mean_accepted'])} | "
        f"{_identical(r['identical_to_vanilla'], r.get('identical_to_no_draft'))} |"
        for r in summary
    ]
    return f"Model: {model}. Decode throughput excludes the shared prefill.\n\n" + head + "\n".join(lines) + "\n"


def _versus_rule(row, cell):
    """The ratio to the strongest peer rule of the suite, naming it; '-' where the run has none."""
    ratio = row.get("ratio_vs_best_rule")
    return "-" if ratio is None else f"{cell(ratio)} ({row['best_rule']})"


def _identical(flag, same_as_plain=None):
    """Greedy: the output against vanilla's. Sampled: a loop method's against the loop's plain steps with the
    same seed (transformers' own sampled text differs by chance: n/a)."""
    if flag is not None:
        return "yes" if flag else "NO"
    if same_as_plain is not None:
        return "same seed, same text" if same_as_plain else "NO (sampled)"
    return "n/a (sampled)"


def plot(summary, path, model):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    suites = list(dict.fromkeys(r["suite"] for r in summary))
    methods = list(dict.fromkeys(r["method"] for r in summary if r["method"] != "vanilla"))
    width = 0.8 / max(1, len(methods))
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(suites)), 4))
    for i, method in enumerate(methods):
        values = [
            next((r["speedup_vs_vanilla"] or 0 for r in summary if r["suite"] == s and r["method"] == method), 0)
            for s in suites
        ]
        ax.bar([x + i * width for x in range(len(suites))], values, width, label=method)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([x + width * (len(methods) - 1) / 2 for x in range(len(suites))], suites, rotation=20)
    ax.set_ylabel("decode speedup over vanilla")
    ax.set_title(f"draftless benchmarks ({model})")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

"""Inside vLLM: its own speculative methods beside draftless's proposer and the recorded-output ceiling, greedy.

    python -m benchmarks.vllm_run [--model gemma-3-270m] [--suite code_edit,summarization,rag,qa,translation]
                                  [--limit 8] [--concurrency 1,8] [--max-new-tokens 128]
                                  [--methods plain,ngram10,ngram32,suffix,draftless,oracle] [--json P] [--markdown P]

Runs in vLLM's environment (``make vllm-env``). Each method gets an ``LLM`` of its own, one after another; ``plain``
(no speculation) runs first and its outputs are recorded for ``oracle``, a proposer through the same ``custom_class``
interface that drafts them (the ceiling of any proposer there). ``ngram10``/``ngram32`` are vLLM's n-gram
lookup at 10 and 32 draft tokens (its default n-gram sizes, 5), ``suffix`` vLLM's SuffixDecoding (needs
``arctic-inference``; skipped where it does not import), ``draftless`` draftless's proposer with up to 32,
``nodraft`` a ``custom_class`` proposer that never drafts (what speculation costs vLLM's steps by being on). Each
method runs on a fresh ``LLM`` for each concurrency.

``mixed`` draws its prompts from every suite in turn. Concurrency c submits a suite's prompts c at a time, all c
at once. Decode throughput is each group's new tokens after every request's first, per second from the group's
first first-token to its last token (vLLM's own timestamps), pooled over the suite; ``accepted`` vLLM's mean
acceptance length (1 + accepted draft tokens per verified draft, from its metrics); ``identical`` whether every
output equals plain's.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import tempfile
from pathlib import Path

from tqdm import tqdm

from .suites import SUITES, render

# vLLM's CPU workers start by importing this module again; numba (and so ``batch_run``, which imports draftless)
# is imported in ``main`` only, since vLLM 0.32's start-up scan of loaded modules fails on numba's llvmlite
MIXED = "mixed"

DRAFTLESS = "draftless.integration.vllm.DraftlessProposer"
ORACLE = "benchmarks.vllm_oracle.RecordedProposer"
NO_DRAFT = "benchmarks.vllm_oracle.NoDraftProposer"
METHODS = {
    "plain": None,
    "ngram10": {"method": "ngram", "num_speculative_tokens": 10},
    "ngram32": {"method": "ngram", "num_speculative_tokens": 32},
    "suffix": {"method": "suffix"},
    "draftless": {"method": "custom_class", "model": DRAFTLESS, "num_speculative_tokens": 32},
    "nodraft": {"method": "custom_class", "model": NO_DRAFT, "num_speculative_tokens": 32},
    "oracle": {"method": "custom_class", "model": ORACLE, "num_speculative_tokens": 32},
}
MAX_MODEL_LEN = 4096


def prompts_of(model_dir, suites, limit):
    """Each suite's prompts as token ids, rendered as ``benchmarks.run`` renders them."""
    from transformers import AutoTokenizer

    from .batch_run import suite_tasks

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    out = {}
    for suite in suites:
        texts = [render(task, tokenizer) for task in suite_tasks(suite, limit)]
        out[suite] = [tokenizer(t, add_special_tokens=not tokenizer.chat_template)["input_ids"] for t in texts]
    return out


def staggered(params, rows):
    """One ``SamplingParams`` a row, budgets cut by 12 tokens a row in turn (0, 12, 24, 36): rows that finish at
    different steps, as continuous batching has them."""
    return [
        params.clone() if j % 4 == 0 else _with_budget(params, max(4, params.max_tokens - 12 * (j % 4)))
        for j in range(rows)
    ]


def _with_budget(params, max_tokens):
    params = params.clone()
    params.max_tokens = max_tokens
    return params


def spec_counters(llm):
    """vLLM's running counts of verified drafts and accepted draft tokens."""
    counts = {"drafts": 0.0, "accepted": 0.0}
    for metric in llm.get_metrics():
        if metric.name == "vllm:spec_decode_num_drafts":
            counts["drafts"] += metric.value
        elif metric.name == "vllm:spec_decode_num_accepted_tokens":
            counts["accepted"] += metric.value
    return counts


def run_method(name, model_dir, prompts, concurrency, max_new_tokens, stagger=False):
    """``{suite: {"tokens", "seconds", "drafts", "accepted", "outputs"}}`` for one method at one concurrency, on an
    ``LLM`` of its own: a proposer that keeps what earlier requests wrote (vLLM's ``suffix``) then never drafts a
    prompt's answer from its own earlier run at another concurrency."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(
        str(model_dir),
        dtype="float32",
        enforce_eager=True,
        max_model_len=MAX_MODEL_LEN,
        max_num_seqs=max(concurrency, 1),
        max_num_batched_tokens=MAX_MODEL_LEN,  # what vLLM sets under speculation: every method reads prompts alike
        speculative_config=METHODS[name],
        disable_log_stats=False,
        seed=0,
    )
    params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens)
    llm.generate([TokensPrompt(prompt_token_ids=[1, 2, 3, 1, 2, 3, 1, 2])], params, use_tqdm=False)  # warm up
    results = {}
    for suite in tqdm(prompts, desc=f"{name} c={concurrency}", leave=False):
        before = spec_counters(llm)
        tokens, seconds, outputs = 0, 0.0, []
        group_prompts = prompts[suite]
        for start in range(0, len(group_prompts), concurrency):
            group = [TokensPrompt(prompt_token_ids=p) for p in group_prompts[start : start + concurrency]]
            done = llm.generate(group, staggered(params, len(group)) if stagger else params, use_tqdm=False)
            firsts = [o.metrics.first_token_ts for o in done]
            lasts = [o.metrics.last_token_ts for o in done]
            seconds += max(lasts) - min(firsts)
            tokens += sum(len(o.outputs[0].token_ids) - 1 for o in done)
            outputs += [list(o.outputs[0].token_ids) for o in done]
        after = spec_counters(llm)
        results[suite] = {
            "tokens": tokens,
            "seconds": seconds,
            "drafts": after["drafts"] - before["drafts"],
            "accepted": after["accepted"] - before["accepted"],
            "outputs": outputs,
        }
    del llm
    gc.collect()
    return results


def available(name):
    if name != "suffix":
        return True
    try:
        import arctic_inference.suffix_decoding  # noqa: F401
    except ImportError:
        return False
    return True


def table(rows, methods):
    """Markdown: per suite and concurrency, each method's decode tokens/s, its ratio to plain, acceptance length and
    whether its outputs equal plain's."""
    lines = [
        "| suite | c | " + " | ".join(methods) + " |",
        "|---|---|" + "---|" * len(methods),
    ]
    for row in rows:
        cells = []
        for m in methods:
            r = row["methods"].get(m)
            if r is None:
                cells.append("-")
                continue
            mark = "" if r["identical"] else " (differs)"
            cells.append(f"{r['tok_s']:.1f} ({r['vs_plain']:.2f}x, {r['accepted_length']:.2f}){mark}")
        lines.append(f"| {row['suite']} | {row['concurrency']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.vllm_run", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--suite", default="code_edit,summarization,rag,qa,translation")
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--stagger", action="store_true", help="budgets cut by 12 tokens a row in turn (tests)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    suites = [s for s in args.suite.split(",") if s]
    for suite in suites:
        if suite not in SUITES and suite != MIXED:
            parser.error(f"unknown suite {suite!r}; choose from {', '.join(SUITES)} or {MIXED}")
    methods = [m for m in args.methods.split(",") if m]
    for m in methods:
        if m not in METHODS:
            parser.error(f"unknown method {m!r}; choose from {', '.join(METHODS)}")
    if methods[0] != "plain":
        parser.error("methods must start with plain: the others are compared with its outputs")
    try:
        concurrencies = [int(c) for c in args.concurrency.split(",")]
    except ValueError:
        parser.error(f"--concurrency must be integers separated by commas, got {args.concurrency!r}")
    if not concurrencies or min(concurrencies) < 1:
        parser.error("--concurrency must hold integers >= 1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")

    from draftless.integration.models import resolve

    from .run import provenance

    model_dir = resolve(args.model)
    prompts = prompts_of(model_dir, suites, args.limit)
    by_method = {}
    with tempfile.TemporaryDirectory() as scratch:
        record = Path(scratch) / "record.json"
        for name in methods:
            if not available(name):
                tqdm.write(f"{name}: skipped (arctic-inference does not import here)")
                continue
            if name == "oracle":
                streams = [
                    p + o
                    for suite in suites
                    for p, o in zip(prompts[suite], by_method["plain"][(suite, concurrencies[0])]["outputs"])
                ]
                record.write_text(json.dumps(streams), encoding="utf-8")
                os.environ["DRAFTLESS_VLLM_RECORD"] = str(record)
            by_method[name] = {}
            for c in concurrencies:
                for suite, result in run_method(name, model_dir, prompts, c, args.max_new_tokens, args.stagger).items():
                    by_method[name][(suite, c)] = result
    rows = []
    for suite in suites:
        for c in concurrencies:
            plain = by_method["plain"][(suite, c)]
            plain_rate = plain["tokens"] / plain["seconds"]
            row = {"suite": suite, "concurrency": c, "methods": {}}
            for name, results in by_method.items():
                r = results[(suite, c)]
                rate = r["tokens"] / r["seconds"]
                row["methods"][name] = {
                    "tok_s": rate,
                    "vs_plain": rate / plain_rate,
                    "accepted_length": 1 + r["accepted"] / r["drafts"] if r["drafts"] else 1.0,
                    "identical": r["outputs"] == plain["outputs"],
                    "tokens": r["tokens"],
                    "seconds": r["seconds"],
                }
            rows.append(row)
    import vllm

    report = {
        "model": args.model,
        "max_new_tokens": args.max_new_tokens,
        "limit": args.limit,
        "provenance": {**provenance(), "vllm": vllm.__version__},
        "rows": rows,
    }
    text = table(rows, list(by_method))
    print(text)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1), encoding="utf-8")
    if args.markdown:
        args.markdown.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

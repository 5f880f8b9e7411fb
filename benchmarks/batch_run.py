"""Batched decoding side by side: ``model.generate`` on a batch against draftless on the same batch.

    python -m benchmarks.run --batch-size 1,4,8,16 [--model M] [--suite code_edit,summarization,rag,mixed]
                             [--limit N] [--max-new-tokens 128] [--json PATH] [--markdown PATH]

A suite's prompts are taken B at a time (left-padded, as a tokenizer pads for ``generate``); ``mixed`` draws its
rows from every suite in turn. For each batch ``vanilla`` (``model.generate``) runs first, then ``draftless``
(one ``SpeculativeGenerator`` for the whole run: B = 1 goes through the single-request loop, B > 1 through the
batch loop). Decode throughput is every row's new tokens (up to its end) per second after the first new token
(a streamer notes it), pooled over the suite's batches; ``tokens_per_pass`` is draftless's new tokens per
verification pass, all rows together; ``identical`` whether every row equals vanilla's. Where B = 1 runs first,
``rows_equal_alone`` counts the rows of a wider batch whose new tokens (to their first EOS) equal that prompt's
generated alone: padding changes the fp32 sums' shapes, and a near tie may then go the other way.
"""

from __future__ import annotations

import time

import torch
from tqdm import tqdm

from draftless.integration import SpeculativeGenerator

from .suites import SUITES, build, render

MIXED = "mixed"


class FirstTokenClock:
    """A streamer that notes when the first new tokens arrive (the end of the prefill)."""

    def __init__(self):
        self.calls = 0
        self.first = None

    def put(self, value):
        self.calls += 1
        if self.calls == 2:
            self.first = time.perf_counter()

    def end(self):
        pass


def suite_tasks(suite, limit):
    """The tasks of ``suite``; ``mixed``: every suite's in turn (first prompts first), ``limit`` in all."""
    if suite != MIXED:
        return build(suite, limit)
    by_suite = [build(name) for name in SUITES if name != "multi_turn"]
    mixed = [tasks[i] for i in range(max(map(len, by_suite))) for tasks in by_suite if i < len(tasks)]
    return mixed[:limit] if limit else mixed


def continuations(out, prompt_len, eos_ids):
    """Each row's new tokens up to and including its first EOS (a finished row's padding is not decoded)."""
    rows = []
    for row in out[:, prompt_len:].tolist():
        ends = [i for i, t in enumerate(row) if t in eos_ids]
        rows.append(row[: ends[0] + 1] if ends else row)
    return rows


def new_tokens(out, prompt_len, eos_ids):
    """How many new tokens each row decoded (``continuations``)."""
    return [len(row) for row in continuations(out, prompt_len, eos_ids)]


def padding_left(model, tokenizer):
    """Make ``tokenizer`` pad on the left, with EOS where it has no pad token (as ``generate`` pads); returns the
    model's EOS ids."""
    tokenizer.padding_side = "left"
    eos = model.generation_config.eos_token_id
    if tokenizer.pad_token_id is None:
        first = eos[0] if isinstance(eos, list) else eos
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.convert_ids_to_tokens(first if first is not None else 0)
    return set(eos if isinstance(eos, list) else [eos]) - {None}


def timed(call):
    clock = FirstTokenClock()
    start = time.perf_counter()
    out = call(clock)
    total = time.perf_counter() - start
    prefill = (clock.first - start) if clock.first else total
    return out, total - prefill


def run_batches(model, tokenizer, suites, batch_sizes, limit, max_new_tokens, progress=True):
    """Rows of the batch table, one per (suite, batch size)."""
    eos_ids = padding_left(model, tokenizer)
    generator = SpeculativeGenerator(model, tokenizer)
    plans = [(suite, size) for suite in suites for size in batch_sizes]
    rows = []
    alone = {}  # (suite, prompt) -> its continuation generated alone (B = 1)
    for suite, size in tqdm(plans, desc="batches", disable=not progress):
        texts = [render(task, tokenizer) for task in suite_tasks(suite, limit)]
        tally = {"vanilla": [0, 0.0], "draftless": [0, 0.0]}
        passes = decoded = 0
        identical = True
        equal_alone = compared = 0
        for start in range(0, len(texts), size):
            batch = texts[start : start + size]
            inputs = tokenizer(batch, return_tensors="pt", padding=True, add_special_tokens=not tokenizer.chat_template)
            prompt_len = inputs["input_ids"].shape[1]
            kwargs = dict(max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)
            ref, seconds = timed(lambda clock: model.generate(**inputs, streamer=clock, **kwargs))
            tally["vanilla"][0] += sum(new_tokens(ref, prompt_len, eos_ids))
            tally["vanilla"][1] += seconds
            out, seconds = timed(lambda clock: generator.generate(**inputs, streamer=clock, **kwargs))
            decoded_rows = continuations(out, prompt_len, eos_ids)
            tally["draftless"][0] += sum(map(len, decoded_rows))
            tally["draftless"][1] += seconds
            identical &= torch.equal(out, ref)
            for r, row in enumerate(decoded_rows):
                if size == 1:
                    alone[suite, start + r] = row
                elif (suite, start + r) in alone:
                    compared += 1
                    equal_alone += row == alone[suite, start + r]
            stats = generator.last_stats
            passes += stats.batch_passes or stats.passes
            decoded += stats.accepted + stats.passes
        speeds = {name: n / s if s > 0 else 0.0 for name, (n, s) in tally.items()}
        rows.append(
            {
                "suite": suite,
                "batch_size": size,
                "prompts": len(texts),
                "vanilla_tok_s": round(speeds["vanilla"], 2),
                "draftless_tok_s": round(speeds["draftless"], 2),
                "speedup": round(speeds["draftless"] / speeds["vanilla"], 3) if speeds["vanilla"] else None,
                "tokens_per_pass": round(decoded / passes, 3) if passes else None,
                "identical": identical,
                "rows_equal_alone": f"{equal_alone}/{compared}" if compared else None,
            }
        )
    return rows


def markdown(rows, model_name):
    lines = [
        f"Batched decoding, {model_name}: decode tokens per second, all rows together",
        "",
        "| suite | B | prompts | generate tok/s | draftless tok/s | speedup | tokens per pass | identical | rows equal "
        "alone |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['suite']} | {r['batch_size']} | {r['prompts']} | {r['vanilla_tok_s']} | {r['draftless_tok_s']} | "
            f"{r['speedup']}x | {r['tokens_per_pass']} | {'yes' if r['identical'] else 'NO'} | "
            f"{r.get('rows_equal_alone') or '-'} |"
        )
    return "\n".join(lines) + "\n"

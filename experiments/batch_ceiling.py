"""What any drafter could reach in the batch loop: ``generate`` and draftless against two drafters that know each
row's true continuation, on the same batches.

    python -m experiments.batch_ceiling [--model NAME] [--suite code_edit,summarization,rag,mixed] [--batch-size 8]
                                        [--limit 8] [--max-new-tokens 128] [--ks 4,8,16] [--cap 16] [--json PATH]

``oracle{k}`` drafts the next k tokens of the row's true continuation (``generate``'s on the batch): the ceiling
of any drafter, text that never repeated included. ``ceiling_any`` drafts with hindsight from the row's own index,
as ``benchmarks.lookup_ceiling`` does (occurrence "any", every agreeing token up to ``--cap``): the ceiling of
drafting by lookup. Where ``ceiling_any`` stays below a target that the oracle passes, the pass is cheap enough
and the text does not repeat enough. Every output is checked equal to ``generate``'s; decode throughput as
``benchmarks.batch_run`` measures it.
"""

import argparse
import json
import sys

import numpy as np
import torch
from tqdm import tqdm

from benchmarks.batch_run import new_tokens, padding_left, suite_tasks, timed
from benchmarks.lookup_ceiling import LookupCeilingProposer
from benchmarks.oracle import OracleProposer
from benchmarks.suites import render
from draftless.integration import SpeculativeGenerator
from draftless.integration.models import DEFAULT_MODEL, load_model

from .pass_cost import int_list


class NearlyFree:
    """A cost curve under which drafting every agreeing token pays: the lookup ceiling drafts all it can."""

    def at(self, ks):
        return 1 + 0.02 * np.asarray(ks, dtype=float)


class ByPrompt:
    """One batch's proposer template: each row, found by the prompt it is reset with, drafts through its own
    proposer built on its true sequence (``make(reference)``)."""

    def __init__(self, references, make):
        self.references = references  # [(prompt tokens, prompt + true continuation)]
        self.make = make
        self.inner = None

    def reset(self, tokens):
        seen = [int(t) for t in tokens]
        for prompt, full in self.references:
            if seen[: len(prompt)] == prompt:
                self.inner = self.make(full)
        self.inner.reset(tokens)

    def update(self, tokens):
        self.inner.update(tokens)

    def propose(self, max_tokens):
        return self.inner.propose(max_tokens)


def measure(model, tokenizer, suites, batch_size, limit, max_new_tokens, ks, cap, progress=False):
    """One row per suite: tokens per second and ratio to ``generate`` of draftless and each ceiling drafter."""
    eos_ids = padding_left(model, tokenizer)
    kwargs = dict(max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    default = SpeculativeGenerator(model, tokenizer)
    rows = []
    for suite in tqdm(suites, desc="suites", disable=not progress):
        texts = [render(task, tokenizer) for task in suite_tasks(suite, limit)]
        tally = {}
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(
                texts[start : start + batch_size],
                return_tensors="pt",
                padding=True,
                add_special_tokens=not tokenizer.chat_template,
            )
            width = batch["input_ids"].shape[1]
            ref, seconds = timed(lambda clock: model.generate(**batch, streamer=clock, **kwargs))
            tally.setdefault("generate", [0, 0.0])
            tally["generate"][0] += sum(new_tokens(ref, width, eos_ids))
            tally["generate"][1] += seconds
            references = []
            for r in range(ref.shape[0]):
                prompt = batch["input_ids"][r][batch["attention_mask"][r] == 1].tolist()
                references.append((prompt, prompt + ref[r, width:].tolist()))
            drafters = {"draftless": default}
            for k in ks:
                drafters[f"oracle{k}"] = SpeculativeGenerator(
                    model, tokenizer, proposer=ByPrompt(references, lambda full, k=k: OracleProposer(full, k))
                )
            drafters["ceiling_any"] = SpeculativeGenerator(
                model,
                tokenizer,
                proposer=ByPrompt(references, lambda full: LookupCeilingProposer(full, NearlyFree(), "any", cap)),
            )
            for name, generator in drafters.items():
                out, seconds = timed(lambda clock: generator.generate(**batch, streamer=clock, **kwargs))
                if not torch.equal(out, ref):
                    raise AssertionError(f"{name} differs from generate on {suite}")
                tally.setdefault(name, [0, 0.0])
                tally[name][0] += sum(new_tokens(out, width, eos_ids))
                tally[name][1] += seconds
        speed = {name: n / s if s > 0 else 0.0 for name, (n, s) in tally.items()}
        row = {"suite": suite, "batch_size": batch_size, "prompts": len(texts)}
        for name, value in speed.items():
            row[f"{name}_tok_s"] = round(value, 2)
            if name != "generate":
                row[f"{name}_speedup"] = round(value / speed["generate"], 3) if speed["generate"] else None
        rows.append(row)
    return rows


def markdown(rows):
    names = [key[: -len("_speedup")] for key in rows[0] if key.endswith("_speedup")]
    lines = ["| suite | B | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for row in rows:
        cells = [f"{row[f'{n}_tok_s']} ({row[f'{n}_speedup']}x)" for n in names]
        lines.append(f"| {row['suite']} | {row['batch_size']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.batch_ceiling", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--suite", default="code_edit,summarization,rag,mixed")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--ks", type=lambda text: int_list(text, "--ks", 1), default=[4, 8, 16])
    parser.add_argument("--cap", type=int, default=16)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if args.batch_size < 1 or args.limit < 1 or args.max_new_tokens < 1 or args.cap < 1:
        parser.error("--batch-size, --limit, --max-new-tokens and --cap must be >= 1")
    model, tokenizer = load_model(args.model)
    rows = measure(
        model,
        tokenizer,
        args.suite.split(","),
        args.batch_size,
        args.limit,
        args.max_new_tokens,
        args.ks,
        args.cap,
        progress=True,
    )
    sys.stdout.write(markdown(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "rows": rows}, f, indent=1)
    return rows


if __name__ == "__main__":
    main()

"""How much of a batch's time goes to right-aligning its rows in the KV cache after each pass.

    python -m experiments.batch_realign_cost [--model gemma-3-270m] [--batch-size 8] [--suite mixed]

Runs one batch of a suite's prompts through draftless with ``batch_cache.realign`` timed, and prints the
seconds spent moving rows against the seconds of the verification passes (``GenerationStats.verify_s``).
"""

import argparse
import time

from benchmarks.batch_run import suite_tasks
from benchmarks.suites import render
from draftless.integration import SpeculativeGenerator, batch_cache, load_model


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--suite", default="mixed")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    args = parser.parse_args(argv)
    model, tokenizer = load_model(args.model)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    texts = [render(task, tokenizer) for task in suite_tasks(args.suite, args.batch_size)]
    inputs = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=not tokenizer.chat_template)
    spent = []
    original = batch_cache.realign

    def timed(*a, **k):
        t0 = time.perf_counter()
        out = original(*a, **k)
        spent.append(time.perf_counter() - t0)
        return out

    batch_cache.realign = timed
    try:
        generator = SpeculativeGenerator(model, tokenizer)
        generator.generate(**inputs, max_new_tokens=args.max_new_tokens, pad_token_id=tokenizer.pad_token_id)
    finally:
        batch_cache.realign = original
    stats = generator.last_stats
    print(
        f"{args.model}, B={args.batch_size}, {args.suite}: {stats.batch_passes} passes, {stats.verify_s:.2f} s in "
        f"passes, {sum(spent):.3f} s right-aligning rows ({100 * sum(spent) / stats.verify_s:.1f} % of the passes), "
        f"{stats.tokens_per_pass:.2f} tokens per pass"
    )


if __name__ == "__main__":
    main()

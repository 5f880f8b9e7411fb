"""The ``draftless`` command line.

    draftless generate --model gemma-3-270m --prompt-file prompt.txt [--max-new-tokens 128] [--stats]
                       [--reference doc.txt ...] [--temperature T] [--top-p P] [--top-k K] [--seed N]
                       [--device cpu] [--dtype float32]
    draftless calibrate --model gemma-3-270m [--device cpu] [--dtype float32]

The benchmarks have their own command, ``draftless-bench`` (``python -m benchmarks.run`` in a checkout).

``calibrate`` measures the cost curve (and the linear layers' forms, and off the CPU the exact pass lengths)
again, replacing the cached ones and the curve's shape learned from earlier runs: the first measurement is kept
for good otherwise, its shape corrected pass by pass as runs go (``learned_shape``), while a plan chosen while
the machine was busy stays.

``--reference`` names text files (a file a code edit works on, the documents a RAG answer draws on) that are
drafted from as well as the prompt, without being put in the prompt (``draftless.lookup.ReferenceCorpus``).

``--temperature``, ``--top-p`` and ``--top-k`` sample instead of decoding greedily; ``--seed`` makes a sampled
completion repeatable, and one seed gives the same text whatever draftless drafts (on any machine's cost curve).
"""

import argparse
import contextlib
import sys
from pathlib import Path

from .models import DTYPES, device_name


def _load(args, parser):
    """``load_model`` for the command's options; a model or device that is not there is a usage error."""
    from . import kv_cache
    from .models import load_model

    try:
        model, tokenizer = load_model(args.model, dtype=args.dtype, device=args.device)
        kv_cache.check_model_cache(model)
    except ValueError as err:  # UnsupportedGeneration too: a model whose cache cannot be rolled back
        parser.error(str(err))
    return model, tokenizer


@contextlib.contextmanager
def calibration_progress():
    """A ``progress`` callback for ``calibration.calibrate``: one tqdm bar per stage measured, on stderr, each
    closed as its stage ends (the stages run one after another)."""
    from tqdm import tqdm

    bars = {}

    def progress(stage, done, total):
        bar = bars.get(stage)
        if bar is None:
            bar = bars[stage] = tqdm(total=total, desc=f"calibrating: {stage}", unit="step", file=sys.stderr)
        bar.update(done - bar.n)
        if done >= total:
            bar.close()  # a second close, in the end, does nothing

    try:
        yield progress
    finally:
        for bar in bars.values():
            bar.close()


def _calibrate_once(model, output_layer=False):
    """The first run of a model on this machine measures its speed (seconds on a small CPU): with a
    progress bar, before the completion streams, rather than as a silent pause inside it; ``output_layer`` (a
    sampled run's) the output layer's plan too (``calibration.calibrated``)."""
    from .calibration import calibrate, calibrated

    if not calibrated(model, output_layer=output_layer):
        print("measuring this model's speed on this machine once; later runs read it from the cache", file=sys.stderr)
        with calibration_progress() as progress:
            calibrate(model, progress, output_layer=output_layer)


def _generate(args, parser):
    # the files first, before torch is imported: a usage error answers at once
    try:
        prompt = sys.stdin.read() if args.prompt_file == "-" else Path(args.prompt_file).read_text()
    except (OSError, UnicodeDecodeError) as err:
        parser.error(f"--prompt-file: {err}")
    if not prompt.strip():
        parser.error(f"--prompt-file: {args.prompt_file} holds no prompt (it is empty)")
    try:
        references = [Path(name).read_text() for name in args.reference]
    except (OSError, UnicodeDecodeError) as err:
        parser.error(f"--reference: {err}")
    from transformers import TextStreamer

    from .speculative import SpeculativeGenerator

    model, tokenizer = _load(args, parser)
    _calibrate_once(model, output_layer=_multiplies_output_layer(model, args))
    corpus = None
    if references:
        from draftless.lookup import ReferenceCorpus

        corpus = ReferenceCorpus([tokenizer(text, add_special_tokens=False)["input_ids"] for text in references])
    if args.chat:
        if tokenizer.chat_template is None:
            raise SystemExit(f"--chat: {args.model} has no chat template")
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
    # a chat template writes the special tokens itself (Gemma's its BOS): the tokenizer must not add them again
    inputs = tokenizer(prompt, return_tensors="pt", add_special_tokens=not args.chat)
    generator = SpeculativeGenerator(model, tokenizer, corpus=corpus)
    # the completion as text: the end-of-turn token a chat model stops at (SmolLM2's <|im_end|>) is not part of it
    streamer = TextStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
    generator.generate(**inputs, max_new_tokens=args.max_new_tokens, streamer=streamer, **_sampling(args))
    if args.stats:
        s = generator.last_stats
        print(
            f"\n--\n{s.new_tokens} new tokens in {s.total_s:.2f} s ({s.new_tokens / s.total_s:.1f} tok/s); "
            f"{s.passes} verification passes, mean accepted length {s.mean_accepted_length:.2f} "
            f"(bonus token included); drafted {s.drafted}, accepted {s.accepted}; "
            f"proposing {s.propose_s * 1e3:.1f} ms, verifying {s.verify_s:.2f} s, prefill {s.prefill_s:.2f} s",
            file=sys.stderr,
        )


def _sampling(args):
    """``generate``'s sampling arguments for the command's options: none (the model's generation config, greedy
    for the bundled models) unless one of --temperature, --top-p, --top-k is given."""
    if args.temperature is None and args.top_p is None and args.top_k is None:
        return {}
    return {
        "do_sample": True,
        "temperature": 1.0 if args.temperature is None else args.temperature,
        "top_p": 1.0 if args.top_p is None else args.top_p,
        "top_k": 0 if args.top_k is None else args.top_k,
        "seed": args.seed,
    }


def _multiplies_output_layer(model, args):
    """Whether the command's run multiplies by the output layer in fp32, so that its plan is measured up front."""
    from .calibration import multiplies_output_layer

    config = model.generation_config
    sampling = _sampling(args)
    do_sample = bool(sampling) or bool(config.do_sample)
    return multiplies_output_layer(model, do_sample, sampling["top_k"] if sampling else config.top_k)


def _check_sampling(args, parser):
    if args.temperature is not None and not args.temperature > 0:
        parser.error("--temperature must be > 0 (leave it out for greedy decoding)")
    if args.top_p is not None and not 0 < args.top_p <= 1:
        parser.error("--top-p must be in (0, 1]")
    if args.top_k is not None and args.top_k < 0:
        parser.error("--top-k must be >= 0 (0: no top-k cut)")
    if args.seed is not None and not _sampling(args):
        parser.error("--seed applies to sampling: give --temperature, --top-p or --top-k with it")


def _calibrate(args, parser):
    from .calibration import recalibrate

    model, _ = _load(args, parser)
    with calibration_progress() as progress:
        curve, _, inexact = recalibrate(model, progress)
    print(f"{args.model} on {model.device} ({model.dtype}): c(k), ms")
    for k, seconds in zip(curve.ks, curve.seconds):
        print(f"  k = {k:2d}: {seconds * 1e3:8.2f}  ({seconds / curve.seconds[0]:.2f}x c(0))")
    if inexact:
        print(f"draft lengths never made here (their pass is not exact on this device): {list(inexact)}")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog="draftless", description="Faster generation with no draft model.")
    sub = parser.add_subparsers(dest="command", required=True)
    model_options = argparse.ArgumentParser(add_help=False)  # which model, where: every command that loads one
    model_options.add_argument(
        "--model",
        default="gemma-3-270m",
        help="gemma-3-270m (default), smollm2-135m-instruct, or a local transformers directory",
    )
    model_options.add_argument("--device", default="cpu", type=device_name, help="where the model runs: cpu, cuda, ...")
    model_options.add_argument("--dtype", default="float32", choices=DTYPES)
    gen = sub.add_parser(
        "generate",
        parents=[model_options],
        help="stream a completion of a prompt (greedy, or sampled with --temperature, --top-p, --top-k)",
    )
    sub.add_parser(
        "calibrate", parents=[model_options], help="measure the model's cost curve again, replacing the cached one"
    )
    gen.add_argument("--prompt-file", required=True, help="a text file, or - for standard input")
    gen.add_argument("--max-new-tokens", type=int, default=128)
    gen.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    gen.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="FILE",
        help="a text file to draft from besides the prompt (repeatable); it is not put in the prompt",
    )
    gen.add_argument("--stats", action="store_true", help="print the run's statistics at the end (stderr)")
    gen.add_argument("--temperature", type=float, default=None, help="sample at this temperature")
    gen.add_argument("--top-p", type=float, default=None, help="sample from this nucleus")
    gen.add_argument("--top-k", type=int, default=None, help="sample from the k likeliest tokens (0: all)")
    gen.add_argument("--seed", type=int, default=None, help="make a sampled completion repeatable")
    args = parser.parse_args(argv)
    if args.command == "calibrate":
        _calibrate(args, parser)
    elif args.command == "generate":
        if args.max_new_tokens < 1:
            parser.error("--max-new-tokens must be >= 1")
        _check_sampling(args, parser)
        _generate(args, parser)


if __name__ == "__main__":
    main()

"""Side-by-side benchmark of draftless against plain decoding, transformers' prompt lookup, the peers' drafting
rules and the oracle ceiling.

    python -m benchmarks.run [--model gemma-3-270m] [--suite code_edit,rag] [--methods draftless,hf_pld]
                             [--limit N] [--max-new-tokens 128] [--json PATH] [--markdown PATH] [--plot PATH]
                             [--temperature T] [--top-p P] [--repeats R] [--device cpu] [--dtype float32]

All methods run on the same prompts in one process, interleaved prompt by prompt (vanilla first, the others
in an order that rotates per prompt). With ``--repeats R`` each prompt's round of methods runs R times in a
row (the order rotating again each time), and the summary pools every repeat's tokens and seconds: one
prompt's decode time varies by up to 15 % from run to run on a shared CPU, so a ratio that sits near a
target needs more than one run per prompt to resolve. Model loading and Numba compilation are timed on their
own lines. Each run's prefill is timed to the arrival of its first new token (a streamer), so decode throughput
excludes it. With ``--temperature``/``--top-p`` every method samples (each run seeded alike per prompt):
transformers' methods' text differs from the loop's by chance, but the loop's methods draw each token from a
uniform fixed by the seed and the position, so their text equals that of the loop's plain steps with the seed
(an untimed run of ``no_draft`` per prompt, checked as ``identical_to_no_draft``; recorded as the outputs,
which the oracle drafts and ``benchmarks.replay`` replays). ``--device`` and
``--dtype`` place the model (``cuda``, ``bfloat16``, ...); the cost curve is calibrated for each placement.
What a method measures for itself before the runs (``methods.PREPARE``: ``draftless_quick``'s two-length curve)
is timed apart too (``prepare_s``). ``draftless[knob=value]`` runs the default policy with that knob set
(``methods.variant_config``). ``draftless_history`` drafts from the outputs of the prompts run before (the
vanilla run's, which every method's equals under greedy decoding), in the interleaved order of the suites.
"""

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from draftless.integration import SpeculativeGenerator, load_model
from draftless.integration.calibration import calibrate, curve_json
from draftless.integration.cli import calibration_progress
from draftless.integration.models import DTYPES, check_device_available, device_name, resolve
from draftless.lookup import AdaptiveConfig

from . import batch_run, report
from .batch_run import MIXED, FirstTokenClock
from .methods import DEFAULT_METHODS, METHODS, PREPARE, expand, forget, in_loop, method, remember, variant_config
from .suites import SUITES, interleaved, render


def encode_prompt(tokenizer, text):
    # a chat template already holds its special tokens; a plain completion prompt gets the usual ones
    return tokenizer(text, return_tensors="pt", add_special_tokens=not tokenizer.chat_template)


def _warm_up(model, tokenizer):
    inputs = encode_prompt(tokenizer, "warm up: a b c a b c a b")
    SpeculativeGenerator(model, tokenizer).generate(**inputs, max_new_tokens=4)


def plain_steps_text(model, tokenizer, inputs, max_new_tokens, sampling, seed):
    """The sampled text of the loop's plain steps (``no_draft``) with ``seed``, untimed: the text every method of
    the loop writes with that seed, whatever it drafts."""
    torch.manual_seed(seed)
    out, _ = method("no_draft")(model, tokenizer, inputs, max_new_tokens, FirstTokenClock(), None, sampling)
    return out[0].tolist()


def run(
    model_name,
    suites,
    methods,
    limit,
    max_new_tokens,
    progress=True,
    temperature=None,
    top_p=None,
    checkpoint=None,
    repeats=1,
    device="cpu",
    dtype="float32",
):
    """Run the benchmark; ``checkpoint(result)`` is called after every prompt with the result so far."""
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    t0 = time.perf_counter()
    model, tokenizer = load_model(model_name, dtype=dtype, device=device)
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    # measured once per model/device/dtype/threads, then read from disk; off the CPU, inexact holds the draft
    # lengths whose pass is not exact there
    with calibration_progress() if progress else contextlib.nullcontext() as tell:
        curve, _, inexact = calibrate(model, tell, output_layer=True)  # every plan a method reads, before any run
    calibrate_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    _warm_up(model, tokenizer)
    compile_s = time.perf_counter() - t0
    sampling = {}
    if temperature is not None or top_p is not None:
        sampling = {
            "do_sample": True,
            "temperature": 1.0 if temperature is None else temperature,
            "top_p": 1.0 if top_p is None else top_p,
        }
    names = expand(methods, sampling=bool(sampling))
    t0 = time.perf_counter()
    prepared = {name: PREPARE[name](model) for name in names if name in PREPARE}  # e.g. a quick curve
    prepare_s = time.perf_counter() - t0
    tasks = interleaved(suites, limit)  # a run cut short (a lent device's time limit) still covers every suite
    forget(model)  # draftless_history starts from no history
    runs, outputs, mismatches = [], [], []

    def result():
        return {
            "model": model_name,
            "max_new_tokens": max_new_tokens,
            "suites": list(suites),
            "methods": names,
            "repeats": repeats,
            "sampling": sampling,
            "device": str(model.device),
            "dtype": str(model.dtype),
            "load_s": round(load_s, 2),
            "compile_s": round(compile_s, 2),
            "calibrate_s": round(calibrate_s, 2),
            "prepare_s": round(prepare_s, 2),
            "prepared_cost_curves": {name: curve_json(c) for name, c in prepared.items()},
            "draftless_config": {"kind": "adaptive", **dataclasses.asdict(AdaptiveConfig())},
            # unrounded: replay must see the curve the policy saw, or a near tie between two lengths flips
            "cost_curve": curve_json(curve),  # with the output layer's times where the calibration took them
            "inexact_drafts": list(inexact),
            "threads": torch.get_num_threads(),
            "provenance": provenance(),
            "runs": runs,
            "summary": report.summarize(runs),
            "mismatches": mismatches,
            "outputs": outputs,
        }

    bar = tqdm(
        total=sum(len(t.turns) for t in tasks) * len(names) * repeats,
        desc="runs",
        disable=not progress,
        file=sys.stderr,
    )
    for n_task, task in enumerate(tasks):
        answers = []
        for turn in range(len(task.turns)):
            inputs = encode_prompt(tokenizer, render(task, tokenizer, answers)).to(model.device)
            prompt_len = inputs["input_ids"].shape[1]
            prompt_id = task.prompt_id + (f"_t{turn + 1}" if len(task.turns) > 1 else "")
            others = names[1:]
            reference = None
            seed = 1000 * n_task + turn  # sampled runs of one prompt start from the same seed
            plain = plain_steps_text(model, tokenizer, inputs, max_new_tokens, sampling, seed) if sampling else None
            rounds = []  # (repeat, method): vanilla first, then the others in an order rotating per run
            for repeat in range(repeats):
                shift = (n_task + repeat) % max(1, len(others))
                rounds += [(repeat, name) for name in ["vanilla"] + others[shift:] + others[:shift]]
            for repeat, name in rounds:
                bar.set_postfix_str(f"{task.suite}/{prompt_id}/{name}")
                clock = FirstTokenClock()
                torch.manual_seed(seed)
                start = time.perf_counter()
                out, stats = method(name)(
                    model, tokenizer, inputs, max_new_tokens, clock, plain if sampling else reference, sampling
                )
                if out.device.type == "cuda":  # the clock stops when the device's work is done, not queued
                    torch.cuda.synchronize(out.device)
                total = time.perf_counter() - start
                if name == "vanilla" and reference is None:  # the first repeat's output is the reference
                    reference = out[0].tolist()
                    text = plain if sampling else reference  # the text every loop method writes
                    answers.append(tokenizer.decode(text[prompt_len:], skip_special_tokens=True))
                    outputs.append(
                        {"suite": task.suite, "prompt_id": prompt_id, "prompt_len": prompt_len, "tokens": text}
                    )
                prefill = (clock.first - start) if clock.first else total
                identical = out[0].tolist() == reference if not sampling else None
                same_as_plain = out[0].tolist() == plain if sampling and in_loop(name) else None
                if identical is False or same_as_plain is False:
                    mismatches.append(
                        {
                            "suite": task.suite,
                            "prompt_id": prompt_id,
                            "method": name,
                            "repeat": repeat,
                            "against": "no_draft" if sampling else "vanilla",
                        }
                    )
                runs.append(
                    {
                        "suite": task.suite,
                        "prompt_id": prompt_id,
                        "method": name,
                        "repeat": repeat,
                        "new_tokens": int(out.shape[1] - prompt_len),
                        "prompt_tokens": int(prompt_len),
                        "prefill_s": round(prefill, 4),
                        "decode_s": round(total - prefill, 4),
                        "total_s": round(total, 4),
                        "identical_to_vanilla": identical,
                        "identical_to_no_draft": same_as_plain,
                        "mean_accepted": round(stats.mean_accepted_length, 3) if stats and stats.passes else None,
                        "passes": stats.passes if stats else None,
                    }
                )
                if stats and (name == "draftless" or variant_config(name) is not None):  # its choices, pass by pass
                    runs[-1]["draft_trace"] = [list(p) for p in stats.draft_trace]
                    runs[-1]["pass_seconds"] = list(stats.pass_seconds)  # what the policy learned its curve from
                    if any(stats.start_shape):  # the shape earlier requests learned, kept on disk (learned_shape)
                        runs[-1]["start_shape"] = list(stats.start_shape)
                        runs[-1]["start_evidence"] = list(stats.start_evidence)  # the passes behind each knot
                    if stats.start_acceptance:  # what earlier requests' first drafts showed (RequestStart)
                        hits, trials = stats.start_acceptance
                        runs[-1]["start_acceptance"] = {"hits": list(hits), "trials": list(trials)}  # exact
                    if stats.staged_passes:  # passes whose output layer was computed in two stages (staged_head)
                        runs[-1]["staged_passes"] = stats.staged_passes
                        runs[-1]["head_rows_skipped"] = stats.head_rows_skipped
                bar.update()
            remember(model, reference[prompt_len:])  # later prompts' draftless_history drafts from it
        if checkpoint is not None:
            checkpoint(result())
    bar.close()
    return result()


def _csv(value, allowed, what, variants=False):
    """``value``'s comma-separated names, each in ``allowed`` or, with ``variants``, a ``draftless[...]`` variant
    (whose knobs are joined by ``+``, so that no comma splits one)."""
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = []
    for v in items:
        try:
            if v not in allowed and not (variants and variant_config(v) is not None):
                bad.append(v)
        except (ValueError, TypeError) as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    if bad or not items:
        raise argparse.ArgumentTypeError(
            f"unknown {what} {bad}; choose from {', '.join(allowed)}"
            + (" or draftless[knob=value]" if variants else "")
        )
    return items


def provenance():
    """What a recorded run was measured with: the commit (with ``+dirty`` for uncommitted changes), the date, the
    CPU's model, the thread count and the library versions, so that a JSON file says where its figures come
    from."""
    import datetime
    import platform
    import subprocess

    import transformers

    root = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        commit += "+dirty" if dirty else ""
    except (OSError, subprocess.SubprocessError):
        commit = None  # an installed copy, not a checkout
    cpu = platform.processor() or None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {
        "commit": commit,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }


def main(argv=None, prog=None):
    if prog is None:  # the console script, or python -m in a checkout
        prog = "draftless-bench" if Path(sys.argv[0]).name == "draftless-bench" else "python -m benchmarks.run"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument(
        "--suite", default=None, type=lambda v: _csv(v, SUITES + (MIXED,), "suite"), help="default: every suite"
    )
    allowed = DEFAULT_METHODS + tuple(m for m in METHODS if m not in DEFAULT_METHODS)  # oracle_k*, draftless_quick
    parser.add_argument(
        "--methods", default=",".join(DEFAULT_METHODS), type=lambda v: _csv(v, allowed, "method", variants=True)
    )
    parser.add_argument("--limit", type=int, default=None, help="prompts per suite")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--plot", type=Path)
    parser.add_argument("--temperature", type=float, default=None, help="sample at this temperature")
    parser.add_argument("--top-p", type=float, default=None, help="sample with this nucleus")
    parser.add_argument("--repeats", type=int, default=1, help="runs of every method per prompt (pooled)")
    parser.add_argument("--device", default="cpu", type=device_name, help="where the model runs: cpu, cuda, ...")
    parser.add_argument("--dtype", default="float32", choices=DTYPES)
    parser.add_argument(
        "--batch-size",
        type=lambda v: [int(x) for x in v.split(",")],
        default=None,
        help="batch sizes, e.g. 1,4,8,16: generate against draftless on batches (benchmarks.batch_run)",
    )
    args = parser.parse_args(argv)
    if args.batch_size is not None:
        return _main_batches(parser, args)
    if args.suite is None:
        args.suite = list(SUITES)
    if MIXED in args.suite:
        parser.error("--suite mixed is a batch suite: give --batch-size")
    if args.temperature is not None and args.temperature <= 0:
        parser.error("--temperature must be > 0 (leave it out for greedy decoding)")
    if args.top_p is not None and not 0 < args.top_p <= 1:
        parser.error("--top-p must be in (0, 1]")
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be >= 1")
    if args.max_new_tokens < 1:
        parser.error("--max-new-tokens must be >= 1")
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    for option in ("json", "markdown", "plot"):  # written after the runs: an hour's results lost to a typo
        path = getattr(args, option)
        if path is not None and not path.parent.is_dir():
            parser.error(f"--{option}: no directory {str(path.parent)!r} to write {path.name!r} in")
    try:  # a model or device that is not there, before anything is loaded
        resolve(args.model)
        check_device_available(args.device)
    except ValueError as err:
        parser.error(str(err))
    save = (lambda partial: args.json.write_text(json.dumps(partial, indent=1))) if args.json else None
    result = run(
        args.model,
        args.suite,
        args.methods,
        args.limit,
        args.max_new_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        checkpoint=save,
        repeats=args.repeats,
        device=args.device,
        dtype=args.dtype,
    )
    print(f"model load: {result['load_s']} s; Numba compile and warm-up: {result['compile_s']} s")
    print(
        f"cost curve calibration: {result['calibrate_s']} s; c(k) at k={result['cost_curve']['ks']}: "
        f"{[round(x, 5) for x in result['cost_curve']['seconds']]} s"
    )
    for name, c in result["prepared_cost_curves"].items():
        print(
            f"{name}'s own curve, measured in {result['prepare_s']} s: c(k) at k={c['ks']}: "
            f"{[round(x, 5) for x in c['seconds']]} s"
        )
    table = report.markdown(result["summary"], result["model"])
    print(table)
    if result["mismatches"]:
        print(
            "OUTPUTS DIFFERING FROM VANILLA (greedy) OR FROM THE LOOP'S PLAIN STEPS WITH THE SAME SEED (sampled):",
            json.dumps(result["mismatches"]),
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    if args.markdown:
        args.markdown.write_text(table)
    if args.plot:
        report.plot(result["summary"], args.plot, result["model"])
    return result


def _main_batches(parser, args):
    if any(b < 1 for b in args.batch_size):
        parser.error("--batch-size must hold ints >= 1")
    suites = args.suite or ["code_edit", "summarization", "rag", MIXED]
    model, tokenizer = load_model(args.model, dtype=args.dtype, device=args.device)
    with calibration_progress() as tell:
        calibrate(model, tell, output_layer=True)
    _warm_up(model, tokenizer)
    rows = batch_run.run_batches(model, tokenizer, suites, args.batch_size, args.limit, args.max_new_tokens)
    table = batch_run.markdown(rows, args.model)
    print(table)
    result = {"model": args.model, "provenance": provenance(), "batches": rows, "max_new_tokens": args.max_new_tokens}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    if args.markdown:
        args.markdown.write_text(table)
    return result


if __name__ == "__main__":
    main()

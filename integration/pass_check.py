"""Which verification passes give the logits that one-token steps give, on the model's actual device.

Exactness rests on a pass over 1 + k tokens producing, row by row, the logits that k + 1 one-token decode steps
would. On the CPU that holds at every length: the test suite checks it against ``generate`` and every benchmark
run checks it on the real models. On a GPU it did not. Gemma 3 270M in fp32 on an NVIDIA H200 (torch 2.11 with
CUDA 13, transformers 5.24; ``docs/evidence.md``, "On a GPU") gave logits 0.47 off (relative to
the largest) for a pass over exactly 33 tokens, while passes over 32, 48 and 64 tokens were exact to 2e-6;
transformers' own cache and plain linear layers did the same, and a Llama-shaped model did not. Drafts of 32
tokens were then rejected at once and outputs differed from ``generate``'s.

The draft traces of that run point at the last row: a draft of 64 tokens was accepted whole and the pass's own
next token (its 65th row) was wrong. So on any device but the CPU the loop checks, once per model/device/dtype/
threads (cached on disk with the cost curve), every pass length up to ``1 + max_draft`` on random contexts
against one-token steps, and never drafts a length whose pass failed (``calibration.cached_inexact_drafts``);
the adaptive policy chooses among the others, any other proposer's draft is cut to the longest exact length.
A failure is logged as a warning.
"""

import contextlib
import logging
import math

import torch

from . import kv_cache
from .fastpass.linear_plan import planned_linears
from .fastpass.timing_rounds import step_counter

logger = logging.getLogger(__name__)
_WARNED_ROUNDING = set()  # (device, dtype) pairs warned about once per process

MAX_DRAFT = 64  # the adaptive policy's default largest draft: lengths up to it (or a config's larger one) are checked
CONTEXTS = (97, 300)  # two prefill lengths, so that one lucky alignment does not pass a broken length


def full_precision(dtype):
    """Whether a pass in ``dtype`` rounds as finely as fp32 with fp32 products: 16-bit types, and fp32 with TF32
    or bf16 matrix products allowed (``torch.set_float32_matmul_precision``), round ~1e-2 off, so that a pass
    over several tokens and one-token steps can order two near-tied logits differently."""
    return torch.finfo(dtype).bits >= 32 and torch.get_float32_matmul_precision() == "highest"


def tolerance(dtype):
    """The largest relative logit difference a correct pass shows: fp32 rounding is ~1e-6, 16-bit ~1e-2."""
    return 1e-3 if full_precision(dtype) else 0.1


@torch.no_grad()
def pass_errors(model, context, max_draft=MAX_DRAFT, plans=None, seed=0):
    """``{q: error}`` for q = 2 .. 1 + ``max_draft``: the largest difference between the logits of one pass
    over q tokens and those of q one-token steps, after ``context`` cached random tokens, relative to the
    largest step logit. Run as the loop runs: the model's cache for generation, ``plans`` installed."""
    if not isinstance(context, int) or isinstance(context, bool) or context < 1:
        raise ValueError(f"context must be a positive int, got {context!r}")
    if not isinstance(max_draft, int) or isinstance(max_draft, bool) or max_draft < 1:
        raise ValueError(f"max_draft must be a positive int, got {max_draft!r}")
    vocab = model.config.get_text_config().vocab_size
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (1, context + max_draft + 1), generator=g).to(model.device)
    cache = kv_cache.new_cache(model, context + max_draft + 1)
    positions = torch.arange(context + max_draft + 1, device=model.device)[None]
    errors = {}
    with planned_linears(model, plans) if plans is not None else contextlib.nullcontext():
        model(input_ids=tokens[:, :context], cache=cache, use_cache=True, logits_to_keep=1)
        kv_cache.start_recording(cache)
        steps = torch.cat(
            [
                model(
                    input_ids=tokens[:, i : i + 1],
                    position_ids=positions[:, i : i + 1],
                    cache=cache,
                    use_cache=True,
                    logits_to_keep=1,
                )
                .logits[0]
                .float()
                for i in range(context, context + max_draft + 1)
            ]
        )
        kv_cache.rollback(cache, max_draft + 1)
        scale = steps.abs().max().clamp_min(torch.finfo(torch.float32).tiny)
        for q in range(2, max_draft + 2):
            logits = (
                model(
                    input_ids=tokens[:, context : context + q],
                    position_ids=positions[:, context : context + q],
                    cache=cache,
                    use_cache=True,
                    logits_to_keep=q,
                )
                .logits[0]
                .float()
            )
            kv_cache.rollback(cache, q)
            errors[q] = float((logits - steps[:q]).abs().max() / scale)
    return errors


def measure_inexact_drafts(model, max_draft=MAX_DRAFT, contexts=None, plans=None, progress=None):
    """The draft lengths k (1 .. ``max_draft``) whose pass over 1 + k tokens did not match one-token steps on
    every context in ``contexts`` (default ``CONTEXTS``), as a sorted tuple; empty where every length is exact.
    ``progress(done, total)``, if given, after each context."""
    contexts = CONTEXTS if contexts is None else contexts
    config = model.config.get_text_config()
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if isinstance(limit, int) and limit > max_draft + 2:  # every position checked is one the model has
        contexts = sorted({min(c, limit - max_draft - 1) for c in contexts})
    tol = tolerance(model.dtype)
    worst = {}
    tick = step_counter(progress, len(contexts))
    for context in contexts:
        for q, err in pass_errors(model, context, max_draft, plans).items():
            prev = worst.get(q, 0.0)
            if not math.isnan(prev) and not err <= prev:  # a NaN, once seen, stays the worst
                worst[q] = err
        if tick is not None:
            tick()
    bad = tuple(q - 1 for q in sorted(worst) if not worst[q] <= tol)  # NaN fails too
    if bad:
        logger.warning(
            "on %s (%s) passes over %s tokens gave logits up to %.3g off (relative; tolerance %.0e): "
            "drafts of %s tokens are never made, so that outputs stay exact",
            model.device,
            model.dtype,
            [k + 1 for k in bad],
            max(worst[k + 1] for k in bad),
            tol,
            list(bad),
        )
    return bad


def exact_length(n, inexact, checked):
    """The longest draft length <= ``n`` and <= ``checked`` (the longest length checked) not in ``inexact`` (0,
    a plain step, always is)."""
    n = min(n, checked)
    while n > 0 and n in inexact:
        n -= 1
    return n


def warn_coarse_rounding(model):
    """Once per device and dtype: token-for-token equality with ``generate`` holds where passes round as fp32
    does. In 16-bit (or with TF32 products) a pass over several tokens rounds ~1e-2 differently from a one-token
    step, so where the model's two best next tokens tie within that, the two can pick differently, as
    transformers' own prompt lookup does (SmolLM2-135M in bf16 on the CPU: 3 and 4 of 6 greedy outputs left
    ``generate``'s within 96 tokens)."""
    key = (str(model.device), str(model.dtype))
    if full_precision(model.dtype) or key in _WARNED_ROUNDING:
        return
    _WARNED_ROUNDING.add(key)
    logger.warning(
        "%s on %s rounds a multi-token pass ~1e-2 differently from a one-token step: greedy outputs "
        "follow generate's except where two tokens tie within that rounding (fp32 with full-precision "
        "matrix products is token for token)",
        model.dtype,
        model.device,
    )

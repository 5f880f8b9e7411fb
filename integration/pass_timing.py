"""Timing one verification pass at a given draft length after a context of cached positions, as the calibration
(``calibration.measure_cost_curve``) and the benchmarks that time passes do, and which timed lengths to time again.

The context is one token prefilled, then random keys and values appended to every layer of the cache
(``fill_context``): a pass's time depends on how many positions it attends to, not on what they hold, and a
256-token prefill is a pass over 256 rows, the dearest step of a first calibration after the longest timed pass
(Gemma 3 270M on a 2-core CPU: 0.55-0.69 s, against 0.09 s for one token and the fill).
"""

import contextlib
import functools
import threading
import time
import weakref

import torch

from draftless.index.validation import check_positive_int

from . import kv_cache


def fill_context(cache, positions, generator):
    """Append random keys and values to each layer of ``cache`` (each holding the same positions, at least one)
    until it holds ``positions`` (a sliding-window layer keeps its window of them, as after a prefill); the
    tensors shaped and typed like the layer's own."""
    positions = check_positive_int(positions, "positions")
    for i, layer in enumerate(cache.layers):
        held = cache.get_seq_length(i)
        if held < 1 or held > positions:
            raise ValueError(
                f"layer {i} holds {held} positions: fill_context appends to a prefilled cache up to "
                f"positions={positions}"
            )
        more = positions - held
        if more == 0:
            continue
        keys, values = layer.keys, layer.values
        new_keys = torch.randn((*keys.shape[:-2], more, keys.shape[-1]), generator=generator).to(keys)
        new_values = torch.randn((*values.shape[:-2], more, values.shape[-1]), generator=generator).to(values)
        layer.update(new_keys, new_values)


@torch.no_grad()
def pass_timers(model, ks, context=256, staging=None, screen=None):
    """Zero-argument callables, one per draft length in ``ks``, each timing one pass over ``1 + k`` random tokens
    after ``context`` cached positions (``time_pass``; the cache rolled back after each): one random token
    prefilled, the rest random keys and values (``fill_context``). ``staging``, a ``StagedHead``, is told at the
    prefill whether the model's logits are its output layer's; so is ``screen``, a ``ScreenedHead``, and where
    it serves, the passes it would screen in a greedy run are timed screened."""
    context = check_positive_int(context, "context")
    vocab = model.config.get_text_config().vocab_size
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, vocab, (1, 1), generator=g).to(model.device)
    cache = kv_cache.new_cache(model, context + max(ks) + 1)
    with (
        staging.installed() if staging is not None else contextlib.nullcontext(),
        screen.checking_prefill() if screen is not None else contextlib.nullcontext(),
    ):
        out = model(input_ids=prompt, cache=cache, use_cache=True, logits_to_keep=1)
        if staging is not None:
            staging.check_prefill(out.logits)
    if screen is not None and not screen.check_prefill(out.logits):
        screen = None
    fill_context(cache, context, g)
    kv_cache.start_recording(cache)
    inputs = [torch.randint(0, vocab, (1, k + 1), generator=g).to(model.device) for k in ks]
    return [
        functools.partial(
            time_pass,
            model,
            cache,
            ids,
            context,
            screen if screen is not None and screen.screens(ids.shape[1]) else None,
        )
        for ids in inputs
    ]


def time_pass(model, cache, ids, context, screen=None):
    """Seconds of one pass over ``ids`` after ``context`` cached positions (rolled back afterwards), its output
    layer screened by ``screen`` if given (``ScreenedHead.choosing``)."""
    q = ids.shape[1]
    positions = torch.arange(context, context + q, device=model.device)[None]
    choosing = screen.choosing(timing=True) if screen is not None else contextlib.nullcontext()
    t0 = time.perf_counter()
    with choosing:
        model(input_ids=ids, position_ids=positions, cache=cache, use_cache=True, logits_to_keep=q)
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    kv_cache.rollback(cache, q)
    return elapsed


def slower_than_longer(seconds):
    """The indices of ``seconds`` (pass times at increasing lengths) slower than a later one: on a CPU a longer
    pass costs less only where the shorter one pads its rows (a row count just past a multiple of 8, or 3 rows
    padded to 4), so such a time is more likely a pass slowed by another process."""
    tail = float("inf")
    out = []
    for i in range(len(seconds) - 1, -1, -1):
        if seconds[i] > tail:
            out.append(i)
        tail = min(tail, seconds[i])
    return out[::-1]


_PASSED = weakref.WeakSet()  # the models a generation loop of this process has made a pass with
_PASSED_LOCK = threading.Lock()


def seconds_to_learn_from(seconds, model):
    """The seconds the generation loop tells the cost model a pass of ``model`` took: ``seconds``, except for the
    model's first pass in the process, which tells 0 (``OnlineCost.observe`` ignores it, a replay from
    ``GenerationStats.pass_seconds`` likewise). That pass runs slow by one-time work (11-12 % over the ones after it
    for Gemma 3 270M on a 2-core Xeon); with ``first_level`` it set the scale outright, the passes after it came in
    under the prediction, and the lengths they drafted learned a lower multiplier that the rare plain steps hardly
    took back. Kept on disk, every short process pushed those knots down again: 16 processes of one 96-token
    generate each took Gemma's k = 2 and k = 32 knots to 0.66 and 0.69 and still falling, against 0.85-0.91 and
    1.0, steady, once this pass went untold (``docs/evidence.md``)."""
    if model in _PASSED:  # every pass after the first: one set lookup
        return seconds
    with _PASSED_LOCK:  # two threads' first passes: one of them is the first
        first = model not in _PASSED
        _PASSED.add(model)
    return 0.0 if first else seconds

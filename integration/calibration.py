"""Calibrating the target's cost curve c(k): seconds of one verification pass over 1 + k tokens.

Measured once for the actual model, device, dtype and thread count (a second or two on a small model) and
cached on disk under the user cache dir, keyed by all four (and the torch version): a changed dtype or
thread count recalibrates. The adaptive policy then scales the curve online by the passes the run makes.
"""

import hashlib
import json
import logging
import statistics
import time

import torch

from draftless.lookup.cost_model import CostCurve

from . import kv_cache
from .models import cache_root

logger = logging.getLogger(__name__)

DEFAULT_KS = (0, 1, 4, 16, 32, 64)


def calibration_key(model):
    """What the curve depends on: the architecture, device, dtype, thread count and torch version."""
    parts = {
        "config": model.config.to_json_string(use_diff=False),
        "device": str(model.device), "dtype": str(model.dtype), "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


@torch.no_grad()
def measure_cost_curve(model, ks=DEFAULT_KS, context=256, repeats=3):
    """Median pass time at each draft length in ``ks`` after a ``context``-token prefill."""
    if not ks or ks[0] != 0:
        raise ValueError(f"ks must start at 0, got {ks}")
    vocab = model.config.get_text_config().vocab_size
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, vocab, (1, context), generator=g).to(model.device)
    cache = kv_cache.new_cache(model)
    model(input_ids=prompt, cache=cache, use_cache=True, logits_to_keep=1)
    kv_cache.start_recording(cache)
    seconds = []
    for k in ks:
        ids = torch.randint(0, vocab, (1, k + 1), generator=g).to(model.device)
        positions = torch.arange(context, context + k + 1, device=model.device)[None]
        times = []
        for _ in range(repeats + 1):  # the first run of each shape warms up
            t0 = time.perf_counter()
            model(input_ids=ids, position_ids=positions, cache=cache, use_cache=True, logits_to_keep=k + 1)
            if model.device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            kv_cache.rollback(cache, k + 1)
        seconds.append(statistics.median(times[1:]))
    for i in range(1, len(seconds)):  # noise must not make a longer pass look cheaper
        seconds[i] = max(seconds[i], seconds[i - 1])
    return CostCurve(tuple(ks), tuple(seconds))


_MEMO = {}  # (cache path, ks) -> curve: one disk read per process


def cached_cost_curve(model, ks=DEFAULT_KS):
    """The calibrated curve for this model/device/dtype/threads, measuring it on first use."""
    path = cache_root() / "calibration" / f"{calibration_key(model)}.json"
    memo_key = (str(path), tuple(ks))
    if memo_key not in _MEMO:
        _MEMO[memo_key] = _load_or_measure(model, path, tuple(ks))
    return _MEMO[memo_key]


def _load_or_measure(model, path, ks):
    if path.exists():
        try:
            data = json.loads(path.read_text())
            if tuple(data["ks"]) == ks:
                return CostCurve(tuple(data["ks"]), tuple(data["seconds"]))
        except (ValueError, KeyError, TypeError):
            logger.warning("ignoring an unreadable calibration file %s", path)
    curve = measure_cost_curve(model, ks)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"ks": list(curve.ks), "seconds": list(curve.seconds)}))
    logger.info("calibrated c(k) for %s: %s", path.stem, curve)
    return curve

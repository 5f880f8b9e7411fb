"""Which weights a linear layer's forms are timed over (``linear_plan``): enough to stream past the last-level
cache, as a pass streams every layer, and no more, so that a shape's plan costs a fraction of timing every layer
of it (Gemma 3 270M's 262k-row output layer alone is 671 MB)."""

import glob

import torch

from draftless.index.validation import check_positive_int

# a shape's forms are timed over at least this many bytes of weights, and at least twice the last-level cache,
# so that the timed weights stream from memory as in a pass (on a CPU with a 32 MiB cache, 32 MiB in two rounds
# chose Gemma 3 270M's plans up to 30 % slower at 3-9 rows; 64 MiB in three rounds, passes as fast as its whole
# 189 MB of MLP and 671 MB of output layer did)
MIN_PROBE_BYTES = 64 << 20
# where a shape's layers fill at most this share of the last-level cache, they stay in it while the race streams
# them over and over: no probe makes them cold, and timing over all of them costs time and tells no more than
# ``MIN_PROBE_BYTES`` does. On a 2-core Xeon with a 480 MiB cache (Gemma 3 270M's 189 MB of 2048 x 640
# layers, SmolLM2-135M's 212 MB of 1536 x 576), a probe of 64 MiB rather than all of a shape's layers took the
# plans from 2.53-2.56 s to 1.29-1.38 s (Gemma) and 2.49-2.82 s to 1.10-1.12 s (SmolLM2), chose the same plans
# but for one wide range and one padded row count, and whole passes under them summed over k = 0, 1, 2, 3, 7, 15,
# 31 and 63 took 549 and 547 ms against 552 and 552 (Gemma), 438 and 434 against 435 and 431 (SmolLM2);
# ``experiments.plan_regret --greedy`` against a 960 MiB truth: the linear layers 1.39 % slower than the fastest
# plans' against 1.24 % (Gemma), 1.21 against 1.23 % (SmolLM2), four calibrations each. An earlier 26 % from a
# 64 MiB probe on that host was the output layer's (671 MB, larger than the cache: still timed over twice it)
WARM_SHARE = 0.5


def last_level_cache_bytes(device):
    """The size of the last-level cache in front of ``device``'s memory: the GPU's L2, the CPU's largest cache
    (from sysfs); 0 where unknown."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0))
    if device.type != "cpu":
        return 0
    best = 0
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            with open(path) as f:
                text = f.read().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            best = max(best, int(digits) * scale)
    return best


def probe_bytes(device, held=None):
    """How many bytes of weights each shape's forms are timed over on ``device``: ``MIN_PROBE_BYTES`` or twice the
    last-level cache, whichever is more; but only ``MIN_PROBE_BYTES`` where the shape's layers (``held`` bytes of
    weights, if given) fill at most ``WARM_SHARE`` of the cache (see there)."""
    cache = last_level_cache_bytes(device)
    if held is not None and cache and held <= WARM_SHARE * cache:
        return MIN_PROBE_BYTES
    return max(MIN_PROBE_BYTES, 2 * cache)


def part_bytes(part):
    """The bytes of weights in ``part`` (a list of ``(weight, bias)`` pairs)."""
    return sum(w.numel() * w.element_size() for w, _ in part)


def probe_weights(modules, nbytes):
    """``(weight, bias)`` pairs to time a shape's forms over: ``modules``' in turn until ``nbytes`` of weights
    are reached (all of them where they hold less), or, where one weight alone holds more, a slice of its output
    rows of about ``nbytes`` (a product's speed per row does not depend on how many output rows it has, once
    they stream from memory)."""
    return probe_parts(modules, nbytes, 1)[0]


def probe_parts(modules, nbytes, parts):
    """Up to ``parts`` disjoint lists of ``(weight, bias)`` pairs, each of about ``nbytes / parts`` bytes as
    ``probe_weights`` takes them (whole layers in turn, or a slice of one layer's output rows), all of the same
    bytes, so that a form timed over one part is timed as over another. Timing each form over the next part in
    turn streams ``nbytes / parts`` a product rather than ``nbytes``, and reads a part again only after the
    others streamed past it. Fewer parts where the layers hold fewer (never an empty one)."""
    nbytes = check_positive_int(nbytes, "nbytes")
    parts = check_positive_int(parts, "parts")
    weight = modules[0].weight
    row_bytes = weight.shape[1] * weight.element_size()
    per_part = -(-nbytes // parts)
    if weight.shape[0] * row_bytes > per_part:  # a slice of rows a part, from one layer or several
        rows = -(-per_part // row_bytes)  # at most the layer's rows: per_part < its bytes
        slices = [(m, i) for m in modules for i in range(0, m.weight.shape[0] - rows + 1, rows)]
        return [[(m.weight[i : i + rows], None if m.bias is None else m.bias[i : i + rows])] for m, i in slices[:parts]]
    count = -(-per_part // (weight.shape[0] * row_bytes))  # whole layers a part
    if count * parts > len(modules):
        count = max(1, len(modules) // parts)
    return [
        [(m.weight, m.bias) for m in modules[j * count : (j + 1) * count]]
        for j in range(min(parts, len(modules) // count))
    ]

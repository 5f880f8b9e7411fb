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


def probe_bytes(device):
    """How many bytes of weights each form is timed over on ``device``: ``MIN_PROBE_BYTES`` or twice the
    last-level cache, whichever is more."""
    return max(MIN_PROBE_BYTES, 2 * last_level_cache_bytes(device))


def probe_weights(modules, nbytes):
    """``(weight, bias)`` pairs to time a shape's forms over: ``modules``' in turn until ``nbytes`` of weights
    are reached (all of them where they hold less), or, where one weight alone holds more, a slice of its output
    rows of about ``nbytes`` (a product's speed per row does not depend on how many output rows it has, once
    they stream from memory)."""
    weight = modules[0].weight
    nbytes = check_positive_int(nbytes, "nbytes")
    size = weight.numel() * weight.element_size()
    if size > nbytes:
        rows = -(-nbytes // (weight.shape[1] * weight.element_size()))  # at least 1: nbytes >= 1
        bias = modules[0].bias
        return [(weight[:rows], None if bias is None else bias[:rows])]
    count = min(len(modules), -(-nbytes // size))
    return [(m.weight, m.bias) for m in modules[:count]]

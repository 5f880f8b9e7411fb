"""KV caches that can be rolled back to the accepted prefix after each verification pass."""

from transformers.cache_utils import (
    Cache, DynamicCache, DynamicLayer, DynamicSlidingWindowLayer, StaticLayer, StaticSlidingWindowLayer,
)

# Layer types whose crop() really restores the earlier state. Quantised, offloaded, linear-attention and
# other layers are refused before generation starts rather than risk a wrong answer.
_ROLLBACK_SAFE = (DynamicLayer, DynamicSlidingWindowLayer, StaticLayer, StaticSlidingWindowLayer)


def new_cache(model):
    """The cache ``generate`` would build: dynamic, with sliding-window layers where the model has them."""
    return DynamicCache(config=model.config)


def check_rollback(cache, max_positions):
    """Raise ``ValueError`` unless ``cache`` is empty and can be cropped back after any pass that writes up to
    ``max_positions`` positions in all."""
    if not isinstance(cache, Cache):
        raise TypeError(f"cache must be a transformers Cache, got {type(cache).__name__}")
    if cache.get_seq_length() != 0:
        raise ValueError("cache must be empty: draftless cannot continue from a pre-filled cache")
    for i, layer in enumerate(cache.layers):
        if type(layer) not in _ROLLBACK_SAFE:
            raise ValueError(f"cache layer {i} ({type(layer).__name__}) cannot be rolled back after a rejected "
                             "draft; use a DynamicCache or a StaticCache")
        if isinstance(layer, StaticSlidingWindowLayer):
            if not layer.is_croppable or max_positions > layer.max_cache_len:
                raise ValueError(
                    f"cache layer {i} is a static sliding window of {layer.max_cache_len} positions, which cannot "
                    f"be rolled back once it wraps; this generation may need {max_positions}. Use a DynamicCache")
        elif isinstance(layer, StaticLayer) and layer.max_cache_len < max_positions:
            raise ValueError(f"cache has room for {layer.max_cache_len} positions; this generation may need "
                             f"{max_positions} (prompt + new tokens)")


def start_recording(cache):
    """After the prefill: keep sliding-window states until the next crop, so rejected drafts can be undone."""
    cache.activate_past_recording()


def rollback(cache, rejected):
    """Drop the ``rejected`` newest positions (0 still trims sliding-window layers back to their window)."""
    cache.crop(-int(rejected))

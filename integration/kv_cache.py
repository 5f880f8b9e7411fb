"""KV caches that can be rolled back to the accepted prefix after each verification pass.

The loop's own cache is ``generate``'s dynamic cache with every full-attention layer a ``ReservedLayer``:
transformers' ``DynamicLayer`` appends by ``torch.cat``, which copies the whole layer's keys and values on every
pass (on a 2-core CPU, SmolLM2-135M at 2,048 cached positions, under ``torch.profiler``: 6-69 ms of a 56-101 ms
pass, the spread being the allocator's). A reserved layer writes new positions into room set aside once and
rolls back by moving its length, so appending costs what the new positions hold whatever the context; what
still grows with the context is attention itself.
"""

import functools

from transformers.cache_utils import (
    Cache,
    DynamicCache,
    DynamicLayer,
    DynamicSlidingWindowLayer,
    StaticLayer,
    StaticSlidingWindowLayer,
)

from .generation_plan import UnsupportedGeneration


class ReservedLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values are views of the first ``length`` positions of buffers with room
    for more. Invariant: ``keys``/``values`` are ``buffer[:, :, :length]``; positions past ``length`` are unused.
    Whenever room runs out it is set to twice what is needed (amortised O(1) a position),
    never past ``limit`` (the most positions the caller will write) unless an update needs more."""

    def __init__(self, limit=None):
        super().__init__()
        self.limit = None if limit is None else int(limit)
        self.length = 0
        self._keys = self._values = None

    def lazy_initialization(self, key_states, value_states):
        super().lazy_initialization(key_states, value_states)
        self.length = 0
        self._keys = self._values = None

    def _room_for(self, need):
        """How many positions to set aside once ``need`` are wanted: twice that, within ``limit`` unless ``need``
        is past it (then doubling again, so that appends stay amortised O(1))."""
        room = 2 * need
        return room if self.limit is None or need > self.limit else min(room, self.limit)

    def _reserve(self, buffer, like, room):
        grown = like.new_empty(*like.shape[:-2], room, like.shape[-1])
        if buffer is not None:
            grown[..., : self.length, :] = buffer[..., : self.length, :]
        return grown

    def _expose(self):
        self.keys = self._keys[..., : self.length, :]
        self.values = self._values[..., : self.length, :]

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        need = self.length + key_states.shape[-2]
        if self._keys is None or need > self._keys.shape[-2]:
            room = self._room_for(need)
            self._keys = self._reserve(self._keys, key_states, room)
            self._values = self._reserve(self._values, value_states, room)
        self._keys[..., self.length : need, :] = key_states
        self._values[..., self.length : need, :] = value_states
        self.length = need
        self._expose()
        return self.keys, self.values

    def get_seq_length(self):
        return self.length if self.is_initialized else 0

    def reset(self):
        self.length = 0
        self._keys = self._values = None
        super().reset()

    def crop(self, tokens_to_remove):
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes the number of tokens to remove as a negative int, got {tokens_to_remove}")
        if tokens_to_remove == 0 or not self.is_initialized or self._keys is None:
            return
        self.length = max(0, self.length - abs(int(tokens_to_remove)))
        self._expose()

    def _adopt(self, keys, values):
        """Take ``keys``/``values`` (batch reordered or repeated) as the new buffers, filled to their length."""
        self._keys, self._values = keys.contiguous(), values.contiguous()
        self.length = self._keys.shape[-2]
        self._expose()

    def reorder_cache(self, beam_idx):
        if self.get_seq_length() > 0:
            self._adopt(
                self.keys.index_select(0, beam_idx.to(self.keys.device)),
                self.values.index_select(0, beam_idx.to(self.values.device)),
            )

    def batch_repeat_interleave(self, repeats):
        if self.get_seq_length() > 0:
            self._adopt(self.keys.repeat_interleave(repeats, dim=0), self.values.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices):
        if self.get_seq_length() > 0:
            self._adopt(self.keys[indices, ...], self.values[indices, ...])


# Layer types whose crop() really restores the earlier state. Quantised, offloaded, linear-attention and
# other layers are refused before generation starts rather than risk a wrong answer.
_ROLLBACK_SAFE = (DynamicLayer, ReservedLayer, DynamicSlidingWindowLayer, StaticLayer, StaticSlidingWindowLayer)


def new_cache(model, max_positions=None):
    """The cache ``generate`` would build (dynamic, with sliding-window layers where the model has them), its
    full-attention layers ``ReservedLayer``s that never set aside room past ``max_positions``."""
    if max_positions is not None and (
        isinstance(max_positions, bool) or not isinstance(max_positions, int) or max_positions < 1
    ):
        raise ValueError(f"max_positions must be a positive int or None, got {max_positions!r}")
    cache = DynamicCache(config=model.config)
    reserve_room(cache, max_positions)
    return cache


def reserve_room(cache, max_positions):
    """Make each plain ``DynamicLayer`` of ``cache`` a ``ReservedLayer`` holding the same keys and values (the
    ``Cache`` object stays the same), and so the layers made on first use: the loop's own cache, and a caller's
    continued from an earlier turn, then append without copying every layer whole on each pass."""
    for i, layer in enumerate(cache.layers):
        if type(layer) is DynamicLayer:
            reserved = ReservedLayer(limit=max_positions)
            if layer.is_initialized:
                reserved.lazy_initialization(layer.keys, layer.values)
                reserved._adopt(layer.keys, layer.values)  # room is set aside at the first update
            cache.layers[i] = reserved
    if getattr(cache, "layer_class_to_replicate", None) is DynamicLayer:
        cache.layer_class_to_replicate = functools.partial(ReservedLayer, limit=max_positions)


def layers_without_rollback(cache):
    """``(index, type name)`` of each of ``cache``'s layers whose ``crop`` does not restore an earlier state
    (recurrent and linear-attention states, quantised and offloaded layers): empty where every layer can be
    rolled back."""
    return [(i, type(layer).__name__) for i, layer in enumerate(cache.layers) if type(layer) not in _ROLLBACK_SAFE]


def check_model_cache(model):
    """Refuse, by name, a model whose own cache is not one decoder's that a rejected draft can be taken out of:
    an encoder-decoder's (T5), or one that keeps a recurrent or linear-attention state (Mamba, RecurrentGemma,
    Falcon-H1)."""
    if getattr(getattr(model, "config", None), "is_encoder_decoder", False):
        raise UnsupportedGeneration(
            f"{type(model).__name__} is an encoder-decoder model; draftless serves decoder-only causal language models"
        )
    blocked = layers_without_rollback(new_cache(model))
    if blocked:
        names = ", ".join(sorted({name for _, name in blocked}))
        raise UnsupportedGeneration(
            f"{type(model).__name__} keeps a recurrent or linear-attention state ({names}) that cannot be rolled "
            f"back after a rejected draft, so draftless cannot verify drafts on it; use its own generate"
        )


def check_rollback(cache, max_positions):
    """Raise ``ValueError`` unless ``cache`` can be cropped back after any pass that writes up to
    ``max_positions`` positions in all."""
    if not isinstance(cache, Cache):
        raise TypeError(f"cache must be a transformers Cache, got {type(cache).__name__}")
    blocked = layers_without_rollback(cache)  # first: such layers may lack get_seq_length
    if blocked:
        i, name = blocked[0]
        raise ValueError(
            f"cache layer {i} ({name}) cannot be rolled back after a rejected draft; use a "
            "DynamicCache or a StaticCache"
        )
    for i, layer in enumerate(cache.layers):
        if isinstance(layer, StaticSlidingWindowLayer):
            if not layer.is_croppable or max_positions > layer.max_cache_len:
                raise ValueError(
                    f"cache layer {i} is a static sliding window of {layer.max_cache_len} positions, which cannot "
                    f"be rolled back once it wraps; this generation may need {max_positions}. Use a DynamicCache"
                )
        elif isinstance(layer, StaticLayer) and layer.max_cache_len < max_positions:
            raise ValueError(
                f"cache has room for {layer.max_cache_len} positions; this generation may need "
                f"{max_positions} (prompt + new tokens)"
            )


def cached_prefix(cache, prompt_length):
    """How many of the prompt's first positions ``cache`` already holds: 0 for a new cache, more for a caller's
    cache from an earlier turn, which ``generate`` continues by computing only the prompt tokens after them."""
    held = int(cache.get_seq_length())
    if held >= prompt_length:  # generate has no defined answer here: nothing is left to compute the next token
        raise UnsupportedGeneration(
            f"cache already holds {held} positions and input_ids has {prompt_length} "
            f"tokens; draftless continues a cache from at least one token after it"
        )
    return held


def start_recording(cache):
    """After the prefill: keep sliding-window states until the next crop, so rejected drafts can be undone."""
    cache.activate_past_recording()


def rollback(cache, rejected):
    """Drop the ``rejected`` newest positions (0 still trims sliding-window layers back to their window)."""
    cache.crop(-int(rejected))

"""The KV cache of a batch whose rows accept different numbers of draft tokens per pass.

Every row is kept as ``generate`` keeps a left-padded batch: its tokens fill the cache's last columns without a
gap, and the columns before them are masked out. After a pass that wrote ``width`` new columns in every row, row r
keeps the first ``kept[r]`` of them; ``realign`` cuts the cache at the most any row kept and moves each row that
kept fewer to the right by the difference, so that the rows end together again, then drops the leading columns
that every row masks. Attention, sliding windows included, then sees each row exactly as ``generate`` would: a
window over a row's last tokens holds no hole, and the cache is never longer than the longest row.

Why moving rows and not leaving rejected columns in place, masked: a hole inside a row shifts a sliding window
(Gemma 3) off the row's real tokens, and holes make every later pass attend over columns that hold nothing. The
moves cost no copy of their own: a ``MovingLayer`` notes them and makes them in the copy that appending the next
pass's columns makes anyway (a ``DynamicLayer`` concatenates its whole cache with them on every pass).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer


class MovingLayer(DynamicLayer):
    """A ``DynamicLayer`` whose rows can be moved right and its leading columns dropped lazily (``move``): the moves
    are made while the next ``update`` copies the cache to append its columns.

    Invariant: the layer's logical cache is ``keys``/``values`` (rows x heads x ``stored`` x size) with each row r
    read from column ``start - shift[r]`` on, ``length`` columns in all (those before ``shift[r] - start`` zero);
    ``moves`` is None where the stored tensors are the logical cache itself."""

    def __init__(self) -> None:
        super().__init__()
        self.moves: tuple[list[int], int, int] | None = None  # (shift per row, start, length)

    def move(self, shifts: list[int], start: int, length: int) -> None:
        """Row r's column c becomes column ``c + shifts[r] - start``, the logical cache ``length`` columns long
        (``shifts`` and ``start`` on top of the moves not yet made)."""
        if self.moves is not None:
            self.materialize()
        if start == 0 and not any(shifts) and self.keys.shape[-2] == length:
            return  # nothing moves (every row kept the whole pass): the next append is ``DynamicLayer``'s own
        self.moves = (list(shifts), int(start), int(length))

    def _moved(self, stored: torch.Tensor, extra: torch.Tensor | None) -> torch.Tensor:
        shifts, start, length = self.moves
        rows, heads, _, size = stored.shape
        width = 0 if extra is None else extra.shape[-2]
        out = stored.new_empty((rows, heads, length + width, size))
        for r, shift in enumerate(shifts):
            first = max(shift - start, 0)  # the row's first column in the moved cache
            source = max(start - shift, 0)
            out[r, :, first:length] = stored[r, :, source : source + length - first]
            if first:
                out[r, :, :first] = 0
        if extra is not None:
            out[:, :, length:] = extra
        return out

    def materialize(self) -> None:
        """Make the noted moves now."""
        if self.moves is not None:
            self.keys, self.values = self._moved(self.keys, None), self._moved(self.values, None)
            self.moves = None

    def update(self, key_states, value_states, *args, **kwargs):
        if self.moves is None or not self.is_initialized:
            return super().update(key_states, value_states, *args, **kwargs)
        self.keys, self.values = self._moved(self.keys, key_states), self._moved(self.values, value_states)
        self.moves = None
        return self.keys, self.values

    def get_seq_length(self) -> int:
        if self.moves is not None:
            return self.moves[2]
        return super().get_seq_length()


def new_batch_cache() -> DynamicCache:
    """A dynamic cache of ``MovingLayer``s, each keeping all its positions: a sliding-window layer's window is the
    model's attention mask's, applied over the cache's columns (a ``DynamicSlidingWindowLayer`` would drop the
    columns that a row moved right still needs)."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = MovingLayer
    return cache


def _layers(cache):
    return [layer for layer in cache.layers if layer.is_initialized]


def realign(cache, mask: torch.Tensor, width: int, kept: list[int]) -> torch.Tensor:
    """After a pass that appended ``width`` columns to every row, keep row r's first ``kept[r]`` (1 to ``width``)
    and right-align the rows; returns the new column mask (1: a token, 0: padding), the old one being ``mask``
    (rows x columns before the pass). The cache's layers make the moves in their next append."""
    rows, before = mask.shape
    most = max(kept)
    length = before + most
    moved = torch.zeros((rows, length), dtype=mask.dtype, device=mask.device)
    shifts = [most - k for k in kept]
    for r, shift in enumerate(shifts):
        moved[r, shift:] = torch.cat([mask[r], mask.new_ones(length - shift - before)])
    held = moved.any(dim=0).nonzero()
    start = int(held[0]) if held.numel() else length
    for layer in _layers(cache):
        layer.move(shifts, start, length - start)
    return moved[:, start:]


def keep_rows(cache, mask: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """Keep only ``rows`` (indices into the batch, in order): finished rows cost nothing more. Returns their mask,
    with the leading columns that every row left masks dropped."""
    index = torch.as_tensor(rows, dtype=torch.long, device=mask.device)
    mask = mask.index_select(0, index)
    held = mask.any(dim=0).nonzero()
    start = int(held[0]) if held.numel() else mask.shape[1]
    for layer in _layers(cache):
        layer.materialize()
        layer.keys = layer.keys.index_select(0, index.to(layer.keys.device))[:, :, start:]
        layer.values = layer.values.index_select(0, index.to(layer.values.device))[:, :, start:]
    return mask[:, start:]

"""The KV cache of a batch whose rows accept different numbers of draft tokens per pass.

Every row is kept as ``generate`` keeps a left-padded batch: its tokens fill the cache's last columns without a
gap, and the columns before them are masked out. After a pass that wrote ``width`` new columns in every row, row r
keeps the first ``kept[r]`` of them; ``realign`` cuts the cache at the most any row kept and moves each row that
kept fewer to the right by the difference, so that the rows end together again, then drops the leading columns
that every row masks. Attention, sliding windows included, then sees each row exactly as ``generate`` would: a
window over a row's last tokens holds no hole, and the cache is never longer than the longest row.

Why moving rows and not leaving rejected columns in place, masked: a hole inside a row shifts a sliding window
(Gemma 3) off the row's real tokens, and holes make every later pass attend over columns that hold nothing;
moving a row costs one copy of the rows that fell behind, which ``docs/batching.md`` measures against a pass.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer


def new_batch_cache() -> DynamicCache:
    """A dynamic cache whose every layer keeps all its positions: a sliding-window layer's window is the model's
    attention mask's, applied over the cache's columns (a ``DynamicSlidingWindowLayer`` would drop the columns
    that a row moved right still needs)."""
    return DynamicCache()


def check_batch_cache(cache) -> None:
    """Refuse a cache whose layers the batch cannot move row by row."""
    for i, layer in enumerate(cache.layers):
        if type(layer) is not DynamicLayer:
            raise TypeError(f"batch cache layer {i} is a {type(layer).__name__}; a batch keeps DynamicLayers")


def _layers(cache):
    return [layer for layer in cache.layers if layer.is_initialized]


def realign(cache, mask: torch.Tensor, width: int, kept: list[int]) -> torch.Tensor:
    """After a pass that appended ``width`` columns to every row, keep row r's first ``kept[r]`` (1 to ``width``)
    and right-align the rows; returns the new column mask (1: a token, 0: padding), the old one being ``mask``
    (rows x columns before the pass)."""
    rows, before = mask.shape
    most = max(kept)
    length = before + most
    mask = torch.cat([mask, mask.new_ones((rows, most))], dim=1)
    layers = _layers(cache)
    for layer in layers:  # every row keeps at most ``most`` of the new columns
        layer.keys = layer.keys[:, :, :length]
        layer.values = layer.values[:, :, :length]
    for r, k in enumerate(kept):
        shift = most - k
        if shift == 0:
            continue
        for layer in layers:
            layer.keys[r, :, shift:] = layer.keys[r, :, : length - shift].clone()
            layer.values[r, :, shift:] = layer.values[r, :, : length - shift].clone()
        mask[r, shift:] = mask[r, : length - shift].clone()
        mask[r, :shift] = 0
    return trim(cache, mask)


def trim(cache, mask: torch.Tensor) -> torch.Tensor:
    """Drop the leading columns that every row masks; returns the mask of the columns left."""
    held = mask.any(dim=0).nonzero()
    first = int(held[0]) if held.numel() else mask.shape[1]
    if first == 0:
        return mask
    for layer in _layers(cache):
        layer.keys = layer.keys[:, :, first:]
        layer.values = layer.values[:, :, first:]
    return mask[:, first:]


def keep_rows(cache, mask: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """Keep only ``rows`` (indices into the batch, in order): finished rows cost nothing more. Returns their mask,
    trimmed."""
    index = torch.as_tensor(rows, dtype=torch.long, device=mask.device)
    for layer in _layers(cache):
        layer.keys = layer.keys.index_select(0, index.to(layer.keys.device))
        layer.values = layer.values.index_select(0, index.to(layer.values.device))
    return trim(cache, mask.index_select(0, index))

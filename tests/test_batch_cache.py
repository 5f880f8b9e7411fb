"""The batch cache's lazy moves against the eager reference: every row right-aligned after a pass, leading columns
that every row masks dropped, finished rows removed."""

import numpy as np
import pytest
import torch

from draftless.integration.batch_cache import keep_rows, new_batch_cache, realign


def eager(keys, mask, width, kept):
    """The reference: row r keeps ``kept[r]`` of the ``width`` new columns, moved right to end with the others;
    columns that every row masks dropped from the front. ``keys`` (rows x columns) holds each column's value."""
    rows, before = mask.shape
    most = max(kept)
    out_keys = np.zeros((rows, before + most), dtype=keys.dtype)
    out_mask = np.zeros((rows, before + most), dtype=np.int64)
    for r, k in enumerate(kept):
        shift = most - k
        out_keys[r, shift:] = keys[r, : before + k]
        out_mask[r, shift:] = np.concatenate([mask[r], np.ones(k, dtype=np.int64)])
    start = int(np.flatnonzero(out_mask.any(axis=0))[0])
    return out_keys[:, start:], out_mask[:, start:]


def filled(cache, values, layers=2):
    """``values`` (rows x columns) appended to every layer as keys (1 head of size 1) and as negated values."""
    tensor = torch.as_tensor(values, dtype=torch.float32)[:, None, :, None]
    for layer in range(layers):
        cache.update(tensor, -tensor, layer)


def stored(cache):
    return [(layer.keys[:, 0, :, 0].numpy(), layer.values[:, 0, :, 0].numpy()) for layer in cache.layers]


@pytest.mark.parametrize("seed", range(6))
def test_passes_realigned_lazily_equal_the_eager_moves(seed):
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(2, 6))
    lengths = rng.integers(1, 9, rows)
    before = int(lengths.max()) + int(rng.integers(0, 3))
    mask = np.zeros((rows, before), dtype=np.int64)
    for r, n in enumerate(lengths):
        mask[r, before - n :] = 1
    keys = rng.normal(size=(rows, before)).astype(np.float32)
    cache = new_batch_cache()
    filled(cache, keys)
    cmask = torch.as_tensor(mask)
    for _ in range(5):
        width = int(rng.integers(1, 5))
        new = rng.normal(size=(rows, width)).astype(np.float32)
        keys = np.concatenate([keys, new], axis=1)
        filled(cache, new)  # the pass's columns (the first append after a realign makes its moves)
        kept = rng.integers(1, width + 1, rows).tolist()
        keys, mask = eager(keys, mask, width, kept)
        cmask = realign(cache, cmask, width, kept)
        assert np.array_equal(cmask.numpy(), mask)
        assert cache.get_seq_length() == mask.shape[1]
    filled(cache, np.zeros((rows, 1)))
    for got_keys, got_values in stored(cache):
        held = np.concatenate([mask, np.ones((rows, 1), dtype=np.int64)], axis=1) == 1
        assert np.array_equal(got_keys[:, :-1][held[:, :-1]], keys[held[:, :-1]])
        assert np.array_equal(got_values[:, :-1][held[:, :-1]], -keys[held[:, :-1]])


def test_rows_kept_after_a_realign_make_its_moves_first():
    cache = new_batch_cache()
    keys = np.arange(12, dtype=np.float64).reshape(3, 4) + 1
    filled(cache, keys)
    mask = torch.ones((3, 2), dtype=torch.long)
    cmask = realign(cache, mask, 2, [2, 1, 1])  # rows 1 and 2 move right by one
    cmask = keep_rows(cache, cmask, [1, 2])
    assert cmask.tolist() == [[1, 1, 1], [1, 1, 1]]  # the column every kept row masked is gone
    for got_keys, got_values in stored(cache):
        assert got_keys.tolist() == [[5, 6, 7], [9, 10, 11]] and got_values.tolist() == [[-5, -6, -7], [-9, -10, -11]]

"""Input checks shared by the index's public classes: every bad input is a ValueError or TypeError that
names the argument, raised before any kernel sees it."""

import numbers

import numpy as np

MAX_VOCAB = 2**31 - 1  # token ids are stored as int32


def check_vocab_size(vocab_size):
    if vocab_size is None:
        return MAX_VOCAB
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, numbers.Integral):
        raise TypeError(f"vocab_size must be an int, got {type(vocab_size).__name__}")
    if not 1 <= int(vocab_size) <= MAX_VOCAB:
        raise ValueError(f"vocab_size must be in [1, {MAX_VOCAB}], got {vocab_size}")
    return int(vocab_size)


def check_positive_int(value, name, minimum=1):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if int(value) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def as_token_array(tokens, vocab_size, name="tokens"):
    """``tokens`` (an int, a sequence of ints, a 1-D integer array or tensor) as a contiguous int32 array
    of ids in ``[0, vocab_size)``."""
    if isinstance(tokens, bool):
        raise TypeError(f"{name} must hold integer token ids, got bool")
    if isinstance(tokens, numbers.Integral):
        arr = np.array([int(tokens)], dtype=np.int64)
    else:
        if hasattr(tokens, "detach") and hasattr(tokens, "cpu"):  # a torch tensor, without importing torch
            tokens = tokens.detach().cpu().numpy()
        try:
            arr = np.asarray(tokens)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must be a 1-D sequence of integer token ids") from exc
        if arr.ndim == 1 and arr.size == 0:
            return np.empty(0, dtype=np.int32)
        if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
            _refuse_out_of_range_ints(tokens, vocab_size, name)  # Python ints too large for int64
            raise TypeError(f"{name} must hold integer token ids, got dtype {arr.dtype}")
        if arr.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got an array of shape {arr.shape}")
    if arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0:
            raise ValueError(f"{name} holds a negative token id ({lo})")
        if hi >= vocab_size:
            raise ValueError(f"{name} holds token id {hi}, past the vocabulary (vocab_size={vocab_size})")
    return np.ascontiguousarray(arr, dtype=np.int32)


def _refuse_out_of_range_ints(tokens, vocab_size, name):
    """A ``ValueError`` naming the first id out of range where ``tokens`` is a flat sequence of Python ints that
    numpy could not hold as integers (beyond int64); nothing otherwise."""
    if not isinstance(tokens, (list, tuple)):
        return
    if not all(isinstance(t, numbers.Integral) and not isinstance(t, bool) for t in tokens):
        return
    bad = next((int(t) for t in tokens if not 0 <= int(t) < vocab_size), None)
    if bad is not None:
        raise ValueError(f"{name} holds token id {bad}, outside [0, {vocab_size})")

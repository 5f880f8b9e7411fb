"""A growing int64 token buffer (amortised O(1) append by doubling) for proposers that rescan the stream."""

import numpy as np


class StreamBuffer:
    def __init__(self):
        self._data = np.empty(256, dtype=np.int64)
        self._n = 0

    def reset(self, tokens):
        self._n = 0
        self.extend(tokens)

    def extend(self, tokens):
        tokens = np.asarray(tokens, dtype=np.int64).ravel()
        need = self._n + tokens.size
        if need > self._data.size:
            size = self._data.size
            while size < need:
                size *= 2
            grown = np.empty(size, dtype=np.int64)
            grown[: self._n] = self._data[: self._n]
            self._data = grown
        self._data[self._n : need] = tokens
        self._n = need

    @property
    def tokens(self):
        return self._data[: self._n]

"""``SuffixMatcher``: the longest suffix of a live stream that occurs in a separate ``SuffixIndex``."""

import numpy as np

from . import layout as L
from .queries import feed_matcher
from .validation import as_token_array


class SuffixMatcher:
    """Follows a live stream token by token (amortised O(1)) against a reference index, e.g. a document.

    >>> from draftless.index import SuffixIndex
    >>> doc = SuffixIndex([1, 2, 3, 4, 2, 3, 9])
    >>> m = doc.matcher(); m.feed([7, 2, 3])
    >>> m.length, doc.continuation(m.recent_end, 2).tolist()   # "2 3" ends at 5 in the document
    (2, [9])

    The reference may keep growing; the matcher stays valid (it re-normalises its state on the next feed).
    """

    def __init__(self, index):
        self.index = index
        self._cursor = np.zeros(2, dtype=np.int64)  # [state, length]

    def reset(self):
        self._cursor[:] = 0

    def feed(self, tokens):
        """Advance over one token id or a 1-D sequence of them."""
        arr = as_token_array(tokens, self.index.vocab_size)
        if arr.size:
            ix = self.index
            feed_matcher(ix._nodes, ix._edges, ix._table, ix._tokens, self._cursor, arr)

    @property
    def state(self):
        """The index state holding the matched suffix (re-normalised if the index split it since)."""
        nodes, length = self.index._nodes, self._cursor[1]
        v = int(self._cursor[0])
        while v != L.ROOT and nodes[nodes[v, L.LINK], L.LEN] >= length:
            v = int(nodes[v, L.LINK])
        return v

    @property
    def length(self):
        """Length of the longest suffix of the fed stream that occurs in the index (0: none)."""
        return int(self._cursor[1])

    @property
    def recent_end(self):
        """End position in the index of the latest occurrence of the matched suffix (-1 without one)."""
        return self.index.state_ends(self.state)[0] if self.length else -1

    @property
    def first_end(self):
        """End position in the index of the first occurrence of the matched suffix (-1 without one)."""
        return self.index.state_ends(self.state)[1] if self.length else -1

    def continuations(self, limit=4):
        """Distinct next tokens after the matched suffix in the index, most frequent first."""
        return self.index.continuations(limit, state=self.state if self.length else L.ROOT)

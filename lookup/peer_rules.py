"""Peers' drafting rules as proposers, so that the benchmarks compare drafting quality inside draftless's
own verification loop, free of each runtime's overhead. Written from the rules' published descriptions.

* ``PromptLookupRule`` -- transformers' ``prompt_lookup_num_tokens``: match the last ``max_ngram`` (2) tokens,
  falling back to 1; take the oldest occurrence whose continuation is non-empty; draft 10 tokens.
* ``NgramRule`` -- vLLM's n-gram proposer: the longest suffix n-gram of ``min_ngram``..``max_ngram`` (1-5)
  tokens that occurred before, oldest occurrence; draft 32 tokens.

Both rescan the whole stream every step (O(n) each), as the originals do.
"""

import numpy as np

from .stream_buffer import StreamBuffer

EMPTY = np.empty(0, dtype=np.int64)


def oldest_continuation(tokens, n, k):
    """Up to ``k`` tokens after the oldest earlier occurrence of the last ``n`` tokens whose continuation is
    non-empty, or None. ``tokens`` is 1-D int64.

    Example: ``[1, 2, 9, 1, 2, 8, 1, 2]``, n=2, k=2 -> ``[9, 1]`` (the oldest "1 2", not the latest).
    """
    length = tokens.size
    if n < 1 or length <= n:
        return None
    span = length - n  # windows starting at 0 .. span-1 have at least one token after them
    hit = tokens[:span] == tokens[length - n]
    for j in range(1, n):
        hit &= tokens[j: span + j] == tokens[length - n + j]
    starts = np.flatnonzero(hit)
    if starts.size == 0:
        return None
    begin = int(starts[0]) + n
    return tokens[begin: begin + k].copy()


class _RescanRule:
    def __init__(self, min_ngram, max_ngram, num_tokens):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        if num_tokens < 1:
            raise ValueError(f"num_tokens must be >= 1, got {num_tokens}")
        self.min_ngram, self.max_ngram, self.num_tokens = min_ngram, max_ngram, num_tokens
        self.buffer = StreamBuffer()

    def reset(self, tokens):
        self.buffer.reset(tokens)

    def update(self, tokens):
        self.buffer.extend(tokens)

    def propose(self, max_tokens):
        k = min(int(max_tokens), self.num_tokens)
        if k <= 0:
            return EMPTY
        tokens = self.buffer.tokens
        for n in range(min(self.max_ngram, tokens.size - 1), self.min_ngram - 1, -1):
            draft = oldest_continuation(tokens, n, k)
            if draft is not None:
                return draft
        return EMPTY


class PromptLookupRule(_RescanRule):
    """transformers' prompt lookup: 2-gram (then 1-gram), oldest match, 10 tokens."""

    def __init__(self, max_ngram=2, num_tokens=10):
        super().__init__(1, max_ngram, num_tokens)


class NgramRule(_RescanRule):
    """vLLM's n-gram proposer: longest of 1..5-grams, oldest match, 32 tokens."""

    def __init__(self, min_ngram=1, max_ngram=5, num_tokens=32):
        super().__init__(min_ngram, max_ngram, num_tokens)

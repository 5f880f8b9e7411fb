"""Peers' drafting rules as proposers, so that the benchmarks compare drafting quality inside draftless's
own verification loop, free of each runtime's overhead. Written from the rules' published descriptions.

* ``PromptLookupRule`` -- transformers' ``prompt_lookup_num_tokens``: match the last ``max_ngram`` (2) tokens,
  falling back to 1; take the oldest occurrence whose continuation is non-empty; draft 10 tokens.
* ``NgramRule`` -- vLLM's n-gram proposer: the longest suffix n-gram of ``min_ngram``..``max_ngram`` (1-5)
  tokens that occurred before, oldest occurrence; draft 32 tokens.

* ``SuffixDecodingRule`` -- SuffixDecoding (Oliaro et al., 2024, as ArcticInference implements it and vLLM
  configures it by default): a suffix tree of depth 24 over the request; for every length m of the stream's
  suffix, the most frequent path below it, each token kept while the share of the suffix's occurrences
  that go on that way stays at least ``min_token_prob`` (0.1), for at most ``max_spec_factor * m`` (1.0 x m)
  and ``max_spec_tokens`` (32) tokens within the tree's depth; the draft with the highest summed share wins.

The first two rescan the whole stream every step (O(n) each), as the originals do. The third reads the
same occurrence counts from draftless's suffix index, which a suffix tree of that depth holds; the
original's global tree of earlier requests' outputs is left out, as every method here drafts from its own
request only.
"""

import numpy as np

from draftless.index import SuffixIndex
from draftless.lookup.proposer import draft_budget
from draftless.lookup.stream_buffer import StreamBuffer

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
        hit &= tokens[j : span + j] == tokens[length - n + j]
    starts = np.flatnonzero(hit)
    if starts.size == 0:
        return None
    begin = int(starts[0]) + n
    return tokens[begin : begin + k].copy()


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
        k = min(draft_budget(max_tokens), self.num_tokens)
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


class IndexedRule:
    """A rule that reads draftless's suffix index over the request's stream (``self.index``), rebuilt by
    ``reset`` and extended by ``update``."""

    def __init__(self):
        self.index = SuffixIndex()  # until ``reset``: an empty stream, this rule's own

    def reset(self, tokens):
        self.index = SuffixIndex(tokens)

    def update(self, tokens):
        self.index.extend(tokens)


class SuffixDecodingRule(IndexedRule):
    """SuffixDecoding's path speculation over the request's own tokens (see the module doc)."""

    def __init__(self, max_depth=24, max_spec_tokens=32, max_spec_factor=1.0, min_token_prob=0.1):
        if max_depth < 2 or max_spec_tokens < 1:
            raise ValueError(f"need max_depth >= 2 and max_spec_tokens >= 1, got {max_depth}, {max_spec_tokens}")
        if not max_spec_factor > 0 or not 0 <= min_token_prob <= 1:
            raise ValueError(
                f"need max_spec_factor > 0 and min_token_prob in [0, 1], got {max_spec_factor}, {min_token_prob}"
            )
        self.max_depth, self.max_spec_tokens = max_depth, max_spec_tokens
        self.max_spec_factor, self.min_token_prob = max_spec_factor, min_token_prob
        super().__init__()

    def propose(self, max_tokens):
        cap = min(draft_budget(max_tokens), self.max_spec_tokens)
        best, best_score = EMPTY, 0.0
        if cap <= 0:
            return best
        # shortest suffix first, so that a tie goes to the longer one, as in the original
        for state, shortest, longest in self.index.suffix_states()[::-1]:
            lengths = np.arange(shortest, min(longest, self.max_depth - 1) + 1)
            if lengths.size == 0:
                continue
            limits = np.minimum(
                np.minimum(cap, (lengths * self.max_spec_factor + 1e-6).astype(np.int64)), self.max_depth - lengths
            )  # a tree of depth d holds d - m tokens below m
            tokens, counts = self.index.frequent_path(state, int(limits.max()))
            share = counts / self.index.state_count(state)  # non-increasing along the path
            kept = int(np.count_nonzero(share >= self.min_token_prob))
            scores = np.concatenate(([0.0], np.cumsum(share[:kept])))
            for limit in limits:
                n = min(int(limit), kept)
                if scores[n] >= best_score:
                    best, best_score = tokens[:n].astype(np.int64), scores[n]
        return best

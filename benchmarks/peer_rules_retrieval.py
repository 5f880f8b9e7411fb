"""Three more peers' drafting rules as proposers, beside ``peer_rules``: llama.cpp's lookup, SAM-Decoding and
REST, each as its published description reads, drafting one linear continuation from the request's own tokens
(what draftless's loop verifies). Written from those descriptions, not from their code.

* ``LlamaCppLookupRule`` -- llama.cpp's ``lookup`` example (``common/ngram-cache``): a "context" n-gram cache
  maps every 1- to 4-gram of the request to how often each token followed it. The draft grows token by token
  (up to ``n_draft``, 16): for the last 4, 3, 2, then 1 tokens of the stream plus the draft so far, the
  first n-gram seen at least ``min_samples[n]`` times whose most frequent successor took at least
  ``min_percent[n]`` % of them gives the next draft token (the "lax" thresholds: 2, 2, 1, 1 times and 66, 50,
  50, 50 %); the draft stops where none does. Among successors seen equally often, the one that got there
  first wins (llama.cpp leaves ties to its hash map's order). Its "dynamic" cache of earlier generations and
  "static" cache of a large corpus are left out, as every method here drafts from its own request only.
* ``SamDecodingRule`` -- SAM-Decoding's drafting from its dynamic suffix automaton (Hu et al., 2024, its
  "SAM only" configuration): the longest suffix of the stream that occurred before, and up to
  ``min(max_predicts - 1, int(alpha * length))`` tokens (59 and 4 x the match) after that suffix's
  *earliest* occurrence. Its static automaton over a corpus and its auxiliary drafter for short matches are
  left out.
* ``RestRule`` -- REST (He et al., 2024) with the request as its datastore: the longest suffix of
  ``max_span``..``min_span`` (16..2) tokens that occurred before; the continuations of all its occurrences
  form a trie, and REST verifies that trie's most frequent nodes as a token tree. Verifying one sequence, the
  rule drafts the trie's heaviest path: at each depth the token most of those continuations go on with, up to
  ``max_depth`` (10) tokens.
"""

import numpy as np

from draftless.index.validation import MAX_VOCAB, as_token_array
from draftless.lookup.proposer import draft_budget

from .peer_rules import IndexedRule

EMPTY = np.empty(0, dtype=np.int64)
LAX_MIN_SAMPLES = (2, 2, 1, 1)  # llama.cpp's lax thresholds for n = 1, 2, 3, 4
LAX_MIN_PERCENT = (66, 50, 50, 50)


class NgramCounts:
    """How often each token followed each n-gram (``min_n``..``max_n`` tokens) of a growing stream.

    Invariant: ``parts[g] = [counts, best, best_count, total]`` where ``counts[t]`` is how often n-gram ``g``
    (a tuple) was followed by ``t``, ``total`` their sum, and ``best`` the token that first reached the
    highest count, ``best_count``.
    """

    def __init__(self, min_n, max_n):
        self.min_n, self.max_n = min_n, max_n
        self.parts = {}
        self.tokens = []

    def extend(self, tokens):
        stream = self.tokens
        for token in (int(t) for t in tokens):
            stream.append(token)
            i = len(stream) - 1
            for n in range(self.min_n, min(self.max_n, i) + 1):
                part = self.parts.setdefault(tuple(stream[i - n : i]), [{}, -1, 0, 0])
                counts = part[0]
                counts[token] = c = counts.get(token, 0) + 1
                part[3] += 1
                if c > part[2]:
                    part[1], part[2] = token, c

    def best(self, ngram):
        """``(token, count, total)`` for ``ngram`` (a tuple), or None where it was never followed."""
        part = self.parts.get(ngram)
        return None if part is None else (part[1], part[2], part[3])


class LlamaCppLookupRule:
    """llama.cpp's n-gram-cache lookup over the request (see the module doc)."""

    def __init__(self, ngram_min=1, ngram_max=4, n_draft=16, min_samples=LAX_MIN_SAMPLES, min_percent=LAX_MIN_PERCENT):
        if not 1 <= ngram_min <= ngram_max:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max, got {ngram_min}, {ngram_max}")
        if n_draft < 1:
            raise ValueError(f"n_draft must be >= 1, got {n_draft}")
        if len(min_samples) < ngram_max or len(min_percent) < ngram_max:
            raise ValueError(f"min_samples and min_percent need a threshold for every n up to {ngram_max}")
        self.ngram_min, self.ngram_max, self.n_draft = ngram_min, ngram_max, n_draft
        self.min_samples, self.min_percent = tuple(min_samples), tuple(min_percent)
        self.counts = NgramCounts(ngram_min, ngram_max)

    def reset(self, tokens):
        self.counts = NgramCounts(self.ngram_min, self.ngram_max)
        self.counts.extend(as_token_array(tokens, MAX_VOCAB))  # ids checked as the index checks them

    def update(self, tokens):
        self.counts.extend(as_token_array(tokens, MAX_VOCAB))

    def _next(self, context):
        for n in range(min(self.ngram_max, len(context)), self.ngram_min - 1, -1):
            found = self.counts.best(tuple(context[len(context) - n :]))
            if found is None:
                continue
            token, count, total = found
            if total >= self.min_samples[n - 1] and 100 * count >= self.min_percent[n - 1] * total:
                return token
        return None

    def propose(self, max_tokens):
        k = min(draft_budget(max_tokens), self.n_draft)
        context = self.counts.tokens[-self.ngram_max :]
        draft = []
        while len(draft) < k:
            token = self._next(context)
            if token is None:
                break
            draft.append(token)
            context = (context + [token])[-self.ngram_max :]
        return np.array(draft, dtype=np.int64)


class SamDecodingRule(IndexedRule):
    """SAM-Decoding's draft from its dynamic suffix automaton (see the module doc)."""

    def __init__(self, max_predicts=60, alpha=4.0):
        if max_predicts < 2:
            raise ValueError(f"max_predicts must be >= 2 (it counts the bonus token), got {max_predicts}")
        if not alpha > 0:
            raise ValueError(f"alpha must be > 0, got {alpha}")
        self.max_predicts, self.alpha = max_predicts, alpha
        super().__init__()

    def propose(self, max_tokens):
        budget = draft_budget(max_tokens)
        match = self.index.longest_match()
        k = min(budget, self.max_predicts - 1, int(match.length * self.alpha))
        if k <= 0:
            return EMPTY
        return self.index.continuation(match.first_end, k).astype(np.int64)


class RestRule(IndexedRule):
    """REST's retrieval with the request as its datastore, drafting the trie's heaviest path (see the module
    doc)."""

    def __init__(self, max_span=16, min_span=2, max_depth=10):
        if not 1 <= min_span <= max_span:
            raise ValueError(f"need 1 <= min_span <= max_span, got {min_span}, {max_span}")
        if max_depth < 1:
            raise ValueError(f"max_depth must be >= 1, got {max_depth}")
        self.max_span, self.min_span, self.max_depth = max_span, min_span, max_depth
        super().__init__()

    def propose(self, max_tokens):
        k = min(draft_budget(max_tokens), self.max_depth)
        span = min(self.index.longest_match().length, self.max_span)
        if k <= 0 or span < self.min_span:
            return EMPTY
        return self.index.frequent_path(self.index.suffix_state(span), k)[0].astype(np.int64)

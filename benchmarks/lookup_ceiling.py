"""The ceiling for lookup drafting: what a drafter that copies from earlier text could reach with hindsight.

The oracle drafts the true continuation whether or not it occurs earlier; no lookup drafter can. This
proposer knows the truth too, but only uses it to choose: it drafts a continuation that follows an earlier
occurrence of the longest matched suffix (the most recent one, or with ``occurrence="any"`` whichever
agrees longest with the truth), and exactly the length that pays best given how many of its tokens the
target will accept. So it bounds every policy that drafts from that index: the gap between it and a
policy is what better length and occurrence choices could still win; the gap between it and the oracle is
text that does not repeat. Replay only (``benchmarks.replay``): it needs the recorded output.
"""

import numpy as np

from draftless.index import SuffixIndex
from draftless.lookup.occurrence import agreement

EMPTY = np.empty(0, dtype=np.int64)


class LookupCeilingProposer:
    def __init__(self, reference, cost, occurrence="recent", max_draft=64):
        if occurrence not in ("recent", "any"):
            raise ValueError(f"occurrence must be 'recent' or 'any', got {occurrence!r}")
        self.reference = np.asarray(reference, dtype=np.int64)
        self.cost = cost  # a CostCurve: c(k), in any unit
        self.occurrence = occurrence
        self.max_draft = int(max_draft)
        self.index = SuffixIndex()

    def reset(self, tokens):
        self.index = SuffixIndex(np.asarray(tokens, dtype=np.int64))

    def update(self, tokens):
        self.index.extend(np.asarray(tokens, dtype=np.int64))

    def _ends(self, match):
        """End positions of the earlier occurrences of the matched suffix to consider."""
        if self.occurrence == "recent":
            return [match.recent_end]
        seen = self.index.tokens
        n = seen.size
        windows = np.lib.stride_tricks.sliding_window_view(seen[: n - 1], match.length)
        return (np.flatnonzero((windows == seen[n - match.length :]).all(axis=1)) + match.length - 1).tolist()

    def propose(self, max_tokens):
        pos = len(self.index)
        truth = self.reference[pos : pos + min(int(max_tokens), self.max_draft)]
        match = self.index.longest_match()
        if match.length == 0 or truth.size == 0:
            return EMPTY
        seen = self.index.tokens
        best, best_end = 0, -1
        for end in self._ends(match):
            n = agreement(seen[end + 1 : end + 1 + truth.size], truth)
            if n > best:
                best, best_end = n, end
                if n == truth.size:
                    break
        if best == 0:
            return EMPTY
        ks = np.arange(best + 1)
        k = int(np.argmax((1 + ks) / np.asarray(self.cost.at(ks))))  # accepted = k for every k <= best
        return seen[best_end + 1 : best_end + 1 + k].astype(np.int64)

"""Stub proposers that force the verification loop's extremes."""

import numpy as np


class OracleProposer:
    """Drafts the true continuation (known from a reference run), ``length`` tokens each time, ignoring the
    budget it is given, so the loop must clip it."""

    def __init__(self, reference, length=50):
        self.reference = [int(t) for t in reference]
        self.length = length
        self.seen = 0
        self.requests = []

    def reset(self, tokens):
        self.seen = len(tokens)

    def update(self, tokens):
        self.seen += len(tokens)

    def propose(self, max_tokens):
        self.requests.append(max_tokens)
        return np.array(self.reference[self.seen: self.seen + self.length], dtype=np.int64)


class WrongProposer(OracleProposer):
    """Drafts tokens that are never the true ones."""

    def __init__(self, reference, vocab, length=6):
        super().__init__(reference, length)
        self.vocab = vocab

    def propose(self, max_tokens):
        true = super().propose(max_tokens)
        if true.size == 0:
            true = np.zeros(self.length, dtype=np.int64)
        return (true + 1) % self.vocab


class SilentProposer:
    """Never drafts: every step is a plain decode step."""

    def reset(self, tokens):
        pass

    def update(self, tokens):
        pass

    def propose(self, max_tokens):
        return np.empty(0, dtype=np.int64)

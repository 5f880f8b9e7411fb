"""The ceiling for linear drafting: a proposer that drafts the true greedy continuation, k tokens at a time.

The benchmark knows the continuation from the ``vanilla`` run; replay knows it from the recorded output."""

import numpy as np

ORACLE_KS = (8, 16, 32)


class OracleProposer:
    """Drafts the next ``k`` tokens of a known continuation."""

    def __init__(self, reference, k):
        self.reference = np.asarray(reference, dtype=np.int64)
        self.k = k
        self.seen = 0

    def reset(self, tokens):
        self.seen = len(tokens)

    def update(self, tokens):
        self.seen += len(tokens)

    def propose(self, max_tokens):
        return self.reference[self.seen : self.seen + min(self.k, max_tokens)]

"""The proposer interface the verification loop drives, and the suffix-index proposer.

A proposer sees the whole token stream of one request (prompt, then every accepted token) and drafts a
continuation of it. The loop calls ``reset`` once with the prompt and the first generated token, then per
step ``propose`` and, after verification, ``update`` with the tokens accepted (bonus token included).

Two optional members: ``record_pass(k, seconds[, head_rows])``, which the loop calls after each pass with its
draft length and seconds (and, for a staged pass, the row counts of its output layer's products), and
``first_rows``, read after each ``propose``: None, or how many rows of the output layer (1 to the draft's length)
the loop computes first, computing the rest only where the draft tokens those rows check were all accepted
(``integration.staged_head``; the output is the same either way). A proposer with ``first_rows`` that sets
``stages_output_layer`` false is never staged, and the loop then leaves the output layer unhooked.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from draftless.index import SuffixIndex
from draftless.index.validation import check_positive_int

from .config import DraftConfig

EMPTY = np.empty(0, dtype=np.int64)


def draft_budget(max_tokens: int) -> int:
    """``propose``'s ``max_tokens`` checked: a non-negative int (0: no draft)."""
    return check_positive_int(max_tokens, "max_tokens", minimum=0)


class Proposer(Protocol):
    def reset(self, tokens: np.ndarray) -> None:
        """Start a request whose stream so far is ``tokens``."""

    def propose(self, max_tokens: int) -> np.ndarray:
        """A draft (int64, 0 to ``max_tokens`` tokens) that continues the stream."""

    def update(self, tokens: np.ndarray) -> None:
        """Append the tokens accepted since the last call."""


class NullProposer:
    """Never drafts: every step is a plain decode step (the wrapper's own overhead, or a baseline)."""

    def reset(self, tokens: object) -> None:
        pass

    def update(self, tokens: object) -> None:
        pass

    def propose(self, max_tokens: int) -> np.ndarray:
        draft_budget(max_tokens)
        return EMPTY


class SuffixProposer:
    """Drafts the continuation that followed the longest earlier-occurring suffix of the stream.

    >>> p = SuffixProposer(DraftConfig(min_match=2, max_draft=3))
    >>> p.reset(np.array([4, 5, 6, 7, 8, 4, 5]))
    >>> p.propose(10).tolist()        # "4 5" occurred before, followed by 6 7 8
    [6, 7, 8]
    """

    def __init__(self, config=None, vocab_size=None):
        self.config = DraftConfig() if config is None else config
        if not isinstance(self.config, DraftConfig):
            raise TypeError(f"config must be a DraftConfig, got {type(self.config).__name__}")
        self.vocab_size = vocab_size
        self.index = SuffixIndex(vocab_size=vocab_size)

    def reset(self, tokens: object) -> None:
        self.index = SuffixIndex(tokens, vocab_size=self.vocab_size)

    def update(self, tokens: object) -> None:
        self.index.extend(tokens)

    def propose(self, max_tokens: int) -> np.ndarray:
        k = min(draft_budget(max_tokens), self.config.max_draft)
        match = self.index.longest_match()
        if k <= 0 or match.length < self.config.min_match:
            return EMPTY
        occurrence = self.config.occurrence
        if occurrence == "frequent":
            best = self.index.continuations(limit=1)
            if best.tokens.size == 0:
                return EMPTY
            head = best.tokens[:1].astype(np.int64)
            return np.concatenate([head, self.index.continuation(int(best.ends[0]), k - 1)])
        end = match.recent_end if occurrence == "recent" else match.first_end
        return self.index.continuation(end, k).astype(np.int64)

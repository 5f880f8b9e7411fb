"""``SuffixIndex``: the public, checked wrapper around the suffix-automaton kernels."""

from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np

from . import layout as L
from .automaton import extend_automaton
from .queries import frequent_path, top_continuations
from .transitions import rebuild_table
from .validation import as_token_array, check_positive_int, check_vocab_size

DEFAULT_RECENCY_DEPTH = 64
MAX_TOKENS = 2**29  # states (< 2n) and edges (< 3n) must fit in int32 row indices


class Match(NamedTuple):
    """The longest suffix of the stream that also occurs earlier in it.

    ``length`` is 0 when no suffix repeats; the end positions are then -1. ``recent_end`` is the end of the
    most recent earlier occurrence, ``first_end`` of the first one; the continuation starts right after.
    """

    length: int
    recent_end: int
    first_end: int


class Continuations(NamedTuple):
    """Distinct next tokens after a matched string, most frequent first (see ``top_continuations``)."""

    tokens: np.ndarray
    counts: np.ndarray
    ends: np.ndarray


class SuffixIndex:
    """Suffix automaton over a growing stream of token ids, with amortised O(1) append.

    >>> idx = SuffixIndex([5, 6, 7, 5, 6])
    >>> idx.longest_match()            # "5 6" occurred before, ending at position 1
    Match(length=2, recent_end=1, first_end=1)
    >>> idx.continuation(1, 3).tolist()
    [7, 5, 6]

    ``recency_depth`` bounds how many suffix-link ancestors get their most-recent position and occurrence
    count refreshed per token (see ``draftless.index.automaton``); figures are exact while no chain is
    deeper, and an append never costs more than that many steps.
    """

    def __init__(
        self, tokens: object = None, *, vocab_size: int | None = None, recency_depth: int = DEFAULT_RECENCY_DEPTH
    ) -> None:
        self.vocab_size = check_vocab_size(vocab_size)
        self.recency_depth = check_positive_int(recency_depth, "recency_depth")
        self._tokens = np.empty(16, dtype=np.int32)
        self._nodes = np.empty((16, L.NODE_FIELDS), dtype=np.int32)
        self._nodes[L.ROOT] = (0, -1, -1, -1, 0, -1)
        self._edges = np.empty((16, L.EDGE_FIELDS), dtype=np.int32)
        self._table = np.full(32, -1, dtype=np.int32)
        self._meta = np.zeros(L.META_FIELDS, dtype=np.int64)
        self._meta[L.N_STATES] = 1
        self._meta[L.MATCH_RECENT] = self._meta[L.MATCH_FIRST] = -1
        self._one = np.empty(1, dtype=np.int32)
        if tokens is not None:
            self.extend(tokens)

    # -- building -------------------------------------------------------------------------------------
    def extend(self, tokens: object) -> None:
        """Append one token id or a 1-D sequence of them."""
        if type(tokens) is int and 0 <= tokens < self.vocab_size:  # the per-step fast path
            self._one[0] = tokens
            arr = self._one
        else:
            arr = as_token_array(tokens, self.vocab_size)
        if self._meta[L.N_TOKENS] + arr.size > MAX_TOKENS:
            raise ValueError(f"tokens would grow the index past {MAX_TOKENS} tokens")
        done = 0
        while done < arr.size:
            rest = arr[done:] if done else arr
            done += extend_automaton(
                self._tokens, self._nodes, self._edges, self._table, self._meta, rest, self.recency_depth
            )
            if done < arr.size:
                self._make_room(arr.size - done)

    def _make_room(self, pending):
        """Double whichever arrays cannot take the next token (``pending`` tokens are still to come)."""
        m = self._meta
        n_tokens, n_states, n_edges = int(m[L.N_TOKENS]), int(m[L.N_STATES]), int(m[L.N_EDGES])
        self._tokens = _doubled(self._tokens, n_tokens, n_tokens + pending)
        self._nodes = _doubled(self._nodes, n_states, n_states + 2)
        edges_after = n_edges + int(m[L.EDGES_NEEDED])
        self._edges = _doubled(self._edges, n_edges, edges_after)
        size = self._table.shape[0]
        while edges_after > L.MAX_TABLE_LOAD * size:
            size *= 2
        if size != self._table.shape[0]:
            self._table = rebuild_table(self._nodes, self._edges, self._tokens, n_edges, size)

    # -- reading --------------------------------------------------------------------------------------
    def __len__(self):
        return int(self._meta[L.N_TOKENS])

    @property
    def tokens(self) -> np.ndarray:
        """The indexed stream (a read-only view)."""
        view = self._tokens[: len(self)]
        view.flags.writeable = False
        return view

    @property
    def num_states(self) -> int:
        return int(self._meta[L.N_STATES])

    @property
    def num_edges(self) -> int:
        return int(self._meta[L.N_EDGES])

    @property
    def nbytes(self) -> int:
        """Bytes held by the index's arrays (allocated capacity, not just the used part)."""
        return sum(a.nbytes for a in (self._tokens, self._nodes, self._edges, self._table, self._meta))

    def longest_match(self) -> Match:
        """The longest suffix of the stream that also occurs earlier (overlaps allowed), as a ``Match``."""
        m = self._meta
        return Match(int(m[L.MATCH_LEN]), int(m[L.MATCH_RECENT]), int(m[L.MATCH_FIRST]))

    def continuation(self, end: int, k: int) -> np.ndarray:
        """Up to ``k`` tokens that follow end position ``end`` (a copy; fewer at the end of the stream)."""
        n = len(self)
        end = check_positive_int(end, "end", minimum=-1)
        if end >= n:
            raise ValueError(f"end must be in [-1, {n - 1}], got {end}")
        k = check_positive_int(k, "k", minimum=0)
        return self._tokens[end + 1 : min(n, end + 1 + k)].copy()

    def continuations(self, limit: int = 4, state: int | None = None) -> Continuations:
        """Distinct tokens that followed the current longest match (or ``state``), most frequent first,
        with their counts and the position of their latest occurrence, as ``Continuations``."""
        limit = check_positive_int(limit, "limit")
        state = int(self._meta[L.MATCH_STATE]) if state is None else self._checked_state(state)
        return Continuations(*top_continuations(self._nodes, self._edges, self._tokens, state, limit))

    def frequent_path(self, state: int, max_len: int) -> np.ndarray:
        """The most frequent continuation of ``state``'s strings, token by token, as ``(tokens, counts)``:
        ``counts[i]`` occurrences of the string followed by ``tokens[:i + 1]`` (see ``frequent_path``)."""
        max_len = check_positive_int(max_len, "max_len", minimum=0)
        return frequent_path(self._nodes, self._edges, self._tokens, self._checked_state(state), max_len)

    def _checked_state(self, state):
        state = check_positive_int(state, "state", minimum=0)
        if state >= self.num_states:
            raise ValueError(f"state must be in [0, {self.num_states}), got {state}")
        return int(state)

    def suffix_states(self):
        """The states of the stream's suffixes that occurred before, longest first: an int64 array of
        ``(state, shortest, longest)`` rows. Every suffix of ``shortest..longest`` tokens belongs to that
        state, so all of them occurred at the same end positions and were followed by the same tokens."""
        rows = []
        v, longest = int(self._meta[L.MATCH_STATE]), int(self._meta[L.MATCH_LEN])
        while longest > 0 and v != L.ROOT:
            link = int(self._nodes[v, L.LINK])
            shortest = int(self._nodes[link, L.LEN]) + 1
            rows.append((v, shortest, longest))
            v, longest = link, shortest - 1
        return np.array(rows, dtype=np.int64).reshape(-1, 3)

    def suffix_state(self, length: int) -> int:
        """The state holding the stream's last ``length`` tokens (1 <= ``length`` <= ``longest_match().length``):
        their occurrences are that state's (``state_ends``, ``state_count``, ``frequent_path``)."""
        longest = int(self._meta[L.MATCH_LEN])
        length = check_positive_int(length, "length")
        if length > longest:
            raise ValueError(f"length must be in [1, {longest}] (the longest earlier-occurring suffix), got {length}")
        for state, shortest, _ in self.suffix_states():  # longest first: the first row that reaches down to it
            if shortest <= length:
                return int(state)
        raise AssertionError("suffix_states covers every length up to the longest match")

    def state_length(self, state: int) -> int:
        return int(self._nodes[state, L.LEN])

    def state_count(self, state: int) -> int:
        """How often the state's strings occur (their end positions, the stream's own end included)."""
        return int(self._nodes[state, L.COUNT])

    def state_ends(self, state: int) -> tuple[int, int]:
        """``(recent_end, first_end)`` of a state's strings (-1, -1 for the root)."""
        state = check_positive_int(state, "state", minimum=0)
        if state >= int(self._meta[L.N_STATES]):
            raise ValueError(f"state must be below the index's {int(self._meta[L.N_STATES])} states, got {state}")
        if state == L.ROOT:
            return -1, -1
        return int(self._nodes[state, L.RECENT]), int(self._nodes[state, L.FIRST])

    def matcher(self):
        """A ``SuffixMatcher`` that follows a separate live stream against this index."""
        from .matcher import SuffixMatcher

        return SuffixMatcher(self)

    # -- persistence and checks ------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> None:
        """Write the index to ``path`` (a file name) as ``.npz``: plain arrays, no pickle, written atomically, so
        that a failed save leaves a file already there as it was."""
        from .storage import save_index

        save_index(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> SuffixIndex:
        """The index saved at ``path``, built again from its tokens and compared whole with what was saved: a
        ``ValueError`` names the file if anything differs."""
        from .storage import load_index

        return load_index(cls, path)

    def check_invariants(self) -> None:
        from .invariants import check_index

        check_index(self)

    def state_arrays(self):
        """The used part of every array, for saving and checking."""
        m = self._meta
        return (self._tokens[: m[L.N_TOKENS]], self._nodes[: m[L.N_STATES]], self._edges[: m[L.N_EDGES]], self._meta)

    def __repr__(self):
        return (
            f"SuffixIndex(tokens={len(self)}, states={self.num_states}, edges={self.num_edges}, "
            f"vocab_size={self.vocab_size})"
        )


def _doubled(arr, used, need):
    """``arr`` itself if it holds ``need`` rows, else a copy of its ``used`` rows in a doubled array."""
    if need <= arr.shape[0]:
        return arr
    size = max(16, arr.shape[0])
    while size < need:
        size *= 2
    grown = np.empty((size,) + arr.shape[1:], dtype=arr.dtype)
    grown[:used] = arr[:used]
    return grown

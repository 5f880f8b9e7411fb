"""Token-id suffix index (numpy + Numba): amortised O(1) append and longest-suffix match."""

from .invariants import IndexInvariantError
from .matcher import SuffixMatcher
from .suffix_index import Continuations, Match, SuffixIndex

__all__ = ["Continuations", "IndexInvariantError", "Match", "SuffixIndex", "SuffixMatcher"]

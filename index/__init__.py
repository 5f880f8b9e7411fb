"""Token-id suffix index (numpy + Numba): amortised O(1) append and longest-suffix match."""

import os as _os

from .kernel_cache import ensure_kernel_cache

ensure_kernel_cache(_os.path.join(_os.path.dirname(__file__), "automaton.py"))  # before any kernel is defined

from .digit_tokens import DigitTokens  # noqa: E402 (after the cache is placed)
from .invariants import IndexInvariantError  # noqa: E402
from .matcher import SuffixMatcher  # noqa: E402
from .suffix_index import Continuations, Match, SuffixIndex  # noqa: E402

__all__ = ["Continuations", "DigitTokens", "IndexInvariantError", "Match", "SuffixIndex", "SuffixMatcher"]

"""``DigitTokens``: the checked wrapper around the numbered-period kernels (``numbered_period``), for a tokenizer
that writes every number as a run of one-digit tokens."""

import numpy as np

from .numbered_period import numbered_period, stepped_agreement, stepped_continuation
from .suffix_index import SuffixIndex
from .validation import MAX_VOCAB, as_token_array, check_positive_int


def _stream(tokens):
    """``tokens`` as the int32 array the kernels read: a ``SuffixIndex``'s own stream (checked as it was
    appended), or token ids checked here."""
    return tokens.tokens if isinstance(tokens, SuffixIndex) else as_token_array(tokens, MAX_VOCAB)


class DigitTokens:
    """The ids of the ten ASCII digits' tokens, ``ids[d]`` the token of digit ``d``, and the kernels that read
    numbers in a stream of token ids through them.

    >>> digits = DigitTokens(range(10))             # digit d is token d; other ids are words
    >>> stream = [20, 1, 7, 21, 20, 1, 8, 21, 20, 1]
    >>> p = digits.period(stream)                   # each 4 tokens repeat the 4 before with numbers moved on
    >>> p, digits.continuation(stream, p, 6).tolist()
    (4, [9, 21, 20, 2, 0, 21])
    """

    def __init__(self, ids):
        if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
            raise TypeError(f"ids must be a sequence of 10 token ids, got {type(ids).__name__}")
        ids = as_token_array(list(ids), MAX_VOCAB, "ids").astype(np.int64)
        if ids.size != 10 or np.unique(ids).size != 10:
            raise ValueError(f"ids must be 10 distinct token ids, one per digit 0-9, got {ids.tolist()}")
        self.ids = ids
        self.ids.flags.writeable = False
        self.digit_of = np.full(int(ids.max()) + 1, -1, dtype=np.int64)  # ids past it are not digits
        self.digit_of[ids] = np.arange(10)
        self.digit_of.flags.writeable = False

    def period(self, tokens, min_period=4, max_period=256):
        """The smallest numbered period in ``[min_period, max_period]`` in which ``tokens`` ends (see
        ``numbered_period``), or 0. ``tokens``: token ids or a ``SuffixIndex`` (its stream), as in every method."""
        tokens = _stream(tokens)
        min_period = check_positive_int(min_period, "min_period")
        max_period = check_positive_int(max_period, "max_period")
        return int(numbered_period(tokens, tokens.size, self.digit_of, min_period, max_period))

    def continuation(self, tokens, period, k):
        """Up to ``k`` tokens of the stepped copy of ``tokens`` at ``period`` (int64; see ``stepped_token``)."""
        tokens = _stream(tokens)
        period = check_positive_int(period, "period")
        k = check_positive_int(k, "k", minimum=0)
        return stepped_continuation(tokens, tokens.size, self.digit_of, self.ids, period, k)

    def agreement(self, tokens, period, cap=64):
        """How many of the last tokens of ``tokens`` (at most ``cap``) the stepped copy at ``period`` would have
        written (see ``stepped_agreement``)."""
        tokens = _stream(tokens)
        period = check_positive_int(period, "period")
        cap = check_positive_int(cap, "cap", minimum=0)
        return int(stepped_agreement(tokens, tokens.size, self.digit_of, self.ids, period, cap))

    def __repr__(self):
        return f"DigitTokens({self.ids.tolist()})"

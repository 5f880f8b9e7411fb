"""Which earlier occurrence of the matched suffix supplies the draft (``AdaptiveConfig.occurrence``), and how many
of a draft's leading tokens the target kept."""

import numpy as np


def source_end(index, match, occurrence):
    """The end position of the earlier occurrence of ``match`` (the index's longest match) whose
    continuation is drafted, by a fixed ``occurrence`` rule of ``AdaptiveConfig``: "frequent", "recent" or
    "first"."""
    if occurrence == "frequent":
        return frequent_end(index.continuations(limit=1), match.recent_end)
    return match.recent_end if occurrence == "recent" else match.first_end


def frequent_end(best, recent_end):
    """The "frequent" rule's end position: the latest occurrence of the token that most often followed the
    match, given the match's top follower (``continuations(limit=1)``; ties go to the more recent occurrence),
    or ``recent_end``, the match's latest occurrence, where nothing followed it."""
    return int(best.ends[0]) - 1 if best.tokens.size else recent_end


def agreement(candidate, tokens):
    """How many leading tokens of ``candidate`` equal ``tokens`` (compared over the shorter of the two)."""
    n = min(candidate.size, tokens.size)
    differ = np.flatnonzero(candidate[:n] != tokens[:n])
    return int(differ[0]) if differ.size else n


def periodic_continuation(index, end, k):
    """The ``k`` tokens that follow end position ``end`` (int64). The stream's last ``p = len(index) - 1 - end``
    tokens repeat what followed ``end``; past the stream's end the continuation is its own first ``p`` tokens again
    (token ``i`` is token ``i - p``, as an overlapping copy reads what it has just written), so that text repeating
    with a short period (a model caught in a loop, a list) is drafted as far as it pays, not one period at a time.

    Example: stream ``5 6 7 5 6``, ``end`` 1 (after "5 6"), k 5 -> ``7 5 6 7 5``.
    """
    head = index.continuation(end, k).astype(np.int64)
    return np.resize(head, int(k)) if 0 < head.size < k else head

"""Slow, obviously correct references for the index kernels: brute-force scans over Python lists."""


def occurrence_ends(stream, pattern, limit=None):
    """End positions of every occurrence of ``pattern`` in ``stream[:limit]``."""
    n = len(stream) if limit is None else limit
    m = len(pattern)
    return [e for e in range(m - 1, n) if stream[e - m + 1: e + 1] == pattern]


def longest_match(stream):
    """(length, most recent earlier end, first end) of the longest suffix that also occurs earlier."""
    n = len(stream)
    for length in range(n - 1, 0, -1):
        ends = [e for e in occurrence_ends(stream, stream[n - length:]) if e < n - 1]
        if ends:
            return length, max(ends), min(ends)
    return 0, -1, -1


def followers(stream, ends):
    """{token: (count, latest position)} of the tokens right after the end positions ``ends``."""
    out = {}
    for e in ends:
        if e + 1 < len(stream):
            count, _ = out.get(stream[e + 1], (0, -1))
            out[stream[e + 1]] = (count + 1, e + 1)
    return out


def continuations(stream, length):
    """``followers`` of the suffix of ``length`` tokens (of every position for 0)."""
    n = len(stream)
    return followers(stream, occurrence_ends(stream, stream[n - length:]) if length else range(-1, n - 1))


def ranked(items):
    """``followers`` ordered as the index orders them: count, then recency, descending."""
    return sorted(((tok, c, pos) for tok, (c, pos) in items.items()), key=lambda t: (-t[1], -t[2]))


def ranked_continuations(stream, length):
    return ranked(continuations(stream, length))


def stream_match(doc, live):
    """(length, last end, first end) of the longest suffix of ``live`` occurring in ``doc``."""
    for length in range(len(live), 0, -1):
        ends = occurrence_ends(doc, live[len(live) - length:])
        if ends:
            return length, max(ends), min(ends)
    return 0, -1, -1


def incremental_stream_match(docs_and_feeds):
    """The streaming rule when the reference grows between feeds: after each token the match is the
    longest suffix of at most (previous length + 1) tokens that occurs in the reference as it is then.
    ``docs_and_feeds`` is a list of (reference, tokens fed while it was the reference)."""
    live, length, doc = [], 0, []
    for doc, feed in docs_and_feeds:
        for tok in feed:
            live.append(tok)
            length = next((n for n in range(min(length + 1, len(live)), 0, -1)
                           if occurrence_ends(doc, live[len(live) - n:])), 0)
    if not length:
        return 0, -1, -1
    ends = occurrence_ends(doc, live[len(live) - length:])
    return length, max(ends), min(ends)


def frequent_path(stream, length, max_len):
    """(tokens, counts) of the most frequent path after the suffix of ``length`` tokens: each next token the
    one that most often followed the string so far (ties: the later occurrence), each count the occurrences
    of the suffix followed by the path so far."""
    string = list(stream[len(stream) - length:])
    tokens, counts = [], []
    while len(tokens) < max_len:
        ranked = ranked_continuations_of(stream, string)
        if not ranked:
            break
        tok, count, _ = ranked[0]
        string.append(tok)
        tokens.append(tok)
        counts.append(count)
    return tokens, counts


def ranked_continuations_of(stream, pattern):
    """``ranked_continuations`` for any ``pattern``, not only a suffix of ``stream``."""
    return ranked(followers(stream, occurrence_ends(stream, pattern)))


def _fp32(x):
    """``x`` (a Python float) rounded to the nearest fp32, as a Python float (past fp32's range, an infinity)."""
    import math
    import struct
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:  # rounds past the largest fp32
        return math.copysign(math.inf, x)


def _fp32_step_down(x):
    """The fp32 just below ``x`` (an fp32 value; -inf stays)."""
    import struct
    if x == float("-inf"):
        return x
    if x == 0:
        return -struct.unpack("<f", struct.pack("<I", 1))[0]
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    return struct.unpack("<f", struct.pack("<I", bits - 1 if x > 0 else bits + 1))[0]


def screen_candidates(rows, slack, cap, rate=0.0):
    """``(listed, counts, best)`` per row of ``rows`` (lists of bfloat16 values as Python floats): the positions
    whose value reaches the fp32 step below ``fp32(max - slack - rate |max|)`` (``counts`` ``cap + 1`` where more
    than ``cap``, ``listed`` then empty), and the first position of the maximum."""
    listed, counts, best = [], [], []
    for row, s in zip(rows, slack):
        top = max(row)
        threshold = _fp32_step_down(_fp32(top if abs(top) == float("inf") else top - (s + rate * abs(top))))
        found = [j for j, v in enumerate(row) if v >= threshold]
        listed.append(found if len(found) <= cap else [])
        counts.append(len(found) if len(found) <= cap else cap + 1)
        best.append(row.index(top))
    return listed, counts, best

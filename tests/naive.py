"""Slow, obviously correct references for the index kernels: brute-force scans over Python lists."""


def occurrence_ends(stream, pattern, limit=None):
    """End positions of every occurrence of ``pattern`` in ``stream[:limit]``."""
    n = len(stream) if limit is None else limit
    m = len(pattern)
    return [e for e in range(m - 1, n) if stream[e - m + 1 : e + 1] == pattern]


def longest_match(stream):
    """(length, most recent earlier end, first end) of the longest suffix that also occurs earlier."""
    n = len(stream)
    for length in range(n - 1, 0, -1):
        ends = [e for e in occurrence_ends(stream, stream[n - length :]) if e < n - 1]
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
    return followers(stream, occurrence_ends(stream, stream[n - length :]) if length else range(-1, n - 1))


def ranked(items):
    """``followers`` ordered as the index orders them: count, then recency, descending."""
    return sorted(((tok, c, pos) for tok, (c, pos) in items.items()), key=lambda t: (-t[1], -t[2]))


def ranked_continuations(stream, length):
    return ranked(continuations(stream, length))


def stream_match(doc, live):
    """(length, last end, first end) of the longest suffix of ``live`` occurring in ``doc``."""
    for length in range(len(live), 0, -1):
        ends = occurrence_ends(doc, live[len(live) - length :])
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
            length = next(
                (n for n in range(min(length + 1, len(live)), 0, -1) if occurrence_ends(doc, live[len(live) - n :])), 0
            )
    if not length:
        return 0, -1, -1
    ends = occurrence_ends(doc, live[len(live) - length :])
    return length, max(ends), min(ends)


def frequent_path(stream, length, max_len):
    """(tokens, counts) of the most frequent path after the suffix of ``length`` tokens: each next token the
    one that most often followed the string so far (ties: the later occurrence), each count the occurrences
    of the suffix followed by the path so far."""
    string = list(stream[len(stream) - length :])
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


def digit_runs(stream, digit):
    """[(start, stop)] of the maximal runs of digit tokens (``digit(token)`` not None) of ``stream``."""
    runs, start = [], None
    for i, token in enumerate(list(stream) + [None]):
        if token is not None and digit(token) is not None:
            start = i if start is None else start
        elif start is not None:
            runs.append((start, i))
            start = None
    return runs


def numbered_period(stream, digit, min_period, max_period):
    """The smallest p whose last p tokens have the shape of the p before them (a digit for a digit, else the same
    token) and are not all digits; 0 where none is."""
    n = len(stream)
    for p in range(min_period, min(max_period, n // 2) + 1):
        last, before = stream[n - p :], stream[n - 2 * p : n - p]
        same = all(
            (digit(a) is not None and digit(b) is not None) or (digit(a) is None and a == b)
            for a, b in zip(last, before)
        )
        if same and any(digit(a) is None for a in last):
            return p
    return 0


def stepped_token(x, t, digit, ids, p):
    """The stepped copy's token at position t of ``x`` (``x[:t]`` known), by whole numbers: a word copied from one
    period back, a digit that of 2 * B - A (B itself where negative) at B's width; None where it stops."""
    if t - p < 0:
        return None
    if digit(x[t - p]) is None:
        return x[t - p]
    runs = digit_runs(x[:t], digit)
    s, e = next(run for run in runs if run[0] <= t - p < run[1])
    if e == t or e - s > 18 or (s - p, e - p) not in runs:
        return None
    current = s + p  # the number being written starts there: nothing but digits from there to t
    if current > 0 and current <= t and digit(x[current - 1]) is not None:
        return None
    value = lambda a, b: int("".join(str(digit(x[i])) for i in range(a, b)))  # noqa: E731
    b_value, a_value = value(s, e), value(s - p, e - p)
    stepped = 2 * b_value - a_value
    text = str(stepped if stepped >= 0 else b_value).zfill(e - s)
    if len(text) > e - s:
        return None
    written = "".join(str(digit(x[i])) for i in range(current, t))
    if not text.startswith(written):
        return None
    return ids[int(text[len(written)])]


def stepped_continuation(stream, digit, ids, p, k):
    x = list(stream)
    for _ in range(k):
        token = stepped_token(x, len(x), digit, ids, p)
        if token is None:
            break
        x.append(token)
    return x[len(stream) :]


def stepped_agreement(stream, digit, ids, p, cap):
    count = 0
    for j in range(len(stream) - 1, -1, -1):
        if count >= cap or stepped_token(stream[:j], j, digit, ids, p) != stream[j]:
            break
        count += 1
    return count

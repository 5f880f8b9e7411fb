"""Kernels over a stream of token ids that repeats with its numbers stepped: lines of a log, rows of a table, the
items of a numbered list, where each period copies the one before it except that its numbers have moved on.

A *digit token* is one whose text is a single ASCII digit (``digit_of[token]`` is its value, -1 for any other
token; ids past ``digit_of`` are not digits); a *number* is a maximal run of digit tokens. Two tokens have the
same *shape* when both are digits or both are the same id. The stream ends in a *numbered period* ``p`` when its
last ``p`` tokens have the shape of the ``p`` before them and are not all digits (``numbered_period``).

The *stepped copy* of such a stream continues it token by token, each new token ``x[t]`` read from one period
back (``stepped_token``): a token that is not a digit is copied; a digit is the digit at the same place of the
number one period back stepped by as much as it moved over the period before it, ``2 * B - A`` (``B`` the number
one period back, ``A`` the number at the same place one more period back, both whole numbers of equal length; ``B``
itself where that would be negative), written with ``B``'s digit count (zero-padded). It stops, rather than guess,
where the numbers one and two periods back do not line up, where a stepped number needs more digits than ``B`` has
(9 to 10), where the digits already written of the current number are not the stepped number's, and at numbers
over 18 digits.

    stream  ...|a 1 7 b|a 1 8 b|a 1   (p = 4, digits 0-9 their own ids, letters other ids)
    stepped continuation: 9 b a 2 0 ...   (18 -> 19; then 19 -> 20: "2 0" has B's two digits)
"""

import numpy as np
from numba import njit

MAX_NUMBER_DIGITS = 18  # a run of up to 18 digits fits an int64 with room to step it


@njit(cache=True)
def _digit(digit_of, token):
    return digit_of[token] if 0 <= token < digit_of.shape[0] else -1


@njit(cache=True)
def numbered_period(tokens, n, digit_of, min_period, max_period):
    """The smallest period ``p`` in ``[min_period, min(max_period, n // 2)]`` in which ``tokens[:n]`` ends (its
    last ``p`` tokens have the shape of the ``p`` before them and are not all digits), or 0 where there is none.

    Invariant of the scan at ``p``: ``i`` tokens from the end have matched their shape one period back."""
    top = min(max_period, n // 2)
    for p in range(min_period, top + 1):
        words = 0
        i = 0
        while i < p:
            a = tokens[n - 1 - i]
            b = tokens[n - 1 - p - i]
            da = _digit(digit_of, a)
            if da >= 0:
                if _digit(digit_of, b) < 0:
                    break
            else:
                if a != b:
                    break
                words += 1
            i += 1
        if i == p and words > 0:
            return p
    return 0


@njit(cache=True)
def _run_value(x, start, stop, digit_of):
    """The number written by ``x[start:stop]``, or -1 where a token of it is not a digit or it is not 1 to 18
    tokens long."""
    if stop - start < 1 or stop - start > MAX_NUMBER_DIGITS:
        return -1
    value = 0
    for i in range(start, stop):
        d = _digit(digit_of, x[i])
        if d < 0:
            return -1
        value = value * 10 + d
    return value


@njit(cache=True)
def stepped_token(x, t, digit_of, digit_ids, p):
    """The stepped copy's token at position ``t`` of ``x`` (``x[:t]`` written), or -1 where it stops (see the
        module doc). Reads ``x[t - 2 * p - MAX_NUMBER_DIGITS - 2: t]`` at most: a window of the stream that reaches
    that far back gives the token the whole stream would."""
    if t - p < 0:
        return -1
    b = x[t - p]
    if _digit(digit_of, b) < 0:
        return b
    s = t - p  # the number one period back: x[s:e]
    while s > 0 and _digit(digit_of, x[s - 1]) >= 0 and t - p - s < MAX_NUMBER_DIGITS:
        s -= 1
    if s > 0 and _digit(digit_of, x[s - 1]) >= 0:  # over MAX_NUMBER_DIGITS digits
        return -1
    e = t - p + 1
    while e < t and _digit(digit_of, x[e]) >= 0:
        e += 1
    if e >= t or s - p < 0:  # its end not yet known, or no period before it
        return -1
    # the number one more period back, x[s - p:e - p], must be a whole number too (digits all, none beside it)
    if (s - p > 0 and _digit(digit_of, x[s - p - 1]) >= 0) or _digit(digit_of, x[e - p]) >= 0:
        return -1
    if s + p > 0 and _digit(digit_of, x[s + p - 1]) >= 0:  # the current number began before B's place
        return -1
    vb = _run_value(x, s, e, digit_of)
    va = _run_value(x, s - p, e - p, digit_of)
    if vb < 0 or va < 0:
        return -1
    value = 2 * vb - va
    if value < 0:
        value = vb
    scale = 1
    for _ in range(e - s):
        scale *= 10
    if value >= scale:  # more digits than B has
        return -1
    written = t - (s + p)  # digits of the current number already in x, each the stepped number's
    for i in range(written + 1):
        scale //= 10
        d = (value // scale) % 10
        if i < written and _digit(digit_of, x[s + p + i]) != d:
            return -1
    return digit_ids[d]


@njit(cache=True)
def stepped_continuation(tokens, n, digit_of, digit_ids, p, k):
    """Up to ``k`` tokens of the stepped copy of ``tokens[:n]`` at period ``p``, as int64 (fewer where it
    stops). Works on a copy of the stream's last ``2 * p + MAX_NUMBER_DIGITS + 2`` tokens, the most a token reads.

    Invariant: ``x[:filled]`` is that window of the stream followed by the tokens drafted so far."""
    lo = max(0, n - 2 * p - MAX_NUMBER_DIGITS - 2)
    x = np.empty(n - lo + k, dtype=np.int64)
    for i in range(lo, n):
        x[i - lo] = tokens[i]
    filled = n - lo
    while filled < n - lo + k:
        token = stepped_token(x, filled, digit_of, digit_ids, p)
        if token < 0:
            break
        x[filled] = token
        filled += 1
    return x[n - lo : filled].copy()


@njit(cache=True)
def stepped_agreement(tokens, n, digit_of, digit_ids, p, cap):
    """How many of the last tokens of ``tokens[:n]`` (at most ``cap``) the stepped copy at period ``p`` would have
    written: the largest ``m`` such that for every ``j`` in ``[n - m, n)``, ``stepped_token`` of ``tokens[:j]``
    is ``tokens[j]``.

    Invariant: the ``count`` tokens after position ``j`` each agree (``j`` indexes the window ``x``, a copy of
    the stream from ``lo``, as far back as the earliest of them reads)."""
    lo = max(0, n - cap - 2 * p - MAX_NUMBER_DIGITS - 2)
    x = np.empty(n - lo, dtype=np.int64)
    for i in range(lo, n):
        x[i - lo] = tokens[i]
    count = 0
    j = n - lo - 1
    while j >= 0 and count < cap:
        if stepped_token(x, j, digit_of, digit_ids, p) != x[j]:
            break
        count += 1
        j -= 1
    return count

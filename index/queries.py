"""Numba kernels that read a suffix automaton: branching continuations and streaming matches."""

import numpy as np
from numba import njit

from .layout import COUNT, EDGE_DST, EDGE_NEXT, HEAD, LEN, LINK, RECENT, ROOT
from .transitions import edge_token, find_edge


@njit(cache=True)
def top_continuations(nodes, edges, tokens, state, limit):
    """The distinct tokens that followed the strings of ``state``, most frequent first.

    Returns ``(tokens, counts, ends)``, at most ``limit`` each: ``counts[i]`` occurrences of the state's
    string followed by ``tokens[i]``, the latest of which has ``tokens[i]`` at position ``ends[i]``
    (so that continuation goes on at ``ends[i] + 1``). Ties go to the more recent occurrence.

    Example: stream ``1 2 3 1 2 4 1 2 3 1 2``, state of ``1 2`` -> tokens ``[3, 4]``, counts ``[2, 1]``
    (``[3, 4]``, not ``[4, 3]``: 3 followed twice), ends ``[8, 5]``.
    """
    degree = 0
    f = nodes[state, HEAD]
    while f != -1:
        degree += 1
        f = edges[f, EDGE_NEXT]
    toks = np.empty(degree, dtype=np.int32)
    counts = np.empty(degree, dtype=np.int32)
    ends = np.empty(degree, dtype=np.int32)
    keys = np.empty(degree, dtype=np.int64)
    i = 0
    f = nodes[state, HEAD]
    while f != -1:
        dst = edges[f, EDGE_DST]
        toks[i] = edge_token(nodes, edges, tokens, f)
        counts[i] = nodes[dst, COUNT]
        ends[i] = nodes[dst, RECENT]
        keys[i] = -(np.int64(counts[i]) << np.int64(32)) - np.int64(ends[i])  # ascending = best first
        i += 1
        f = edges[f, EDGE_NEXT]
    order = np.argsort(keys, kind="mergesort")[:limit]
    return toks[order], counts[order], ends[order]


@njit(cache=True)
def feed_matcher(nodes, edges, table, tokens, cursor, stream):
    """Advance a streaming match over ``stream`` tokens; ``cursor = [state, length]`` is updated in place.

    Invariant after every token: the last ``length`` tokens seen occur in the indexed stream, no longer
    suffix of them does, and they belong to ``state`` (``len(link(state)) < length <= len(state)``).
    Amortised O(1) per token: ``length`` grows by at most one per token and every suffix-link step
    shrinks it.
    """
    v = cursor[0]
    length = cursor[1]
    while v != ROOT and nodes[nodes[v, LINK], LEN] >= length:  # the index may have split v since
        v = nodes[v, LINK]
    for i in range(stream.shape[0]):
        c = stream[i]
        while True:
            e = find_edge(nodes, edges, table, tokens, v, c)
            if e >= 0:
                v = edges[e, EDGE_DST]
                length += 1
                break
            if v == ROOT:
                length = 0
                break
            v = nodes[v, LINK]
            length = nodes[v, LEN]
    cursor[0] = v
    cursor[1] = length


@njit(cache=True)
def frequent_path(nodes, edges, tokens, state, max_len):
    """The path of most frequent continuations below ``state``, at most ``max_len`` tokens.

    Returns ``(tokens, counts)``: ``tokens[i]`` is the most frequent token after the state's string followed
    by ``tokens[:i]`` (ties to the more recent occurrence, as ``top_continuations``), and ``counts[i]`` how
    often the state's string occurs followed by ``tokens[:i + 1]``. The path stops early where that string was
    never followed by anything. Invariant: ``counts`` never increases along the path (each count is one
    successor's share of the previous one).

    Example: stream ``1 2 3 1 2 4 1 2 3 1 2``, state of ``1 2``, ``max_len`` 4 -> tokens ``[3, 1, 2, 4]``,
    counts ``[2, 2, 2, 1]`` ("1 2 3 1 2" twice: the stream also ends with it; "1 2 3 1 2 4" once).
    """
    out_tokens = np.empty(max_len, dtype=np.int32)
    out_counts = np.empty(max_len, dtype=np.int32)
    v = state
    n = 0
    while n < max_len:
        best_edge = -1
        best_count = -1
        best_recent = -1
        f = nodes[v, HEAD]
        while f != -1:
            dst = edges[f, EDGE_DST]
            count = nodes[dst, COUNT]
            recent = nodes[dst, RECENT]
            if count > best_count or (count == best_count and recent > best_recent):
                best_edge, best_count, best_recent = f, count, recent
            f = edges[f, EDGE_NEXT]
        if best_edge == -1:
            break
        out_tokens[n] = edge_token(nodes, edges, tokens, best_edge)
        out_counts[n] = best_count
        v = edges[best_edge, EDGE_DST]
        n += 1
    return out_tokens[:n], out_counts[:n]

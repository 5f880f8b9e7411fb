"""Numba kernels for the transition store: edge rows chained per state, found through a hash table.

A suffix automaton over a 262k (or 2^31) vocabulary cannot hold dense transition rows, so transitions are
edge rows ``(src, dst, next)`` labelled by ``edge_token``: ``next`` chains the edges of one state (enumeration,
cloning) and an open-addressing table maps ``(src, token)`` to the row (O(1) lookup). Edges are never deleted; a clone
redirects ``dst`` in place.

Invariant: every edge row ``e < n_edges`` is reachable from ``table`` at the probe sequence of
``(edges[e, SRC], edge_token(e))`` and the table is at most ``MAX_TABLE_LOAD`` full. The kernels never
allocate: the caller makes room (see ``edges_needed``) and grows the arrays by doubling.
"""

import numpy as np
from numba import njit

from .layout import EDGE_DST, EDGE_NEXT, EDGE_SRC, FIRST, HEAD, LEN, LINK


@njit(cache=True, inline="always")
def slot_of(src, token, mask):
    """First probe slot of ``(src, token)``: a 64-bit mix (splitmix64 finaliser) of both ids."""
    key = (np.uint64(src) << np.uint64(32)) | np.uint64(token)
    key ^= key >> np.uint64(33)
    key *= np.uint64(0xFF51AFD7ED558CCD)
    key ^= key >> np.uint64(33)
    key *= np.uint64(0xC4CEB9FE1A85EC53)
    key ^= key >> np.uint64(33)
    return np.int64(key & np.uint64(mask))


@njit(cache=True, inline="always")
def edge_token(nodes, edges, tokens, e):
    """The label of edge ``e``: the last token of every string of its target."""
    return tokens[nodes[edges[e, EDGE_DST], FIRST]]


@njit(cache=True)
def find_edge(nodes, edges, table, tokens, src, token):
    """Row of the edge ``src --token-->``, or -1.

    Example: stream ``[7]``: the root (0) has one edge, row 0 = ``[0, 1, -1]`` to state 1, whose first
    occurrence ends at 0 and ``tokens[0] == 7``; so ``find_edge(.., 0, 7) == 0`` and ``find_edge(.., 0, 8) == -1``.
    """
    mask = table.shape[0] - 1
    i = slot_of(src, token, mask)
    while True:
        e = table[i]
        if e < 0:
            return -1
        if edges[e, EDGE_SRC] == src and edge_token(nodes, edges, tokens, e) == token:
            return e
        i = (i + 1) & mask


@njit(cache=True)
def _insert_slot(table, src, token, e):
    mask = table.shape[0] - 1
    i = slot_of(src, token, mask)
    while table[i] >= 0:
        i = (i + 1) & mask
    table[i] = e


@njit(cache=True)
def rebuild_table(nodes, edges, tokens, n_edges, size):
    """A fresh table of ``size`` slots (a power of two) holding edge rows ``0 .. n_edges-1``."""
    table = np.full(size, -1, dtype=np.int32)
    for e in range(n_edges):
        _insert_slot(table, edges[e, EDGE_SRC], edge_token(nodes, edges, tokens, e), e)
    return table


@njit(cache=True)
def add_edge(nodes, edges, table, n_edges, src, token, dst):
    """Write edge ``src --token--> dst`` as row ``n_edges`` (the caller made room) and chain it to ``src``.
    ``token`` must be the last token of ``dst``'s strings."""
    edges[n_edges, EDGE_SRC] = src
    edges[n_edges, EDGE_DST] = dst
    edges[n_edges, EDGE_NEXT] = nodes[src, HEAD]
    nodes[src, HEAD] = n_edges
    _insert_slot(table, src, token, n_edges)


@njit(cache=True)
def edges_needed(nodes, edges, table, tokens, last, c):
    """An upper bound (exact or one over) on the edge rows that appending ``c`` after state ``last`` writes:
    one per suffix state without a c-transition, plus a copy of every transition of the state that gets
    split, if any; that state may be one of the walked ones and so gain one transition before the copy."""
    need = 0
    p = last
    while p != -1:
        e = find_edge(nodes, edges, table, tokens, p, c)
        if e >= 0:
            q = edges[e, EDGE_DST]
            if nodes[p, LEN] + 1 != nodes[q, LEN]:
                need += 1
                f = nodes[q, HEAD]
                while f != -1:
                    need += 1
                    f = edges[f, EDGE_NEXT]
            return need
        need += 1
        p = nodes[p, LINK]
    return need

"""Numba kernels for the transition store: edge rows chained per state, found through a hash table.

A suffix automaton over a 262k (or 2^31) vocabulary cannot hold dense transition rows, so transitions are
edge rows ``(src, token, dst, next)``: ``next`` chains the edges of one state (enumeration, cloning) and an
open-addressing table maps ``(src, token)`` to the row (O(1) lookup). Edges are never deleted; a clone
redirects ``dst`` in place.

Invariant: every edge row ``e < n_edges`` is reachable from ``table`` at the probe sequence of
``(edges[e, SRC], edges[e, TOKEN])`` and the table is at most half full.
"""

import numpy as np
from numba import njit

from .layout import EDGE_DST, EDGE_FIELDS, EDGE_NEXT, EDGE_SRC, EDGE_TOKEN, HEAD


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


@njit(cache=True)
def find_edge(edges, table, src, token):
    """Row of the edge ``src --token-->``, or -1.

    >>> # edges = [[0, 7, 1, -1]], table holds row 0 at slot_of(0, 7): find_edge(..., 0, 7) == 0
    """
    mask = table.shape[0] - 1
    i = slot_of(src, token, mask)
    while True:
        e = table[i]
        if e < 0:
            return -1
        if edges[e, EDGE_SRC] == src and edges[e, EDGE_TOKEN] == token:
            return e
        i = (i + 1) & mask


@njit(cache=True)
def _insert_slot(edges, table, e):
    mask = table.shape[0] - 1
    i = slot_of(edges[e, EDGE_SRC], edges[e, EDGE_TOKEN], mask)
    while table[i] >= 0:
        i = (i + 1) & mask
    table[i] = e


@njit(cache=True)
def rebuild_table(edges, n_edges, size):
    """A fresh table of ``size`` slots (a power of two) holding edge rows ``0 .. n_edges-1``."""
    table = np.full(size, -1, dtype=np.int32)
    for e in range(n_edges):
        _insert_slot(edges, table, e)
    return table


@njit(cache=True)
def add_edge(nodes, edges, table, n_edges, src, token, dst):
    """Append edge ``src --token--> dst`` as row ``n_edges``; returns ``(edges, table)``, grown by doubling
    when full (the table is kept at most half full)."""
    if n_edges == edges.shape[0]:
        grown = np.empty((max(16, 2 * edges.shape[0]), EDGE_FIELDS), dtype=np.int32)
        grown[:n_edges] = edges[:n_edges]
        edges = grown
    if 2 * (n_edges + 1) > table.shape[0]:
        table = rebuild_table(edges, n_edges, 2 * table.shape[0])
    edges[n_edges, EDGE_SRC] = src
    edges[n_edges, EDGE_TOKEN] = token
    edges[n_edges, EDGE_DST] = dst
    edges[n_edges, EDGE_NEXT] = nodes[src, HEAD]
    nodes[src, HEAD] = n_edges
    _insert_slot(edges, table, n_edges)
    return edges, table

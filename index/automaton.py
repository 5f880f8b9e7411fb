"""Numba kernels that build a suffix automaton online, one token at a time.

Standard online construction (Blumer et al.; amortised O(1) state and transition work per token), plus
per-state occurrence statistics refreshed along the new state's suffix-link chain:

* ``FIRST`` (exact): end of the first occurrence; a clone inherits it from the state it splits.
* ``RECENT`` / ``COUNT``: end of the most recent occurrence and number of occurrences. Appending a token
  at position n adds n to the end-position set of every state on the suffix-link chain of the new state;
  that chain can be as long as the stream (``aaaa...``), so the refresh stops after ``depth`` links, which
  keeps an append O(depth) in the worst case. Both are exact while no chain exceeds ``depth``; beyond it
  ``RECENT`` is still a real occurrence (older than the newest) and ``COUNT`` a lower bound. Note that the
  chain below the queried state is never deeper than the longest repeated suffix plus one, so short
  matches always see exact figures.

Before the refresh, the kernel records the answer to "longest suffix that also occurs earlier": the state
``v = link(cur)``, its length, and its most recent and first earlier end positions.
"""

from numba import njit

from .layout import (
    COUNT,
    EDGE_DST,
    EDGE_NEXT,
    EDGES_NEEDED,
    FIRST,
    HEAD,
    LAST,
    LEN,
    LINK,
    MATCH_FIRST,
    MATCH_LEN,
    MATCH_RECENT,
    MATCH_STATE,
    MAX_TABLE_LOAD,
    N_EDGES,
    N_STATES,
    N_TOKENS,
    RECENT,
    ROOT,
)
from .transitions import add_edge, edge_token, edges_needed, find_edge


@njit(cache=True)
def _new_state(nodes, n_states, length, link, first, recent, count):
    nodes[n_states, LEN] = length
    nodes[n_states, LINK] = link
    nodes[n_states, FIRST] = first
    nodes[n_states, RECENT] = recent
    nodes[n_states, COUNT] = count
    nodes[n_states, HEAD] = -1


@njit(cache=True)
def _append_one(tokens, nodes, edges, table, meta, c, depth):
    """Append token ``c`` at position ``n = meta[N_TOKENS]``; every array already has room."""
    n = meta[N_TOKENS]
    tokens[n] = c
    last = meta[LAST]
    cur = meta[N_STATES]
    _new_state(nodes, cur, nodes[last, LEN] + 1, ROOT, n, n, 1)
    n_states = cur + 1
    n_edges = meta[N_EDGES]
    p = last
    e = -1
    while p != -1:  # every suffix state without a c-transition now leads to cur
        e = find_edge(nodes, edges, table, tokens, p, c)
        if e >= 0:
            break
        add_edge(nodes, edges, table, n_edges, p, c, cur)
        n_edges += 1
        p = nodes[p, LINK]
    if p != -1:
        q = edges[e, EDGE_DST]
        if nodes[p, LEN] + 1 == nodes[q, LEN]:
            nodes[cur, LINK] = q
        else:  # split q: the clone keeps the shorter strings, whose end positions gain n
            clone = n_states
            _new_state(
                nodes, clone, nodes[p, LEN] + 1, nodes[q, LINK], nodes[q, FIRST], nodes[q, RECENT], nodes[q, COUNT]
            )
            n_states += 1
            f = nodes[q, HEAD]
            while f != -1:
                add_edge(nodes, edges, table, n_edges, clone, edge_token(nodes, edges, tokens, f), edges[f, EDGE_DST])
                n_edges += 1
                f = edges[f, EDGE_NEXT]
            while p != -1:
                e = find_edge(nodes, edges, table, tokens, p, c)
                if e < 0 or edges[e, EDGE_DST] != q:
                    break
                edges[e, EDGE_DST] = clone
                p = nodes[p, LINK]
            nodes[q, LINK] = clone
            nodes[cur, LINK] = clone
    v = nodes[cur, LINK]
    meta[MATCH_STATE] = v
    meta[MATCH_LEN] = nodes[v, LEN]
    meta[MATCH_RECENT] = nodes[v, RECENT] if v != ROOT else -1
    meta[MATCH_FIRST] = nodes[v, FIRST] if v != ROOT else -1
    u = v
    d = 0
    while u > ROOT and d < depth:  # n joins the end positions of every state on the chain
        nodes[u, RECENT] = n
        nodes[u, COUNT] += 1
        u = nodes[u, LINK]
        d += 1
    meta[N_TOKENS] = n + 1
    meta[N_STATES] = n_states
    meta[N_EDGES] = n_edges
    meta[LAST] = cur


@njit(cache=True)
def extend_automaton(tokens, nodes, edges, table, meta, new_tokens, depth):
    """Append ``new_tokens`` (int32, validated by the caller) in place and return how many were appended.

    Stops early, before a token that would not fit, so that the caller can grow the arrays by doubling and
    call again with the rest (``meta[EDGES_NEEDED]`` says how many edge rows that token needs). Allocating
    nothing here keeps the per-call cost at the dispatch of plain arrays.
    """
    for i in range(new_tokens.shape[0]):
        c = new_tokens[i]
        n_edges = meta[N_EDGES]
        need = edges_needed(nodes, edges, table, tokens, meta[LAST], c)
        no_room = (
            meta[N_TOKENS] >= tokens.shape[0]
            or meta[N_STATES] + 2 > nodes.shape[0]
            or n_edges + need > edges.shape[0]
            or n_edges + need > MAX_TABLE_LOAD * table.shape[0]
        )
        if no_room:
            meta[EDGES_NEEDED] = need
            return i
        _append_one(tokens, nodes, edges, table, meta, c, depth)
    return new_tokens.shape[0]

"""``check_invariants`` for a ``SuffixIndex``: a debugging check for tests and loading, not the hot loop."""

import numpy as np
from numba import njit

from . import layout as L
from .transitions import find_edge


class IndexInvariantError(ValueError):
    """The index's arrays are inconsistent (a bug, or a corrupt file)."""


@njit(cache=True)
def _edge_faults(nodes, edges, table, tokens, n_edges):
    """Number of edges the hash table or the per-state chains fail to reach exactly once."""
    faults = 0
    seen = np.zeros(n_edges, dtype=np.int32)
    for v in range(nodes.shape[0]):
        f = nodes[v, L.HEAD]
        while f != -1:
            if f >= n_edges or edges[f, L.EDGE_SRC] != v or seen[f]:
                return n_edges + 1  # a chain is broken or cyclic
            seen[f] = 1
            f = edges[f, L.EDGE_NEXT]
    for e in range(n_edges):
        token = tokens[nodes[edges[e, L.EDGE_DST], L.FIRST]]
        if seen[e] == 0 or find_edge(nodes, edges, table, tokens, edges[e, L.EDGE_SRC], token) != e:
            faults += 1
    return faults


@njit(cache=True)
def _walk(nodes, edges, table, tokens, start, stop):
    """State reached from the root by the tokens ``tokens[start:stop]`` (-1 if a transition is missing)."""
    v = 0
    for i in range(start, stop):
        e = find_edge(nodes, edges, table, tokens, v, tokens[i])
        if e < 0:
            return -1
        v = edges[e, L.EDGE_DST]
    return v


def _require(ok, what):
    if not ok:
        raise IndexInvariantError(f"SuffixIndex invariant violated: {what}")


def check_index(index, sample=256):
    tokens, nodes, edges, meta = index.state_arrays()
    n, ns, ne = int(meta[L.N_TOKENS]), int(meta[L.N_STATES]), int(meta[L.N_EDGES])
    _require(ns >= 1 and nodes[0, L.LEN] == 0 and nodes[0, L.LINK] == -1, "state 0 is the root")
    _require(ns <= max(n + 1, 2 * n - 1), f"at most 2n-1 states ({ns} for n={n})")
    _require(ne <= max(0, 2 * n - 1, 3 * n - 4), f"at most 3n-4 transitions ({ne} for n={n})")
    _require(tokens.size == 0 or (tokens.min() >= 0 and tokens.max() < index.vocab_size), "ids in vocab")
    rest = nodes[1:]
    link, length = rest[:, L.LINK], rest[:, L.LEN]
    _require(np.all((link >= 0) & (link < ns)), "suffix links point at states")
    _require(np.all(nodes[link, L.LEN] < length), "a suffix link leads to a shorter state")
    first, recent, count = rest[:, L.FIRST], rest[:, L.RECENT], rest[:, L.COUNT]
    _require(np.all((length <= first + 1) & (first <= recent) & (recent < n)), "first <= recent < n")
    _require(np.all(count >= 1), "every state occurs")
    src, dst = edges[:, L.EDGE_SRC], edges[:, L.EDGE_DST]
    _require(np.all((src >= 0) & (src < ns) & (dst > 0) & (dst < ns)), "edges join states")
    _require(np.all(nodes[dst, L.LEN] >= nodes[src, L.LEN] + 1), "a transition adds a token")
    _require(
        _edge_faults(index._nodes[:ns], index._edges, index._table, index._tokens, ne) == 0,
        "every edge is findable, once, by its (source, token)",
    )
    last = int(meta[L.LAST])
    _require(nodes[last, L.LEN] == n, "the last state spells the whole stream")
    if n:
        v = int(nodes[last, L.LINK])
        _require(
            int(meta[L.MATCH_STATE]) == v and int(meta[L.MATCH_LEN]) == nodes[v, L.LEN],
            "the recorded match is the suffix link of the last state",
        )
    sampled = np.unique(np.linspace(1, ns - 1, num=min(sample, ns - 1), dtype=np.int64)) if ns > 1 else []
    budget = max(4 * n, 2**20)  # tokens walked in all, the shortest sampled strings first: linear in n
    for v in sorted(sampled, key=lambda state: nodes[state, L.LEN]):
        end, ln = int(nodes[v, L.FIRST]), int(nodes[v, L.LEN])
        budget -= ln
        if budget < 0:
            break
        _require(
            _walk(index._nodes, index._edges, index._table, index._tokens, end - ln + 1, end + 1) == v,
            f"state {v} is reached by its longest string",
        )

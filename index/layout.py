"""Column layout of the plain arrays that hold a suffix automaton.

The automaton lives in four numpy arrays plus a small counter vector, so it is picklable, inspectable and
saved as-is to ``.npz``:

``tokens`` int32[capacity]
    The indexed stream; positions are 0-based and an *end position* ``e`` names the occurrence whose last
    token is ``tokens[e]``.
``nodes`` int32[capacity, NODE_FIELDS]
    One row per state. State 0 is the root (the empty string).
``edges`` int32[capacity, EDGE_FIELDS]
    One row per transition, chained per source state through ``EDGE_NEXT``. Its token is not stored: every
    string of the target ends with it, so it is ``tokens[nodes[dst, FIRST]]`` (a quarter less memory).
    ``(src, token)`` pairs are unique.
``table`` int32[power of two]
    Open-addressing hash table (linear probing) from ``(source, token)`` to an edge row; -1 is empty.
``meta`` int64[META_FIELDS]
    Counters and the result of the last append (the longest earlier-occurring suffix).
"""

# nodes columns
LEN = 0  # length of the longest string of the state
LINK = 1  # suffix link (-1 for the root)
FIRST = 2  # end position of the first occurrence (exact)
RECENT = 3  # end position of the most recent occurrence (refreshed up to recency_depth links)
COUNT = 4  # number of occurrences |endpos| (refreshed up to recency_depth links)
HEAD = 5  # first edge row of the state's transition list, -1 when it has none
NODE_FIELDS = 6

# edges columns
EDGE_SRC = 0
EDGE_DST = 1
EDGE_NEXT = 2
EDGE_FIELDS = 3

# meta entries
N_TOKENS = 0
N_STATES = 1
N_EDGES = 2
LAST = 3  # state of the whole stream
MATCH_LEN = 4  # length of the longest suffix that also occurs earlier
MATCH_RECENT = 5  # end of its most recent earlier occurrence, -1 without a match
MATCH_FIRST = 6  # end of its first occurrence, -1 without a match
MATCH_STATE = 7  # the state of that suffix (0, the root, without a match)
EDGES_NEEDED = 8  # set by the kernel when it stops for room: edge rows the next token needs
META_FIELDS = 9

MAX_TABLE_LOAD = 0.75  # the transition table grows (doubles) before it is fuller than this

ROOT = 0
NO_POSITION = -1

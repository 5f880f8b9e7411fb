"""Saving and loading a ``SuffixIndex`` as ``.npz``: plain arrays, no pickle, with a format version."""

import zipfile

import numpy as np

from . import layout as L

FORMAT_NAME = "draftless.SuffixIndex"
FORMAT_VERSION = 1
_KEYS = {"format", "version", "vocab_size", "recency_depth", "tokens", "nodes", "edges", "meta"}


def write_archive(path, format_name, version, **arrays):
    """Write ``arrays`` to ``path`` as ``.npz`` under a format name and version (read back by ``read_archive``)."""
    with open(path, "wb") as fh:  # a file object keeps numpy from appending ".npz" to the name
        np.savez_compressed(fh, format=np.array(format_name), version=np.array(version, dtype=np.int64), **arrays)


def read_archive(path, what, format_name, version, keys):
    """The arrays of a ``write_archive`` file, loaded without pickle and checked for the format name, version
    and exactly ``keys`` (format and version included); anything else is a ``ValueError`` naming the file as
    not a readable draftless ``what``."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except FileNotFoundError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        archive_error(path, what, f"not an .npz archive ({exc})")
    if set(arrays) != set(keys):
        archive_error(path, what, f"expected arrays {sorted(keys)}, found {sorted(arrays)}")
    if arrays["format"].shape != () or str(arrays["format"]) != format_name:
        archive_error(path, what, "it was written by something else")
    found = int(arrays["version"])
    if found != version:
        archive_error(path, what, f"format version {found}; this draftless reads version {version}")
    return arrays


def archive_error(path, what, why):
    raise ValueError(f"{path!s} is not a readable draftless {what}: {why}")


def save_index(index, path):
    tokens, nodes, edges, meta = index._state_arrays()
    write_archive(path, FORMAT_NAME, FORMAT_VERSION, vocab_size=np.array(index.vocab_size, dtype=np.int64),
                  recency_depth=np.array(index.recency_depth, dtype=np.int64), tokens=tokens, nodes=nodes,
                  edges=edges, meta=meta)


def _fail(path, why):
    archive_error(path, "index", why)


def load_index(cls, path):
    arrays = read_archive(path, "index", FORMAT_NAME, FORMAT_VERSION, _KEYS)
    tokens, nodes, edges, meta = (arrays[k] for k in ("tokens", "nodes", "edges", "meta"))
    shapes_ok = (tokens.ndim == 1 and nodes.ndim == 2 and nodes.shape[1] == L.NODE_FIELDS
                 and edges.ndim == 2 and edges.shape[1] == L.EDGE_FIELDS and meta.shape == (L.META_FIELDS,))
    dtypes_ok = all(a.dtype == np.int32 for a in (tokens, nodes, edges)) and meta.dtype == np.int64
    if not (shapes_ok and dtypes_ok):
        _fail(path, "array shapes or dtypes do not match the format")
    counts_ok = (meta[L.N_TOKENS] == len(tokens) and meta[L.N_STATES] == len(nodes) >= 1
                 and meta[L.N_EDGES] == len(edges))
    if not counts_ok:
        _fail(path, "the stored counters disagree with the arrays")
    # Built again from the tokens (linear time: 1.4 s for a million tokens, where walking a sample of states
    # took 17 s) and compared whole, so that no changed token, state or edge goes unnoticed
    try:
        index = cls(tokens, vocab_size=int(arrays["vocab_size"]), recency_depth=int(arrays["recency_depth"]))
    except (TypeError, ValueError) as exc:
        _fail(path, str(exc))
    state = np.ones(L.META_FIELDS, dtype=bool)
    state[L.EDGES_NEEDED] = False  # scratch for the kernel's last stop for room, which depends on how it grew
    built_tokens, built_nodes, built_edges, built_meta = index._state_arrays()
    same = (np.array_equal(built_tokens, tokens) and np.array_equal(built_nodes, nodes)
            and np.array_equal(built_edges, edges) and np.array_equal(built_meta[state], meta[state]))
    if not same:
        _fail(path, "its automaton is not the one its tokens build")
    return index

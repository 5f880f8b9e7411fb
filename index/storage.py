"""Saving and loading a ``SuffixIndex`` (and a ``ReferenceCorpus``) as ``.npz``: plain arrays, no pickle, with a
format name and version. A save is atomic: the archive is written beside the target, synced, and renamed over it,
so that a failed save (a full disk) leaves the previous file as it was. A load checks the archive's entries and
every array's header (dtype, shape, size) before it reads any data, and any failure of a file that exists is a
``ValueError`` naming it."""

import os
import tempfile
import zipfile

import numpy as np

from . import layout as L

FORMAT_NAME = "draftless.SuffixIndex"
FORMAT_VERSION = 1
_KEYS = {"format", "version", "vocab_size", "recency_depth", "tokens", "nodes", "edges", "meta"}


def checked_path(path, name="path"):
    """``path`` as a ``str`` or ``os.PathLike`` file name; anything else (an open file, a file descriptor) refused."""
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a file name (str or os.PathLike), got {type(path).__name__}")
    return os.fspath(path)


def _new_file_mode():
    """The mode ``open`` would give a new file: 0o666 less the process's umask (read from /proc where there is one,
    so that the umask is never changed, even for a moment)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            umask = next(int(line.split()[1], 8) for line in fh if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        umask = 0o022
    return 0o666 & ~umask


def write_archive(path, format_name, version, **arrays):
    """Write ``arrays`` to ``path`` as ``.npz`` under a format name and version (read back by ``read_archive``),
    atomically: through a file beside it, synced to disk and renamed over it. On any error the staging file is
    removed and a file already at ``path`` is left as it was."""
    path = checked_path(path)
    directory = os.path.dirname(os.path.abspath(path))
    mode = os.stat(path).st_mode & 0o777 if os.path.exists(path) else _new_file_mode()
    fd, staging = tempfile.mkstemp(prefix=f".{os.path.basename(path)}-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:  # a file object keeps numpy from appending ".npz" to the name
            np.savez_compressed(fh, format=np.array(format_name), version=np.array(version, dtype=np.int64), **arrays)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(staging, mode)
        os.replace(staging, path)
    except BaseException:
        try:
            os.unlink(staging)
        except FileNotFoundError:
            pass
        raise
    try:  # the rename itself made durable where the platform allows it
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def _headers(archive, path, what, keys):
    """Each entry's ``(shape, dtype)`` from its ``.npy`` header, read before any data: exactly ``keys``' entries,
    numeric dtypes only, and no array larger than its entry in the archive."""
    names = archive.namelist()
    expected = {f"{k}.npy" for k in keys}
    if sorted(names) != sorted(expected):
        archive_error(
            path, what, f"expected arrays {sorted(keys)}, found {sorted(n.removesuffix('.npy') for n in names)}"
        )
    headers = {}
    for name in names:
        with archive.open(name) as fh:
            major, _ = np.lib.format.read_magic(fh)
            read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
            shape, _, dtype = read(fh)
        if dtype.hasobject or dtype.kind not in "biuU":
            archive_error(path, what, f"array {name[:-4]!r} has dtype {dtype}, which this format never holds")
        if int(np.prod(shape, dtype=np.int64)) * dtype.itemsize > archive.getinfo(name).file_size:
            archive_error(path, what, f"array {name[:-4]!r} claims more data than the archive holds")
        headers[name[:-4]] = (shape, dtype)
    return headers


def read_archive(path, what, format_name, version, keys, check_headers=None):
    """The arrays of a ``write_archive`` file, loaded without pickle and checked for the format name, version
    and exactly ``keys`` (format and version included); ``check_headers(headers)``, given, may refuse the arrays'
    shapes and dtypes (a ``ValueError``) before their data is read. A missing file raises ``FileNotFoundError``;
    anything else wrong is a ``ValueError`` naming the file as not a readable draftless ``what``."""
    path = checked_path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            headers = _headers(archive, path, what, keys)
            if headers["format"][0] != () or headers["version"][0] != ():
                archive_error(path, what, "it was written by something else")
            if check_headers is not None:
                check_headers(headers)
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in keys}
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        raise
    except ValueError as exc:
        if str(exc).startswith(f"{path!s} is not a readable draftless"):
            raise
        archive_error(path, what, f"not an .npz archive of this format ({exc})")
    except Exception as exc:  # a corrupt archive fails in zlib, zipfile, numpy's header parser, ...
        archive_error(path, what, f"not an .npz archive of this format ({type(exc).__name__}: {exc})")
    if str(arrays["format"]) != format_name:
        archive_error(path, what, "it was written by something else")
    found = int(arrays["version"])
    if found != version:
        archive_error(path, what, f"format version {found}; this draftless reads version {version}")
    return arrays


def archive_error(path, what, why):
    raise ValueError(f"{path!s} is not a readable draftless {what}: {why}")


def save_index(index, path):
    tokens, nodes, edges, meta = index.state_arrays()
    write_archive(
        path,
        FORMAT_NAME,
        FORMAT_VERSION,
        vocab_size=np.array(index.vocab_size, dtype=np.int64),
        recency_depth=np.array(index.recency_depth, dtype=np.int64),
        tokens=tokens,
        nodes=nodes,
        edges=edges,
        meta=meta,
    )


def _fail(path, why):
    archive_error(path, "index", why)


def _index_headers(path):
    """Refuses an index archive whose arrays' dtypes and shapes do not fit the format, or whose automaton holds
    more states or edges than its tokens can make, before any of their data is read."""

    def check(headers):
        def fits(name, ndim, dtype, width=None):
            shape, found = headers[name]
            return len(shape) == ndim and found == dtype and (width is None or shape[1] == width)

        scalars = all(headers[k][0] == () and headers[k][1].kind in "iu" for k in ("vocab_size", "recency_depth"))
        if not (
            scalars
            and fits("tokens", 1, np.int32)
            and fits("nodes", 2, np.int32, L.NODE_FIELDS)
            and fits("edges", 2, np.int32, L.EDGE_FIELDS)
            and headers["meta"][0] == (L.META_FIELDS,)
            and headers["meta"][1] == np.int64
        ):
            _fail(path, "array shapes or dtypes do not match the format")
        n = headers["tokens"][0][0]
        if headers["nodes"][0][0] > 2 * n + 1 or headers["edges"][0][0] > 3 * n + 1:
            _fail(path, "it holds more states or edges than its tokens can make")

    return check


def load_index(cls, path):
    arrays = read_archive(path, "index", FORMAT_NAME, FORMAT_VERSION, _KEYS, _index_headers(path))
    tokens, nodes, edges, meta = (arrays[k] for k in ("tokens", "nodes", "edges", "meta"))
    shapes_ok = (
        tokens.ndim == 1
        and nodes.ndim == 2
        and nodes.shape[1] == L.NODE_FIELDS
        and edges.ndim == 2
        and edges.shape[1] == L.EDGE_FIELDS
        and meta.shape == (L.META_FIELDS,)
    )
    dtypes_ok = all(a.dtype == np.int32 for a in (tokens, nodes, edges)) and meta.dtype == np.int64
    if not (shapes_ok and dtypes_ok):
        _fail(path, "array shapes or dtypes do not match the format")
    counts_ok = (
        meta[L.N_TOKENS] == len(tokens) and meta[L.N_STATES] == len(nodes) >= 1 and meta[L.N_EDGES] == len(edges)
    )
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
    built_tokens, built_nodes, built_edges, built_meta = index.state_arrays()
    same = (
        np.array_equal(built_tokens, tokens)
        and np.array_equal(built_nodes, nodes)
        and np.array_equal(built_edges, edges)
        and np.array_equal(built_meta[state], meta[state])
    )
    if not same:
        _fail(path, "its automaton is not the one its tokens build")
    return index

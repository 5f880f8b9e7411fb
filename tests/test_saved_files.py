"""Saved indexes and corpora: a failed save leaves the previous file intact, and every damaged file is refused
with a ValueError naming it, its arrays checked before anything large is read."""

import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest

from draftless import ReferenceCorpus, SuffixIndex

TOKENS = [5, 6, 7, 5, 6, 8, 9, 5, 6, 7, 10, 11, 12, 5, 6] * 8


def _saved(kind, path):
    if kind == "index":
        SuffixIndex(TOKENS, vocab_size=64).save(path)
        return SuffixIndex.load
    ReferenceCorpus([TOKENS[:40], TOKENS[40:]], vocab_size=64).save(path)
    return ReferenceCorpus.load


@pytest.mark.parametrize("kind", ["index", "corpus"])
def test_a_save_that_fails_for_want_of_room_leaves_the_previous_file(kind, tmp_path):
    """A file-size limit (as a full disk) makes the second, larger save fail; the first file still loads and no
    staging file is left beside it."""
    path = tmp_path / "saved.npz"
    load = _saved(kind, path)
    before = path.read_bytes()
    script = textwrap.dedent(
        f"""
        import resource, sys
        import numpy as np
        from draftless import ReferenceCorpus, SuffixIndex
        resource.setrlimit(resource.RLIMIT_FSIZE, ({len(before) + 256}, {len(before) + 256}))
        big = np.random.default_rng(0).integers(0, 60000, 200_000)
        try:
            if {kind!r} == "index":
                SuffixIndex(big, vocab_size=60000).save({str(path)!r})
            else:
                ReferenceCorpus([big], vocab_size=60000).save({str(path)!r})
        except OSError:
            sys.exit(3)
        """
    )
    import signal

    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGXFSZ, signal.SIG_IGN),
    )
    assert done.returncode == 3, done.stderr  # the write failed with an OSError, as on a full disk
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["saved.npz"]
    load(path)


@pytest.mark.parametrize("kind", ["index", "corpus"])
def test_every_flipped_byte_is_refused_with_a_value_error(kind, tmp_path):
    """300 single-byte flips at random places (fixed seed): each load either refuses the file with a ValueError
    naming it or, where the flip landed in bytes no reader uses (zip metadata such as a timestamp), reads back
    exactly what was saved."""
    path = tmp_path / "saved.npz"
    load = _saved(kind, path)
    original = path.read_bytes()
    rng = np.random.default_rng(0)
    damaged = tmp_path / "damaged.npz"
    refused = 0
    for _ in range(300):
        data = bytearray(original)
        at = int(rng.integers(len(data)))
        data[at] ^= int(rng.integers(1, 256))
        damaged.write_bytes(bytes(data))
        try:
            loaded = load(damaged)
        except ValueError as exc:
            assert str(damaged) in str(exc)
            refused += 1
            continue
        if kind == "index":
            assert loaded.tokens.tolist() == TOKENS
        else:
            assert [d.tolist() for d in loaded.documents()] == [TOKENS[:40], TOKENS[40:]]
    assert refused > 150  # most bytes are data the loader reads; the rest, zip metadata, change nothing


def test_files_that_are_not_archives_of_the_format_are_refused_by_name(tmp_path):
    npy = tmp_path / "array.npz"
    with open(npy, "wb") as fh:  # a plain .npy file under an .npz name
        np.save(fh, np.arange(10))
    text = tmp_path / "notes.npz"
    text.write_text("hello")
    for path in (npy, text):
        for load in (SuffixIndex.load, ReferenceCorpus.load):
            with pytest.raises(ValueError, match="is not a readable draftless"):
                load(path)
    with pytest.raises(FileNotFoundError):
        SuffixIndex.load(tmp_path / "missing.npz")


def test_an_unexpected_array_is_refused_before_its_data_is_read(tmp_path, monkeypatch):
    path = tmp_path / "saved.npz"
    SuffixIndex(TOKENS, vocab_size=64).save(path)
    with zipfile.ZipFile(path, "a", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("extra.npy", "w") as fh:  # 800 MB of zeros, a few hundred kB compressed
            np.lib.format.write_array_header_1_0(fh, {"descr": "<i8", "fortran_order": False, "shape": (10**8,)})
            chunk = bytes(8 * 10**6)
            for _ in range(100):
                fh.write(chunk)
    read = []
    real = np.lib.format.read_array
    monkeypatch.setattr(np.lib.format, "read_array", lambda *a, **k: read.append(1) or real(*a, **k))
    with pytest.raises(ValueError, match="extra"):
        SuffixIndex.load(path)
    assert not read  # refused from the archive's list of entries, no array read


def test_an_array_larger_than_the_format_allows_is_refused_from_its_header(tmp_path):
    path = tmp_path / "saved.npz"
    index = SuffixIndex(TOKENS, vocab_size=64)
    tokens, nodes, edges, meta = index.state_arrays()
    np.savez_compressed(
        path,
        format=np.array("draftless.SuffixIndex"),
        version=np.array(1, dtype=np.int64),
        vocab_size=np.array(64, dtype=np.int64),
        recency_depth=np.array(index.recency_depth, dtype=np.int64),
        tokens=tokens,
        nodes=np.zeros((10 * len(tokens), nodes.shape[1]), dtype=np.int32),  # more states than tokens can make
        edges=edges,
        meta=meta,
    )
    with pytest.raises(ValueError, match="more states or edges"):
        SuffixIndex.load(path)


def test_only_file_names_are_saved_to(tmp_path):
    with pytest.raises(TypeError, match="path"):
        SuffixIndex([1, 2, 3]).save(1)  # not file descriptor 1
    with pytest.raises(TypeError, match="path"):
        ReferenceCorpus([[1, 2, 3]]).save(None)


def test_saved_files_keep_the_mode_a_plain_write_gives(tmp_path):
    import os

    path = tmp_path / "saved.npz"
    SuffixIndex([1, 2, 3]).save(path)
    plain = tmp_path / "plain"
    plain.write_bytes(b"")
    assert os.stat(path).st_mode & 0o777 == os.stat(plain).st_mode & 0o777

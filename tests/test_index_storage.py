"""Saving and loading indexes: round trip, no pickle, clear errors on corrupt or foreign files."""

import numpy as np
import pytest

from draftless.index import SuffixIndex

from streams import code_like


def test_round_trip_keeps_answers_and_keeps_growing(tmp_path):
    stream = code_like()
    idx = SuffixIndex(stream[:200], vocab_size=1000, recency_depth=32)
    path = tmp_path / "doc.npz"
    idx.save(path)
    back = SuffixIndex.load(path)
    assert (back.vocab_size, back.recency_depth) == (1000, 32)
    assert back.longest_match() == idx.longest_match()
    assert back.tokens.tolist() == idx.tokens.tolist()
    for ix in (idx, back):
        ix.extend(stream[200:])
    assert back.longest_match() == idx.longest_match()
    assert back.continuations(10) .tokens.tolist() == idx.continuations(10).tokens.tolist()
    back.check_invariants()


def test_empty_round_trip(tmp_path):
    SuffixIndex().save(tmp_path / "e.npz")
    assert len(SuffixIndex.load(tmp_path / "e.npz")) == 0


def test_not_an_archive(tmp_path):
    path = tmp_path / "junk.npz"
    path.write_bytes(b"definitely not a zip file")
    with pytest.raises(ValueError, match="not an .npz archive"):
        SuffixIndex.load(path)


def test_truncated_archive(tmp_path):
    path = tmp_path / "t.npz"
    SuffixIndex(list(range(50)) * 3).save(path)
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(ValueError, match="not a readable draftless index"):
        SuffixIndex.load(path)


def test_foreign_npz(tmp_path):
    path = tmp_path / "f.npz"
    np.savez(path, weights=np.zeros(3))
    with pytest.raises(ValueError, match="expected arrays"):
        SuffixIndex.load(path)


def test_pickled_object_array_is_refused(tmp_path):
    path = tmp_path / "p.npz"
    SuffixIndex([1, 2, 1]).save(path)
    with np.load(path) as data:
        arrays = dict(data)
    arrays["tokens"] = np.array([object()], dtype=object)
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match="not a readable draftless index"):
        SuffixIndex.load(path)


def _rewrite(path, **changes):
    with np.load(path) as data:
        arrays = dict(data)
    arrays.update(changes)
    np.savez(path, **arrays)


def test_wrong_version_and_format(tmp_path):
    path = tmp_path / "v.npz"
    SuffixIndex([1, 2, 1]).save(path)
    _rewrite(path, version=np.array(99))
    with pytest.raises(ValueError, match="format version 99"):
        SuffixIndex.load(path)
    _rewrite(path, version=np.array(1), format=np.array("something.else"))
    with pytest.raises(ValueError, match="written by something else"):
        SuffixIndex.load(path)


def test_corrupt_arrays_fail_the_invariants(tmp_path):
    path = tmp_path / "c.npz"
    idx = SuffixIndex([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5])
    idx.save(path)
    with np.load(path) as data:
        nodes = data["nodes"].copy()
    nodes[-1, 1] = len(nodes) - 1  # a state whose suffix link is itself
    _rewrite(path, nodes=nodes)
    with pytest.raises(ValueError, match="invariant"):
        SuffixIndex.load(path)


def test_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        SuffixIndex.load(tmp_path / "absent.npz")

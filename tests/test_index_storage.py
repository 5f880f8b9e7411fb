"""Saving and loading indexes: round trip, no pickle, clear errors on corrupt or foreign files."""

import numpy as np
import pytest
from streams import code_like

from draftless.index import SuffixIndex


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
    assert back.continuations(10).tokens.tolist() == idx.continuations(10).tokens.tolist()
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


@pytest.mark.parametrize("array", ["tokens", "nodes", "edges", "meta"])
def test_any_changed_entry_is_refused(tmp_path, array):
    """A token changed in place keeps every structural invariant that a sample of states can show; the load
    builds the automaton again from the tokens and compares it whole."""
    path = tmp_path / "c.npz"
    SuffixIndex([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5] * 3).save(path)
    for position in (0, -1):
        with np.load(path) as data:
            values = data[array].copy()
        if array == "meta":
            position = 3  # a counter the shapes do not pin down
        values.flat[position] = (values.flat[position] + 1) % 7
        changed = tmp_path / f"changed{position}.npz"
        changed.write_bytes(path.read_bytes())
        _rewrite(changed, **{array: values})
        with pytest.raises(ValueError, match="not a readable draftless index"):
            SuffixIndex.load(changed)


def test_the_kernels_scratch_counter_is_not_compared(tmp_path):
    from draftless.index import layout

    path = tmp_path / "s.npz"
    grown = SuffixIndex(vocab_size=20)
    for token in np.arange(400) % 13:  # grown token by token, as a generation grows it
        grown.extend(int(token))
    grown.save(path)
    with np.load(path) as data:
        meta = data["meta"].copy()
    meta[layout.EDGES_NEEDED] += 5  # how many edge rows the last stop for room asked for: history, not state
    _rewrite(path, meta=meta)
    assert np.array_equal(SuffixIndex.load(path).tokens, grown.tokens)


def test_a_long_repeat_round_trips(tmp_path):
    tokens = np.arange(3000) % 1000  # states whose longest strings run 2,000 tokens (the load once walked them)
    path = tmp_path / "r.npz"
    SuffixIndex(tokens).save(path)
    loaded = SuffixIndex.load(path)
    assert np.array_equal(loaded.tokens, tokens) and loaded.longest_match() == SuffixIndex(tokens).longest_match()


def test_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        SuffixIndex.load(tmp_path / "absent.npz")

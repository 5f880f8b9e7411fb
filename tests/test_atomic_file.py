"""``write_text_atomically``: the file whole or unchanged, no staging file left behind, an error or not."""

import pytest

from draftless.integration import store as atomic_file
from draftless.integration.store import write_text_atomically


def test_a_file_is_replaced_whole_and_nothing_is_left_beside_it(tmp_path):
    path = tmp_path / "cache.json"
    write_text_atomically(path, "first")
    write_text_atomically(str(path), "sécond")
    assert path.read_text(encoding="utf-8") == "sécond" and [p.name for p in tmp_path.iterdir()] == ["cache.json"]


def test_a_failed_write_leaves_the_old_file_and_no_staging_file(tmp_path, monkeypatch):
    path = tmp_path / "cache.json"
    path.write_text("old")

    def refuse(staging, target):
        raise OSError("disk full")

    monkeypatch.setattr(atomic_file.os, "replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        write_text_atomically(path, "new")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["cache.json"]
    with pytest.raises(OSError):  # a directory that is not there: raised as it came
        write_text_atomically(tmp_path / "missing" / "cache.json", "x")

"""The repository speaks of what draftless does and why, never of how the work on it was organised: no numbered
rounds of work, issue numbers, owners, briefs or scratch paths in any tracked file or file name."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# "session" followed by a number, issue numbers, words about who asked for what, and scratch paths; pytest's
# ``scope="session"`` fixtures are fine (no number follows)
WORDS = re.compile(
    r"\bsessions? ?[-_#]?\d+|\bissues? #?\d+|\bthe owner\b|\bthe brief\b|\bthrowaway\b|/tmp/s\d+/",
    re.IGNORECASE,
)
THIS = Path(__file__).resolve()


def _tracked_files():
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / name for name in out.decode().split("\0") if name]


def test_the_pattern_finds_what_it_is_meant_to():
    session, issue = "ses" + "sion", "is" + "sue"  # spelled apart, so that this file holds none of the words
    for text in (f"as in {session} 61", f"{session.title()}-12's host", f"see {issue} #5", "/tmp/" + "s3/x"):
        assert WORDS.search(text), text
    for text in ('@pytest.fixture(scope="session")', "a session of requests", "an issue tracker"):
        assert not WORDS.search(text), text


def test_no_tracked_file_speaks_of_how_the_work_was_organised():
    found = []
    for path in _tracked_files():
        relative = path.relative_to(ROOT).as_posix()
        if WORDS.search(relative):
            found.append(f"{relative}: its name")
        if path == THIS or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if WORDS.search(line):
                found.append(f"{relative}:{number}: {line.strip()[:100]}")
    assert not found, "\n".join(found)

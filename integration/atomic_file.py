"""A cache file written whole or not at all: the calibration, the learned shape, a converted tokenizer's config."""

import os
import tempfile
from pathlib import Path


def write_text_atomically(path, text):
    """``text`` into ``path`` through a staging file beside it, renamed over it: another process reading ``path``
    sees the old file or the new, never half of one; no staging file is left behind, an error or not (``OSError``
    raised as it came)."""
    path = Path(path)
    fd, staging = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(staging, path)
    except BaseException:
        Path(staging).unlink(missing_ok=True)
        raise

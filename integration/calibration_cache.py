"""The calibration's disk cache: one JSON file per model/device/dtype/threads (``calibration_key``) and kind of
measurement under the user cache dir, written atomically, read once per process; where that directory cannot be
written, what was measured serves the process that measured it, with one warning."""

import functools
import json
import logging

from .atomic_file import write_text_atomically
from .calibration_key import calibration_key
from .models import cache_root

logger = logging.getLogger(__name__)

_MEMO = {}  # cache file -> decoded value: one disk read per process


def cache_file(model, kind):
    """The file under the cache dir where this model's calibration of ``kind`` is kept (``calibration_key``)."""
    return cache_root() / "calibration" / f"{calibration_key(model)}-{kind}.json"


def read_cached(path, decode, warn=True):
    """``decode`` of the JSON cached at ``path`` (memoised per process), or None where there is none, it is
    unreadable or ``decode`` refuses it (returns None)."""
    if str(path) in _MEMO:
        return _MEMO[str(path)]
    if not path.exists():
        return None
    try:
        value = decode(json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError):
        if warn:
            logger.warning("ignoring an unreadable calibration file %s", path)
        return None
    if value is not None:
        _MEMO[str(path)] = value
    return value


def cached(model, kind, measure, encode, decode):
    """``decode`` of the cached ``kind`` file for this model/device/dtype/threads, or ``measure()`` stored."""
    path = cache_file(model, kind)
    value = read_cached(path, decode)
    if value is None:
        logger.info("measuring %s for this model/device/dtype/threads once (seconds on a small CPU), then "
                    "caching it in %s", kind, path.parent)
        value = measure()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomically(path, json.dumps(encode(value)))
        except OSError as error:  # a read-only or full disk: kept for this process only
            _warn_unwritable(path.parent, error)
        logger.info("calibrated %s for %s: %s", kind, path.stem, value)
        _MEMO[str(path)] = value
    return value


_WARNED = set()  # cache directories already warned about in this process


def _warn_unwritable(directory, error):
    """One warning per directory and process: what was measured cannot be kept there, so each new process
    measures it again (seconds on a small CPU) until the directory can be written or ``DRAFTLESS_CACHE`` names
    one that can."""
    if str(directory) in _WARNED:
        return
    _WARNED.add(str(directory))
    logger.warning("draftless: cannot keep the calibration in %s (%s): it holds for this process only, and each "
                   "new process measures it again; set DRAFTLESS_CACHE to a writable directory to keep it",
                   directory, error)


def stage_progress(progress, stage):
    """``progress`` told ``stage``: a ``(done, total)`` callback for one measurement, or None."""
    return None if progress is None else functools.partial(progress, stage)

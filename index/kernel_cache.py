"""Where Numba keeps the compiled kernels (``@njit(cache=True)``): beside the package in ``__pycache__`` or in the
user's cache directory, as Numba chooses; where neither can be written (a read-only install run with a read-only
home: a container with a read-only root file system), in the system's temporary directory instead. Numba would
otherwise refuse every cached kernel when its module is imported ("cannot cache function ...: no locator
available"), and ``import draftless`` would fail there.
"""

import logging
import os
import stat
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)


def ensure_kernel_cache(source_file):
    """Leave Numba's choice where it can cache the kernels of ``source_file`` (a module of this package) or where
    ``NUMBA_CACHE_DIR`` names a directory; else point Numba's cache at a directory of the system's temporary one,
    with a warning, and return that directory (None where nothing changed)."""
    try:
        from numba.core import caching, config

        locators = (caching.InTreeCacheLocator, caching.UserWideCacheLocator)
    except (ImportError, AttributeError):  # a Numba that locates its cache otherwise: its own choice stands
        return None
    if config.CACHE_DIR:
        return None

    def probe():
        pass

    if any(locator.from_function(probe, source_file) is not None for locator in locators):
        return None
    folder = str(user_temporary("draftless-numba"))
    config.CACHE_DIR = folder
    logger.warning(
        "draftless: Numba cannot cache compiled kernels beside %s nor in the user cache directory; "
        "caching them in %s (set NUMBA_CACHE_DIR to choose the directory)",
        os.path.dirname(source_file),
        folder,
    )
    return folder


def user_temporary(name):
    """A directory of this user's alone in the system's temporary one, ``name`` and the user's id (made with mode
    0700 if missing): where a cache cannot go where it should. One that exists but another user owns, or others
    may write (planted files: Numba's cache is pickled), is passed over for a new one of this process's."""
    user = os.getuid() if hasattr(os, "getuid") else None
    folder = Path(tempfile.gettempdir()) / f"{name}-{'user' if user is None else user}"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = folder.lstat()
        private = stat.S_ISDIR(info.st_mode) and not info.st_mode & 0o022 and (user is None or info.st_uid == user)
    except OSError:
        private = False
    return folder if private else Path(tempfile.mkdtemp(prefix=f"{name}-"))

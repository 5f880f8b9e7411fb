"""A GGUF file read once per conversion, not three times.

Converting a bundled model, transformers opens its GGUF three times (the config to find the tokenizer's class, the
config again for the model, then the tensors), and the ``gguf`` package's reader parses every metadata field on
each open, element by element: Gemma 3 270M's 262k-token vocabulary, scores and types took about two thirds of its
first-use conversion (``gguf_reader._build_fields``, profiled). Within ``read_once``, each path's reader is made
once and handed to every later open of it (read-only: transformers reads the fields and the tensors, writes
neither).
"""

import contextlib
import os
import threading

_LOCK = threading.Lock()


@contextlib.contextmanager
def read_once():
    """Within, ``gguf.GGUFReader(path)`` returns the reader made for ``path`` (and mode) on its first call there,
    an instance of the reader's class as before; the package's own class again after."""
    import gguf

    original = gguf.GGUFReader
    made = {}

    class SharedReader(original):
        def __new__(cls, path, mode="r"):
            key = (os.path.realpath(os.fspath(path)), mode)
            with _LOCK:
                if key not in made:
                    made[key] = super().__new__(cls)
                    original.__init__(made[key], path, mode)
            return made[key]

        def __init__(self, path, mode="r"):  # read in __new__, once a path
            pass

    with _LOCK:
        gguf.GGUFReader = SharedReader
    try:
        yield made
    finally:
        with _LOCK:
            gguf.GGUFReader = original

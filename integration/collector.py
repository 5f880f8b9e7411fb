"""Python's cyclic garbage collector paused around work that makes many short-lived objects while a large heap is
loaded (torch, transformers and a model: 400k tracked objects), where each collection it sets off walks the whole
heap for nothing: a generator's token texts (0.4-0.6 s of Gemma 3's 0.9 s) and a model's loading (0.15-0.25 s of
Gemma 3 270M's 1.5-1.7 s, three interleaved pairs of processes). Reference counting frees as ever."""

import contextlib
import gc


@contextlib.contextmanager
def collection_paused():
    """The cyclic collector off within, as it was after (an error or not)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()

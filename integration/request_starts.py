"""How each model's requests start under each config in this process (``draftless.lookup.carried_starts``: by
default a ``RequestStarts``, one ``RequestStart`` per opening), learned from their first drafts and shared by every
``SpeculativeGenerator`` built for them, so that a caller who builds one per request (``generate``, the benchmarks)
keeps what earlier requests showed. Held in memory only, while the model lives: unlike the cost curve's shape, it
belongs to a workload, not a machine."""

import threading
import weakref

from draftless.lookup import carried_starts

_STARTS = weakref.WeakKeyDictionary()  # model -> {AdaptiveConfig: RequestStarts or RequestStart}
_LOCK = threading.Lock()


def request_start(model, config):
    """What ``model``'s generators under ``config`` (an ``AdaptiveConfig``) share (``carried_starts``: a
    ``RequestStarts``, or with ``start_key`` 0 one ``RequestStart``), made on first use; None where
    ``config.start_memory`` is 0 (every request's first draft under the prior alone)."""
    with _LOCK:
        start = _STARTS.get(model, {}).get(config)
        if start is None:
            start = carried_starts(config)  # checks the config too; None where it carries none
            if start is not None:
                _STARTS.setdefault(model, {})[config] = start
        return start


def forget_request_starts(model=None):
    """Drop what ``model``'s requests (every model's, by default) have shown: later requests start from the
    prior again."""
    with _LOCK:
        if model is None:
            _STARTS.clear()
        else:
            _STARTS.pop(model, None)

"""The ``RequestStart`` of each model and config in this process: how its requests start, learned from their first
drafts (``draftless.lookup.request_start``) and shared by every ``SpeculativeGenerator`` built for them, so that
a caller who builds one per request (``generate``, the benchmarks) keeps what earlier requests showed. Held in
memory only, while the model lives: unlike the cost curve's shape, it belongs to a workload, not a machine."""

import threading
import weakref

from draftless.lookup import RequestStart

_STARTS = weakref.WeakKeyDictionary()  # model -> {AdaptiveConfig: RequestStart}
_LOCK = threading.Lock()


def request_start(model, config):
    """The ``RequestStart`` shared by ``model``'s generators under ``config`` (an ``AdaptiveConfig``), made on
    first use; None where ``config.start_memory`` is 0 (every request's first draft under the prior alone)."""
    with _LOCK:
        start = _STARTS.get(model, {}).get(config)
        if start is None:
            start = RequestStart.for_config(config)  # checks the config too; None where it carries none
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

"""How a model's requests start, carried from request to request: the acceptance model a request's first draft is
chosen under.

Within a request the acceptance model learns from its own verifications (``acceptance_model``), but its first
draft is chosen under the prior alone, and a request is often a few passes long: Gemma 3 270M's code edits copy
128 tokens in 3 to 5 passes, and the prior drafts 17 tokens from the 3-token match their first pass sees, where
the copy runs 64 tokens and more. Requests of one kind start alike (a code edit starts copying the code, a
summary starts writing), so ``RequestStart`` keeps an ``AcceptanceModel`` that only first drafts teach: each
request's drafts until its first verified one are chosen under it, and that draft's outcome is added to it (and,
as always, to the request's own model), an earlier request's outcome weighing ``start_memory`` as much per request
after it. The drafts after a request's first are untouched.

Requests of different kinds start differently (a summary's first draft fails where a code edit's holds), so by
default a request carries its outcome only to later requests that open alike (``RequestStarts``): those whose
first match, when the prompt has been read and the model has written its first token, ends in the same
``AdaptiveConfig.start_key`` tokens (a code edit's "```python" and its first line's opening; a summary's own
words). Replayed over 575 suite columns of 163 recorded runs in the order their requests ran, keyed by 2 tokens
at ``start_memory`` 0.5: +0.3 % on average against nothing carried, Gemma's code_edit +2.3 % (up to +8.1 %),
SmolLM2's -0.3 % (worst -1.7 %), every other suite of both models -1.4 % at worst; carried to every later
request alike (``start_key`` 0, the earlier form) 0.3 % less on average, columns down 5-6 %
(``docs/evidence.md``, "How requests start, keyed by their opening"). Shared by the generators of
one model and config in a process (``integration``); thread-safe.
"""

import threading
from collections import OrderedDict

import numpy as np

from .acceptance_model import STEPPED, AcceptanceModel
from .adaptive_config import AdaptiveConfig

# openings a ``RequestStarts`` keeps (the least recently used dropped past it): each a few kB of counts
KEY_CAPACITY = 4096


class RequestStart:
    """The acceptance model of requests' first drafts (see the module doc), built from an ``AdaptiveConfig``'s
    prior and ``start_memory``."""

    def __init__(self, config, state=None):
        if not isinstance(config, AdaptiveConfig):
            raise TypeError(f"config must be an AdaptiveConfig, got {type(config).__name__}")
        if not 0 < config.start_memory <= 1:
            raise ValueError(f"a RequestStart needs start_memory in (0, 1], got {config.start_memory}")
        self.model = AcceptanceModel(config.prior, config.prior_strength, config.start_memory, config.corpus_prior)
        self._lock = threading.Lock()
        if state is not None:
            self.restore(state)

    @classmethod
    def for_config(cls, config, state=None):
        """A ``RequestStart`` for ``config`` (from ``state`` if given), or None where its ``start_memory`` is 0: every
        request's first draft then chosen under the prior alone."""
        if not isinstance(config, AdaptiveConfig):
            raise TypeError(f"config must be an AdaptiveConfig, got {type(config).__name__}")
        return cls(config, state) if config.start_memory else None

    def expected(self, length, origin, k_max, copying=True):
        with self._lock:
            return self.model.expected(length, origin, k_max, copying)

    def observe(self, length, origin, accepted, drafted, copying=True):
        with self._lock:
            self.model.observe(length, origin, accepted, drafted, copying)

    def state(self):
        """What it has learned: ``(hits, trials)``, each a flat tuple of floats (a request's stats record it, so
        that a replay starts that request where the loop did)."""
        with self._lock:
            return tuple(map(float, self.model.hits.ravel())), tuple(map(float, self.model.trials.ravel()))

    def restore(self, state):
        """Take up ``state`` (``state()``'s value, or lists of the same floats; or one recorded before the stepped
        copy's cells, ``acceptance_model.STEPPED``, whose counts for the origins before it are taken up as they
        were, the stepped copy's at none)."""
        hits, trials = (np.asarray(part, dtype=np.float64) for part in state)
        shape = self.model.hits.shape
        legacy = (shape[0], STEPPED, shape[2])  # regimes x the origins before STEPPED x lengths
        if hits.size == trials.size == np.prod(legacy):
            hits, trials = (
                np.concatenate([part.reshape(legacy), np.zeros((shape[0], 1, shape[2]))], axis=1)
                for part in (hits, trials)
            )
        if hits.size != self.model.hits.size or trials.size != hits.size:
            raise ValueError(
                f"state must hold two sequences of {self.model.hits.size} counts, got sizes "
                f"{hits.size} and {trials.size}"
            )
        if not (
            np.all(np.isfinite(hits))
            and np.all(np.isfinite(trials))
            and np.all(hits >= 0)
            and np.all(hits <= trials + 1e-9)
        ):
            raise ValueError("state must hold finite counts, 0 <= hits <= trials")
        with self._lock:
            self.model.hits = hits.reshape(shape).copy()
            self.model.trials = trials.reshape(shape).copy()

    def __getstate__(self):  # picklable and copyable as its arrays: the lock is the process's own
        with self._lock:
            return {"model": self.model}

    def __setstate__(self, state):
        self.model = state["model"]
        self._lock = threading.Lock()

    @property
    def learned(self):
        """Whether any request's first draft has been added."""
        with self._lock:
            return bool(self.model.trials.any())


class RequestStarts:
    """One ``RequestStart`` per opening (see the module doc): a request's first drafts are chosen under, and teach,
    the one of the requests whose first match ended in the same ``config.start_key`` tokens (fewer where the match
    is shorter), the least recently used of more than ``capacity`` openings forgotten."""

    def __init__(self, config, capacity=KEY_CAPACITY):
        if not isinstance(config, AdaptiveConfig):
            raise TypeError(f"config must be an AdaptiveConfig, got {type(config).__name__}")
        if not config.start_key or not config.start_memory:
            raise ValueError(
                f"RequestStarts needs start_memory > 0 and start_key >= 1, got {config.start_memory} and "
                f"{config.start_key}"
            )
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
            raise ValueError(f"capacity must be an int >= 1, got {capacity!r}")
        self.config = config
        self.capacity = int(capacity)
        self._starts = OrderedDict()  # opening (a tuple of token ids) -> RequestStart, least recently used first
        self._lock = threading.Lock()

    def for_stream(self, tokens, match_length):
        """The ``RequestStart`` of a request whose stream so far is ``tokens`` (a 1-D int array: the prompt and the
        model's first token) and whose longest earlier match is ``match_length`` tokens long, made on first use;
        None where the match is shorter than the config's ``min_match`` (no draft to choose yet)."""
        if match_length < self.config.min_match:
            return None
        n = min(int(match_length), self.config.start_key, len(tokens))
        key = tuple(int(t) for t in tokens[len(tokens) - n :])
        with self._lock:
            start = self._starts.get(key)
            if start is None:
                start = self._starts[key] = RequestStart(self.config)
                if len(self._starts) > self.capacity:
                    self._starts.popitem(last=False)
            else:
                self._starts.move_to_end(key)
            return start

    def __len__(self):
        with self._lock:
            return len(self._starts)

    def __getstate__(self):
        with self._lock:
            return {"config": self.config, "capacity": self.capacity, "starts": OrderedDict(self._starts)}

    def __setstate__(self, state):
        self.config, self.capacity, self._starts = state["config"], state["capacity"], state["starts"]
        self._lock = threading.Lock()


def carried_starts(config):
    """What ``config`` (an ``AdaptiveConfig``) carries from request to request: None where its ``start_memory`` is 0
    (every first draft under the prior alone), one ``RequestStart`` for every request where its ``start_key`` is 0,
    else a ``RequestStarts`` (the default: one per opening)."""
    if not isinstance(config, AdaptiveConfig):
        raise TypeError(f"config must be an AdaptiveConfig, got {type(config).__name__}")
    if not config.start_memory:
        return None
    return RequestStart(config) if not config.start_key else RequestStarts(config)

"""How a model's requests start, carried from request to request: the acceptance model a request's first draft is
chosen under.

Within a request the acceptance model learns from its own verifications (``acceptance_model``), but its first
draft is chosen under the prior alone, and a request is often a few passes long: a code edit copies 128 tokens in
3 to 5 passes, and the prior drafts far fewer tokens from the short match its first pass sees than the copy holds.
``RequestStart`` keeps an ``AcceptanceModel`` that only first drafts teach: each request's drafts until its first
verified one are chosen under it, and that draft's outcome is added to it (and, as always, to the request's own
model), an earlier request's outcome weighing ``start_memory`` as much per request after it. The drafts after a
request's first are untouched. Shared by the generators of one model and config in a process (``integration``);
thread-safe.
"""

import threading

import numpy as np

from .acceptance_model import STEPPED, AcceptanceModel
from .adaptive_config import AdaptiveConfig


class RequestStart:
    """The acceptance model of requests' first drafts (see the module doc), built from an ``AdaptiveConfig``'s
    prior and ``start_memory``."""

    def __init__(self, config, state=None):
        if not isinstance(config, AdaptiveConfig):
            raise TypeError(f"config must be an AdaptiveConfig, got {type(config).__name__}")
        if not 0 < config.start_memory <= 1:
            raise ValueError(f"a RequestStart needs start_memory in (0, 1], got {config.start_memory}")
        self.model = AcceptanceModel(
            config.prior, config.prior_strength, config.corpus_prior, forgetting=config.start_memory
        )
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


def carried_starts(config):
    """What ``config`` (an ``AdaptiveConfig``) carries from request to request: one ``RequestStart``, or None where
    its ``start_memory`` is 0 (every first draft under the prior alone)."""
    return RequestStart.for_config(config)

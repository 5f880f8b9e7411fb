"""An online model of draft acceptance: how likely the next draft token is accepted, given what the index
knows about the match it came from.

Features: the matched suffix length (bucketed: 1, 2, 3-4, 5-8, 9-16, 17-32, 33+) and whether the copied
continuation comes from the prompt or from generated text. Per feature cell, a Beta posterior over the
per-token acceptance rate ``a`` (the chance that a draft token is accepted once every earlier one was),
starting from a prior and learning from each verification's outcome within the request, with exponential
forgetting so that it follows text that starts or stops repeating. Under this model a k-token draft yields
``E[accepted] = a (1 - a^k) / (1 - a)`` tokens.
"""

import numpy as np

LENGTH_EDGES = np.array([1, 2, 3, 5, 9, 17, 33])  # bucket b holds lengths in [EDGES[b], EDGES[b+1])
# prior acceptance rate per length bucket (short matches are often coincidences, long ones copies)
DEFAULT_PRIOR = (0.35, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9)


def bucket(length):
    return max(0, int(np.searchsorted(LENGTH_EDGES, length, side="right")) - 1)


def expected_accepted(a, ks):
    """E[accepted tokens] of drafts of ``ks`` tokens when each is accepted with rate ``a`` after the last."""
    ks = np.asarray(ks, dtype=np.float64)
    if a >= 1.0:
        return ks
    return a * (1.0 - a ** ks) / (1.0 - a)


class AcceptanceModel:
    def __init__(self, prior=DEFAULT_PRIOR, strength=2.0, forgetting=0.98):
        prior = np.asarray(prior, dtype=np.float64)
        if prior.shape != LENGTH_EDGES.shape or np.any((prior <= 0) | (prior >= 1)):
            raise ValueError(f"prior must hold {LENGTH_EDGES.size} rates in (0, 1)")
        if strength <= 0:
            raise ValueError(f"strength must be > 0, got {strength}")
        if not 0 < forgetting <= 1:
            raise ValueError(f"forgetting must be in (0, 1], got {forgetting}")
        self.prior = np.tile(prior, (2, 1))  # row 0: continuation from generated text, row 1: from the prompt
        self.strength = strength
        self.forgetting = forgetting
        self.hits = np.zeros_like(self.prior)
        self.trials = np.zeros_like(self.prior)

    def rate(self, length, from_prompt):
        """Posterior mean of the per-token acceptance rate for a match of ``length`` tokens."""
        row, col = int(bool(from_prompt)), bucket(length)
        s = self.strength
        return (s * self.prior[row, col] + self.hits[row, col]) / (s + self.trials[row, col])

    def observe(self, length, from_prompt, accepted, drafted):
        """One verification: ``accepted`` of ``drafted`` tokens kept. Each accepted token is a success; the
        first rejected one (if any) a failure; later draft tokens were never judged."""
        if drafted <= 0:
            return
        row, col = int(bool(from_prompt)), bucket(length)
        self.hits[row, col] = self.hits[row, col] * self.forgetting + accepted
        self.trials[row, col] = self.trials[row, col] * self.forgetting + accepted + (accepted < drafted)

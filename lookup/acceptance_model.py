"""An online model of draft acceptance: how likely each draft token is accepted, given what the index knows
about the match it came from.

The rate ``a(l, from_prompt)`` is the chance that the token which followed an earlier occurrence of the matched
suffix is the target's next token, given that the matched suffix is ``l`` tokens long and the occurrence lies
in the prompt or in generated text. Lengths are bucketed (``LENGTH_EDGES``). Once the first ``i`` draft
tokens are accepted, the suffix matched at the next position is ``l + i`` tokens long, so a draft's position
``i`` is accepted (given every earlier one was) with rate ``a(l + i)``: the survival of a k-token draft is
the running product of ``a(l), a(l+1), ..`` and ``E[accepted | k]`` its running sum. Long copies thus earn
long drafts from the first step of a match, not after a ramp.

Per cell a Beta posterior over ``a``: a prior, then each verification's evidence within the request (every
accepted position a success in its own length cell, the first rejected one a failure), with exponential
forgetting so that the model follows text that starts or stops repeating.

How far back the occurrence lies and how often its continuation followed the suffix are left out by
measurement (``python -m benchmarks.acceptance_features``, table in ``benchmarks/recorded/README.md``): on
held-out requests the distance makes predictions worse on both recorded models, and the follower count,
though informative for one- to three-token matches, changes no replayed speed (a draft there costs about
a plain step whatever its rate).
"""

import numpy as np

LENGTH_EDGES = np.array([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64])  # bucket b: [EDGES[b], EDGES[b+1])
# Prior rate per bucket: the frequency, over every position of the greedy outputs recorded on the
# development suites (benchmarks/recorded, Gemma 3 270M, 31 requests, 3,600 positions), with which the
# token after the most recent occurrence of the longest matched suffix was the next token; the two from_prompts
# measured within 0.1 of each other, so both start from the pooled figure; capped at 0.98 so that a cell
# never starts certain.
DEFAULT_PRIOR = (0.35, 0.52, 0.7, 0.72, 0.88, 0.95, 0.97, 0.98, 0.98, 0.98, 0.98, 0.98)


def bucket(length):
    """The length bucket of a matched suffix length (an int or an array of ints)."""
    out = np.maximum(0, np.searchsorted(LENGTH_EDGES, length, side="right") - 1)
    return int(out) if np.ndim(out) == 0 else out


def expected_accepted(rates):
    """``E[accepted | k]`` for k = 0 .. len(rates): draft position i is accepted, once every earlier one
    was, with ``rates[i]``."""
    return np.concatenate(([0.0], np.cumsum(np.cumprod(np.asarray(rates, dtype=np.float64)))))


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

    def rates(self, lengths, from_prompt):
        """Posterior mean acceptance rate at matched suffix ``lengths`` (an int or an array)."""
        row, col = int(bool(from_prompt)), bucket(lengths)
        s = self.strength
        return (s * self.prior[row, col] + self.hits[row, col]) / (s + self.trials[row, col])

    def rate(self, length, from_prompt):
        return float(self.rates(length, from_prompt))

    def expected(self, length, from_prompt, k_max):
        """``E[accepted | k]`` for k = 0 .. k_max, for a draft from a match of ``length`` tokens."""
        return expected_accepted(self.rates(length + np.arange(int(k_max)), from_prompt))

    def observe(self, length, from_prompt, accepted, drafted):
        """One verification: the first ``accepted`` of ``drafted`` tokens kept. Position i was judged at
        suffix length ``length + i``: a success while i < accepted, then one failure if the draft was cut;
        later draft tokens were never judged."""
        if drafted <= 0:
            return
        self.hits *= self.forgetting
        self.trials *= self.forgetting
        row = int(bool(from_prompt))
        judged = bucket(length + np.arange(min(accepted + 1, drafted)))
        np.add.at(self.trials[row], judged, 1.0)
        np.add.at(self.hits[row], judged[:accepted], 1.0)

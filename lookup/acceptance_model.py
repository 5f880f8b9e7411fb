"""An online model of draft acceptance: how likely each draft token is accepted, given what the index knows
about the match it came from and whether the output is copying (``copy_regime``).

The rate ``a(l, origin, copying)`` is the chance that the token which followed an earlier occurrence of
the matched suffix is the target's next token, given that the matched suffix is ``l`` tokens long, the
occurrence lies in generated text (origin 0), the prompt (1), a reference corpus (2, ``corpus``) or is a
match with whitespace ignored (3, ``reflow``) or a copy of the period before with its numbers stepped (4,
``stepped_copy``, judged as a copy), and the output is copying or writing. Lengths are
bucketed (``LENGTH_EDGES``).

- *Copying*: once the first ``i`` draft tokens are accepted, the suffix matched at the next position is
  ``l + i`` tokens long, so a draft's position ``i`` is accepted (given every earlier one was) with rate
  ``a(l + i)``: long copies earn long drafts from the first step of a match, not after a ramp.
- *Writing*: every draft position has the rate ``a(l)`` of the length the draft starts from: no credit for
  unverified draft tokens. While the output writes new text, the phrases it copies end within a few tokens
  at any length; crediting draft tokens as matched length drafted 17+ tokens from 2-7-token matches on
  SmolLM2's summaries, at 0.82-1.29 tokens per plain step's cost (``docs/evidence.md``).

The survival of a k-token draft is the running product of its positions' rates and ``E[accepted | k]`` its
running sum. Per cell a Beta posterior over ``a``: a prior, then each verification's evidence within the
request (every accepted position a success in its cell, the first rejected one a failure), with exponential
forgetting (``FORGETTING`` a verification) so that the model follows text that starts or stops repeating. Its
rate is a constant, not a knob: replayed on the recorded 128-token outputs, 0.98 against no forgetting changed
speed by -0.11 % (Gemma) and +0.22 % (SmolLM2); it is kept for longer outputs, whose text changes kind more than
a 128-token answer does.

How far back the occurrence lies and how often its continuation followed the suffix are left out by
measurement (``python -m experiments.acceptance_features``, table in ``docs/evidence.md``): on
held-out requests the distance makes predictions worse on both recorded models, and the follower count,
though informative for one- to three-token matches, changes no replayed speed (a draft there costs about
a plain step whatever its rate).
"""

import numpy as np

FORGETTING = 0.98  # the weight of a verification's evidence one verification later
LENGTH_EDGES = np.array([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64])  # bucket b: [EDGES[b], EDGES[b+1])
# Prior rate per bucket: the frequency, over every position of the greedy outputs recorded on the
# development suites (recorded runs, Gemma 3 270M, 31 requests, 3,600 positions), with which the
# token after the most recent occurrence of the longest matched suffix was the next token; the two origins
# measured within 0.1 of each other, so both start from the pooled figure; capped at 0.98 so that a cell
# never starts certain. Both regimes start from it.
DEFAULT_PRIOR = (0.35, 0.52, 0.7, 0.72, 0.88, 0.95, 0.97, 0.98, 0.98, 0.98, 0.98, 0.98)
# Prior rate per bucket for a corpus match (origin 2): measured the same way on the same recorded outputs, each
# request matched against a corpus of the requests' outputs before it (the cross-request history), capped
# alike. A short match with another request's text is kept far less often than one within the request: 0.16
# against 0.35 at one token, 0.51 against 0.88 at six or seven; from eight tokens on both are near certain.
# On SmolLM2's outputs (out of sample): 0.11, 0.20, 0.34, 0.41, 0.80, 0.87, 0.97, ...
CORPUS_PRIOR = (0.16, 0.22, 0.43, 0.31, 0.51, 0.98, 0.98, 0.98, 0.98, 0.98, 0.98, 0.98)


ORIGINS = ("generated", "prompt", "corpus", "reflowed", "stepped")
# reflowed: a match of the request's own text with its whitespace ignored (``reflow``); stepped: the period before
# with its numbers stepped (``stepped_copy``); both start from ``prior``
GENERATED, PROMPT, CORPUS, REFLOWED, STEPPED = range(len(ORIGINS))


def origin_cell(origin):
    """An origin (0 to 3, or a bool: from the prompt or not) as its cell index."""
    cell = int(origin)
    if not 0 <= cell < len(ORIGINS):
        raise ValueError(f"origin must be one of 0..{len(ORIGINS) - 1} ({', '.join(ORIGINS)}), got {origin!r}")
    return cell


def bucket(length):
    """The length bucket of a matched suffix length (an int or an array of ints)."""
    out = np.maximum(0, np.searchsorted(LENGTH_EDGES, length, side="right") - 1)
    return int(out) if np.ndim(out) == 0 else out


def expected_accepted(rates):
    """``E[accepted | k]`` for k = 0 .. len(rates): draft position i is accepted, once every earlier one
    was, with ``rates[i]``."""
    return np.concatenate(([0.0], np.cumsum(np.cumprod(np.asarray(rates, dtype=np.float64)))))


class AcceptanceModel:
    """Cells ``[regime, origin, bucket]``: regime 0 writing, 1 copying; origin 0 generated text, 1 prompt, 2
    corpus, 3 re-flowed, 4 stepped (``origin`` arguments also take a bool: from the prompt or not). Every cell starts
    from ``prior``'s rate for its bucket (the corpus cells from ``corpus_prior``'s) and learns from its own
    evidence."""

    def __init__(self, prior=DEFAULT_PRIOR, strength=2.0, corpus_prior=CORPUS_PRIOR, forgetting=FORGETTING):
        prior, corpus_prior = (np.asarray(p, dtype=np.float64) for p in (prior, corpus_prior))
        for name, p in (("prior", prior), ("corpus_prior", corpus_prior)):
            if p.shape != LENGTH_EDGES.shape or np.any((p <= 0) | (p >= 1)):
                raise ValueError(f"{name} must hold {LENGTH_EDGES.size} rates in (0, 1)")
        if not 0 < strength < np.inf:  # an infinite prior weight turns every rate into inf / inf
            raise ValueError(f"strength must be positive and finite, got {strength}")
        if not 0 < forgetting <= 1:
            raise ValueError(f"forgetting must be in (0, 1], got {forgetting}")
        self.prior = np.tile(prior, (2, len(ORIGINS), 1))
        self.prior[:, CORPUS] = corpus_prior
        self.strength = strength
        self.forgetting = forgetting
        self.hits = np.zeros_like(self.prior)
        self.trials = np.zeros_like(self.prior)

    def rates(self, lengths, origin, copying=True):
        """Posterior mean acceptance rate at matched suffix ``lengths`` (an int or an array)."""
        cell = (int(bool(copying)), origin_cell(origin), bucket(lengths))
        s = self.strength
        return (s * self.prior[cell] + self.hits[cell]) / (s + self.trials[cell])

    def rate(self, length, origin, copying=True):
        return float(self.rates(length, origin, copying))

    @staticmethod
    def judged_lengths(length, n, copying):
        """The matched length each of a draft's first ``n`` positions is judged at."""
        return length + np.arange(int(n)) if copying else np.full(int(n), length)

    def expected(self, length, origin, k_max, copying=True):
        """``E[accepted | k]`` for k = 0 .. k_max, for a draft from a match of ``length`` tokens."""
        return expected_accepted(self.rates(self.judged_lengths(length, k_max, copying), origin, copying))

    def observe(self, length, origin, accepted, drafted, copying=True):
        """One verification: the first ``accepted`` of ``drafted`` tokens kept. Position i was judged at
        ``judged_lengths``'s length: a success while i < accepted, then one failure if the draft was cut;
        later draft tokens were never judged."""
        if drafted <= 0:
            return
        self.hits *= self.forgetting
        self.trials *= self.forgetting
        cells = (int(bool(copying)), origin_cell(origin))
        judged = bucket(self.judged_lengths(length, min(accepted + 1, drafted), copying))
        np.add.at(self.trials[cells], judged, 1.0)
        np.add.at(self.hits[cells], judged[:accepted], 1.0)

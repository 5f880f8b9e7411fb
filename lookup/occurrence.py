"""Which earlier occurrence supplies the draft, learned within the request (``occurrence="learned"``).

The longest matched suffix usually occurred more than once, and the occurrences go on differently. Two rules
each win somewhere on the development suites (``docs/evidence.md``, "Learned occurrence"):

* ``frequent``: the latest occurrence of the token that most often followed the whole match (the rule
  draftless used alone before);
* ``first_short``: the earliest occurrence of the match's last ``SHORT`` tokens only. vLLM's n-gram rule
  matches at most 5 tokens and takes the oldest occurrence; when the long match lies in text the model
  generated, this reaches back to the prompt, which the model is often translating or quoting. On Gemma 3
  270M's translations that rule kept 5.16 tokens a pass on the GPU against draftless's 4.87.

Neither wins everywhere, and the request itself says which one it follows: after every verification both
rules' continuations are scored against the tokens the target actually produced, whichever one was drafted
(the other's is read from the index, at no model cost). A rule earns the number of leading tokens it got
right within the tokens that the pass settled; scores forget by ``memory`` per pass, and ``first_short``
supplies the draft only while its score leads by more than ``margin`` tokens, so that a request starts on,
and stays on, ``frequent`` until the evidence says otherwise. (Also scoring ``recent`` and the earliest
occurrence of the whole match moved the replayed mean gain by at most 0.1 %.)
"""

import numpy as np

RULES = ("frequent", "first_short")
SHORT = 5


def source_end(index, match, occurrence):
    """The end position of the earlier occurrence of ``match`` (the index's longest match) whose
    continuation is drafted, by a fixed ``occurrence`` rule of ``AdaptiveConfig``: "frequent", "recent" or
    "first"."""
    if occurrence == "frequent":
        return frequent_end(index.continuations(limit=1), match.recent_end)
    return match.recent_end if occurrence == "recent" else match.first_end


def frequent_end(best, recent_end):
    """The "frequent" rule's end position: the latest occurrence of the token that most often followed the
    match, given the match's top follower (``continuations(limit=1)``; ties go to the more recent occurrence),
    or ``recent_end``, the match's latest occurrence, where nothing followed it."""
    return int(best.ends[0]) - 1 if best.tokens.size else recent_end


def rule_ends(index, match):
    """``(end of frequent, end of first_short)``: where each rule's occurrence of ``match`` (the index's
    current longest match, of length >= 1) ends; its continuation starts right after."""
    frequent = source_end(index, match, "frequent")
    first_short = match.first_end
    if match.length > SHORT:  # the state holding the last SHORT tokens: a suffix-link ancestor of the match's
        first_short = index.state_ends(index.suffix_state(SHORT))[1]
    return frequent, first_short


def agreement(candidate, tokens):
    """How many leading tokens of ``candidate`` equal ``tokens`` (compared over the shorter of the two)."""
    n = min(candidate.size, tokens.size)
    differ = np.flatnonzero(candidate[:n] != tokens[:n])
    return int(differ[0]) if differ.size else n


def periodic_continuation(index, end, k, periodic=True):
    """The ``k`` tokens that follow end position ``end`` (int64). The stream's last ``p = len(index) - 1 - end``
    tokens repeat what followed ``end``; with ``periodic``, past the stream's end the continuation is its own
    first ``p`` tokens again (token ``i`` is token ``i - p``, as an overlapping copy reads what it has just
    written), and without it the continuation stops there, at ``p`` tokens."""
    head = index.continuation(end, k).astype(np.int64)
    return np.resize(head, int(k)) if periodic and 0 < head.size < k else head


class OccurrenceChooser:
    """Forgetting-weighted scores of the two rules (``scores``, in ``RULES`` order), from each pass's outcome.
    With ``periodic``, each rule's continuation is scored as the policy would draft it
    (``periodic_continuation``)."""

    def __init__(self, memory=0.6, margin=1.0, periodic=False):
        if not 0 < memory <= 1:
            raise ValueError(f"memory must be in (0, 1], got {memory}")
        if not margin >= 0:
            raise ValueError(f"margin must be >= 0, got {margin}")
        self.memory, self.margin, self.periodic = float(memory), float(margin), bool(periodic)
        self.scores = np.zeros(len(RULES), dtype=np.float64)

    @property
    def choice(self):
        """0 (``frequent``) or 1 (``first_short``): the latter only while it leads by more than ``margin``."""
        return int(self.scores[1] > self.scores[0] + self.margin)

    def observe(self, index, ends, tokens):
        """Score each rule's continuation (after ``ends``, as ``rule_ends`` gave them before the pass) against
        ``tokens``, what the pass appended: the accepted draft, then the target's own token. Call before the
        tokens are added to ``index``."""
        tokens = np.asarray(tokens, dtype=np.int64).ravel()
        if tokens.size == 0:
            return
        gained = [agreement(periodic_continuation(index, end, tokens.size, self.periodic), tokens) for end in ends]
        self.scores = self.scores * self.memory + np.asarray(gained, dtype=np.float64)

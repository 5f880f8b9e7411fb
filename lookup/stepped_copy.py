"""Stepped copies: text that repeats with its numbers moved on, drafted with the numbers stepped.

A log's next line, a table's next row, a numbered list's next item copy the one before except for their
numbers: ``12:03 ... worker-3 ... batch 33 in 43ms`` after ``12:02 ... worker-2 ... batch 32 in 42ms``. The exact
index drafts the line before as it was and the target rejects the draft at the first number that moved, so every
such line costs a pass per number. Where the stream ends in a *numbered period* (its last ``p`` tokens have the
shape of the ``p`` before them, digits standing for any digit: ``draftless.index.numbered_period``), the stepped
copy drafts the period before with each number stepped by as much as it moved over the period before that: the
line after ``12:02`` and ``12:03`` is drafted with ``12:04``, a number that stayed stays, and a draft stops where
the numbers of the two periods back do not line up.

The acceptance model judges it as a copy from its own cells (``acceptance_model.STEPPED``), its matched length
the number of the stream's last tokens the stepped copy would have written itself (``DigitTokens.agreement``):
long where whole lines stepped as it steps them, short where the model's numbers went their own way (a table's
prices that the model makes up). The policy drafts it where it is worth more tokens per unit of time than the
exact or re-flowed match, which it equals wherever no number moves.

It needs the tokenizer to write every number as a run of one-digit tokens (Gemma 3's and SmolLM2's do: "31" is
"3", "1"); ``draftless.integration`` checks that (``token_text.digit_tokens``) and passes the digits' token ids,
or none, and then no stepped copy is drafted. Replayed over the recorded runs (``docs/evidence.md``,
"Stepped copies"): see that section for the figures that chose it on by default.
"""

import numpy as np

from draftless.index import DigitTokens

# the periods looked for: a period of 4 tokens or more (shorter ones are runs of a repeated word or two), and of
# at most 256 tokens (a row or a log line of Gemma 3's or SmolLM2's tokens is 20-40; a search over longer
# periods costs more per pass than it finds)
MIN_PERIOD = 4
MAX_PERIOD = 256
EMPTY = np.empty(0, dtype=np.int64)


class SteppedCopy:
    """The stepped copy of a request's stream (see the module doc), over the digits' token ids ``digit_tokens``
    (a ``DigitTokens`` or the ten ids, ``digit_tokens[d]`` the token of digit ``d``)."""

    def __init__(self, digit_tokens, min_period=MIN_PERIOD, max_period=MAX_PERIOD):
        self.digits = digit_tokens if isinstance(digit_tokens, DigitTokens) else DigitTokens(digit_tokens)
        if not 1 <= int(min_period) <= int(max_period):
            raise ValueError(
                f"min_period and max_period must satisfy 1 <= min_period <= max_period, got "
                f"{min_period} and {max_period}"
            )
        self.min_period, self.max_period = int(min_period), int(max_period)

    def source(self, index, k):
        """``(agreed, period, draft)`` for the stream indexed by ``index`` (a ``SuffixIndex``): its numbered
        period, how many of its last tokens the stepped copy would have written (at most 64, the acceptance
        model's longest length), and up to ``k`` tokens of the stepped copy; None where the stream ends in no
        numbered period, its last token is not the one the stepped copy would have written (as a match needs one
        token at least), or the copy drafts nothing."""
        if k <= 0:
            return None
        period = self.digits.period(index, self.min_period, self.max_period)
        if period == 0:
            return None
        agreed = self.digits.agreement(index, period, 64)
        if agreed == 0:
            return None
        draft = self.digits.continuation(index, period, k)
        return None if draft.size == 0 else (agreed, period, draft)

    def __repr__(self):
        return f"SteppedCopy({self.digits.ids.tolist()}, min_period={self.min_period}, max_period={self.max_period})"

"""Whether the output is copying or writing: the regime that the acceptance model conditions on.

A generated token is *copied* when the stream, once it is appended, ends in a match of at least
``copy_length`` tokens with earlier text. ``share`` is the forgetting-weighted fraction of generated tokens
that were copied (each older token weighs ``memory`` times less), starting from ``START_SHARE`` worth
``START_WEIGHT`` tokens; the output is *copying* while ``share >= copy_share``. ``COPY_MEMORY`` is a constant,
not a knob: on the recorded 128-token outputs it changed replayed speed by under 0.1 % against no forgetting,
but without it an output that writes for a few hundred tokens would not turn back to copying when it copies
again.

Why it matters (``python -m experiments.acceptance_features``, ``docs/evidence.md``): on the
development suites the share of copied tokens per request averages 0.92 on Gemma 3 270M's code edits
(0.73-0.98) and 0.12-0.21 on SmolLM2-135M's QA, RAG answers and summaries. A draft from a short match is a
copy of a long span in the first kind of output and a phrase that ends within a few tokens in the second; one
set of per-length rates cannot serve both, and within one 128-token request too few long drafts fail for
per-length rates to learn the difference in time. The regime, read off the stream itself, separates them from
the first tokens.
"""

COPY_LENGTH = 6  # a generated token is copied when it ends a match of at least this many tokens
START_SHARE = 0.5  # a request starts undecided, on the copying side of the default threshold 0.4
COPY_MEMORY = 0.98  # each older generated token weighs this much less
START_WEIGHT = 8.0  # worth 8 generated tokens: a few tokens of evidence settle the regime


class CopyRegime:
    def __init__(self, copy_share=0.4, memory=COPY_MEMORY, copy_length=COPY_LENGTH):
        self.copy_length = int(copy_length)
        self.copy_share = float(copy_share)
        self.memory = float(memory)
        self.copied = START_SHARE * START_WEIGHT  # forgetting-weighted count of copied tokens
        self.weight = START_WEIGHT  # forgetting-weighted count of tokens

    @property
    def share(self):
        return self.copied / self.weight

    @property
    def copying(self):
        return self.share >= self.copy_share

    def observe(self, appended, match_length):
        """``appended`` tokens were added, after which the stream ends in a ``match_length``-token match.
        Within a run of appended tokens the match grew one token per token, so the last
        ``match_length - copy_length + 1`` of them (at most all) ended a match of ``copy_length`` or more."""
        appended = int(appended)
        if appended <= 0:
            return
        copied = min(appended, max(0, int(match_length) - self.copy_length + 1))
        # token j (0 = oldest of the run) is weighed memory ** (appended - 1 - j); the copied ones are the newest
        decay = self.memory**appended
        geometric = appended if self.memory == 1.0 else (1.0 - decay) / (1.0 - self.memory)
        newest = copied if self.memory == 1.0 else (1.0 - self.memory**copied) / (1.0 - self.memory)
        self.copied = self.copied * decay + newest
        self.weight = self.weight * decay + geometric

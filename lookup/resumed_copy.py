"""The resumed copy: where a copy from the request's own text goes on after the target broke it.

An edited copy (code under edit, a quoted passage with a word changed) breaks where the output replaces a token of
its source, and often goes on right after it, the replacement as long as what it replaced. The longest matched
suffix cannot see that: the replacement ends the match, and until the output's own tokens match the source again
the index finds short matches elsewhere, or none, and the policy takes plain steps. ``ResumedCopy`` keeps the
source position at which the copy broke (the end position of the first rejected token of a draft copied from the
request's own stream) and moves it on by one position per token generated since, for ``horizon`` tokens: the
continuation after it is the resumed copy. The adaptive policy drafts it only where it would otherwise take a
plain step, at the length that pays best under the resumed copy's own acceptance model (``PRIOR``, then what the
request's resumed drafts show), whose position ``i`` is judged at matched length ``1 + i`` as a copy's is.

Replayed over every recorded run before adoption (``AdaptiveConfig.resume_horizon``; "The resumed copy" in
``docs/evidence.md``): +1.5 % on average over 493 suite columns. Drafted wherever it pays more than
the matched suffix's draft, not only in place of a plain step, it gained +1.3 % on average but cost the H200
curve's summaries and RAG answers 5-6 %: on a near-flat curve every draft pays, and the resumed copy displaced
drafts from the matched suffix that the target would have kept. Also tried and left out: learning its cell from
every pass, drafted or not (+1.7 %, but a column at -5.7 %), and preferring, while copying, the occurrence of the
matched suffix nearest after the broken copy (+0.1-0.2 %).
"""

from draftless.index.validation import check_positive_int

from .acceptance_model import DEFAULT_PRIOR, GENERATED, AcceptanceModel

# the resumed copy's acceptance rate per position before any evidence, position i at matched length 1 + i (its
# bucket in ``acceptance_model.LENGTH_EDGES``): the first token's measured on recorded outputs of
# both models (the token after the broken source token was the target's next one after 0.18 / 0.23 of Gemma 3
# 270M's rejected copies while writing / copying, 0.06 / 0.16 of SmolLM2-135M's); once it held, the copy went
# on about as a matched suffix's does (0.65-0.88 at positions 1-4), so the later positions take the default prior
PRIOR = (0.15,) + DEFAULT_PRIOR[1:]


class ResumedCopy:
    """Where the request's latest broken copy would resume (``end``), and the acceptance model of its drafts."""

    def __init__(self, horizon, strength=2.0, forgetting=0.98):
        self.horizon = check_positive_int(horizon, "horizon")
        self.model = AcceptanceModel(PRIOR, strength, forgetting)
        self.end = None  # the end position whose continuation is the resumed copy; None: no copy broke lately
        self.age = 0  # tokens generated since it broke

    def available(self, stream_length):
        """How many tokens of the resumed copy the stream holds (0: none to draft)."""
        return 0 if self.end is None else max(0, int(stream_length) - 1 - self.end)

    def expected(self, k_max):
        """``E[accepted | k]`` for a resumed copy of k = 0 .. ``k_max`` tokens."""
        return self.model.expected(1, GENERATED, k_max, True)

    def observe(self, accepted, drafted):
        """A resumed copy of ``drafted`` tokens was verified: its first ``accepted`` kept."""
        self.model.observe(1, GENERATED, accepted, drafted, True)

    def after_pass(self, source_end, drafted, appended, stream_length):
        """A pass appended ``appended`` tokens (its accepted draft tokens, then the target's own) to a stream of
        ``stream_length`` tokens. ``source_end``: the end position after which its draft of ``drafted`` tokens
        was copied from the request's own stream (None: no such draft). A copy that broke within the stream as it
        was resumes after the rejected token; otherwise the resumed copy moves on by ``appended`` tokens, and
        is forgotten ``horizon`` tokens after its copy broke."""
        appended = int(appended)
        if appended < 1:
            return
        accepted = appended - 1
        if source_end is not None and accepted < drafted and source_end + 1 + accepted < stream_length:
            self.end, self.age = int(source_end) + 1 + accepted, 0  # invariant: end < stream_length
        elif self.end is not None:
            self.end += appended
            self.age += appended
            if self.age > self.horizon:
                self.end = None

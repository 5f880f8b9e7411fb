"""Adaptive drafting: per step, the draft length k that maximises expected tokens per unit of time.

    k* = argmax_k (1 + E[accepted | k]) / c(k),   k = 0 .. min(cap, continuation available, budget)

with ``c`` the target's cost model (``cost_model``) and ``E`` from the online acceptance model
(``acceptance_model``). k = 0 is a plain decode step, chosen whenever no draft is expected to pay for
itself; the acceptance model keeps learning from every verification, so drafting comes back when the text
starts repeating. The proposer infers each verification's outcome from the tokens passed to ``update``
(the accepted prefix of its draft, then the target's own token), so the loop needs no extra interface;
``record_pass(k, seconds)`` lets the loop refine the cost model with the passes it makes anyway.
"""

from __future__ import annotations

import numpy as np

from draftless.index import SuffixIndex
from draftless.index.validation import as_token_array, check_positive_int

from .acceptance_model import CORPUS, GENERATED, PROMPT, REFLOWED, STEPPED, AcceptanceModel
from .adaptive_config import OCCURRENCES, AdaptiveConfig  # noqa: F401 (names kept importable from here)
from .copy_regime import CopyRegime
from .corpus import ReferenceCorpus
from .cost_model import (  # noqa: F401 (names kept importable from here)
    CPU_SMALL_MODEL,
    CostCurve,
    OnlineCost,
    best_draft,
    best_draft_length,
    cost_model,
)
from .occurrence import agreement, periodic_continuation, source_end
from .proposer import draft_budget
from .reflow import ReflowIndex, check_text_classes
from .request_start import RequestStart
from .stepped_copy import SteppedCopy

EMPTY = np.empty(0, dtype=np.int64)


class AdaptiveProposer:
    """The adaptive policy over the request's own stream and, given a ``ReferenceCorpus``, over the corpus
    too, and, given the tokens' texts (``text_classes``), over the stream with its whitespace ignored
    (``reflow``), and, given the digits' token ids (``digit_tokens``), the period before with its numbers stepped
    (``stepped_copy``): each step weighs the longest match in each (its own acceptance cells,
    ``acceptance_model.CORPUS`` for the corpus, ``REFLOWED`` for the re-flowed match, ``STEPPED`` for the stepped
    copy) and drafts from whichever is worth more tokens per unit of time; the request's own stream wins ties.
    Given a ``RequestStart`` (``start``), each request's drafts until its first verified one are chosen under what
    earlier requests' first drafts showed, and add to it."""

    def __init__(
        self,
        config=None,
        cost=None,
        vocab_size=None,
        excluded=(),
        corpus=None,
        text_classes=None,
        start=None,
        digit_tokens=None,
        staged_head=False,
    ):
        self.config = AdaptiveConfig() if config is None else config
        if not isinstance(self.config, AdaptiveConfig):
            raise TypeError(f"config must be an AdaptiveConfig, got {type(self.config).__name__}")
        if isinstance(excluded, (str, bytes)) or not hasattr(excluded, "__iter__"):
            raise TypeError(f"excluded must be a collection of draft lengths, got {type(excluded).__name__}")
        excluded = tuple(excluded)
        if not all(isinstance(k, (int, np.integer)) and not isinstance(k, bool) and k >= 1 for k in excluded):
            raise ValueError(
                f"excluded must hold draft lengths >= 1 (0, a plain step, is always allowed), got {excluded!r}"
            )
        self.excluded = tuple(sorted({int(k) for k in excluded}))
        curve = CPU_SMALL_MODEL if cost is None else cost
        if not isinstance(curve, OnlineCost):
            curve = cost_model(self.config, curve, staged=staged_head)
        self.cost = curve
        self.vocab_size = vocab_size
        if corpus is not None and not isinstance(corpus, ReferenceCorpus):
            raise TypeError(f"corpus must be a ReferenceCorpus or None, got {type(corpus).__name__}")
        self.corpus = corpus
        if start is not None and not isinstance(start, RequestStart):
            raise TypeError(f"start must be a RequestStart or None, got {type(start).__name__}")
        self.start = start
        self.request_start = None  # the RequestStart this request's first drafts are chosen under (``reset``)
        self._starting = False  # no draft of this request verified yet: drafts chosen under ``request_start``
        self.chosen = []  # (stream length, k) per step: the policy's trace
        # the rows of the output layer the loop computes first for the latest draft, the rest only where the
        # draft held through them (``OnlineCost.staged``); None: all at once
        self.first_rows = None
        self.reflow = None
        self.stepped = None
        self.use_digit_tokens(digit_tokens)
        self.use_text_classes(text_classes)

    def use_digit_tokens(self, digit_tokens: object) -> None:
        """Draft stepped copies too (``stepped_copy``), from the next draft on: ``digit_tokens`` holds the ten
        ASCII digits' token ids (``digit_tokens[d]`` the token of digit ``d``) of a tokenizer that writes numbers
        digit by digit; None: never. Checked, then unused, when the config's ``stepped_copy`` is off."""
        stepped = None if digit_tokens is None else SteppedCopy(digit_tokens)  # checks them
        self.stepped = stepped if self.config.stepped_copy else None

    def use_text_classes(self, text_classes: object) -> None:
        """Draft re-flowed copies too (``reflow``), from the next request on: ``text_classes`` maps each token id
        to its text class (``reflow.check_text_classes``); None: never. Checked, then unused, when the config's
        ``reflow`` is off."""
        self.reflow = None
        if text_classes is not None and self.config.reflow:
            self.reflow = ReflowIndex(text_classes, lead=self.config.reflow_lead)  # checks them
        elif text_classes is not None:
            check_text_classes(text_classes)
        self.reset(EMPTY)

    def reset(self, tokens: object) -> None:
        self.index = SuffixIndex(tokens, vocab_size=self.vocab_size)
        self.prompt_len = len(self.index)
        c = self.config
        self.acceptance = AcceptanceModel(c.prior, c.prior_strength, c.corpus_prior)
        self.regime = CopyRegime(c.copy_share)
        self._pending = None
        self._offered = None
        self.request_start = self.start
        self._starting = self.request_start is not None
        self.chosen = []
        self.view = None  # the request's match against the corpus
        if self.reflow is not None:
            self.reflow.reset(self.index.tokens)
        if self.corpus is not None:
            self.view = self.corpus.view()
            self.view.feed(self.index.tokens)

    def propose(self, max_tokens: int) -> np.ndarray:
        best = self._best_option(max_tokens)
        if best is None or best[1] == 0:  # a plain step
            return self._take(None, 0)
        self.first_rows = best[5] if best[5] < best[1] + 1 else None
        return self._take(best, best[1])

    def offer(self, max_tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """``(draft, expected)``: the best source's continuation as far as it goes (at most ``max_tokens``), and
        ``expected[k]`` = E[accepted | its first k tokens] for k = 0 .. len(draft). A batch chooses one width for
        all its rows (``batch_policy.common_width``) and then calls ``take(k)``; ``propose`` is the same choice for
        one row."""
        best = self._best_option(max_tokens)
        self._offered = best
        if best is None:
            return EMPTY, np.zeros(1)
        expected = best[6]
        return self._draft(best, expected.size - 1), expected

    def take(self, k: int) -> np.ndarray:
        """The first ``k`` tokens of the latest ``offer``'s draft, as this step's draft (0: a plain step)."""
        k = check_positive_int(k, "k", minimum=0)
        return self._take(self._offered, k)

    def _take(self, best, k):
        if best is None or k == 0:  # nothing drafted: the next ``update`` has no draft to learn from
            self._pending = None
            self.chosen.append((len(self.index), 0))
            return EMPTY
        draft = self._draft(best, k)
        self.chosen.append((len(self.index), int(draft.size)))
        return draft

    def _draft(self, best, k):
        """The first ``k`` tokens of option ``best``'s continuation, kept as the pending draft that ``update``
        learns from."""
        _, _, length, origin, end, _, _, copying, stepped_draft = best
        if origin == STEPPED:
            draft = stepped_draft[:k]
        elif origin == CORPUS:
            draft = self.view.continuation(k, end)
        elif origin == REFLOWED:  # the copy with the whitespace the model has been writing instead
            self._reflow_source = self.index.continuation(end, k)
            draft = self.reflow.substituted(self._reflow_source)
        else:
            draft = periodic_continuation(self.index, end, k)
        self._pending = (length, origin, copying, draft)  # chosen under ``start`` while ``_starting``
        return draft

    def _best_option(self, max_tokens):
        """The source worth most tokens per unit of time, as ``(value, k, length, origin, end, first_rows,
        expected, copying, stepped draft)``, or None where no source matches."""
        self._pending = None
        self.first_rows = None
        match = self.index.longest_match()
        k_cap = min(draft_budget(max_tokens), self.config.max_draft)
        copying = self.regime.copying
        acceptance = self.request_start if self._starting else self.acceptance  # a first draft: as they start
        options = []  # one per source, the request's own stream first
        if match.length >= self.config.min_match and k_cap > 0:
            end = self.source_end(match)
            # the continuation goes on past the stream's end, period after period (``periodic_continuation``)
            origin = PROMPT if end < self.prompt_len else GENERATED
            options.append(self._option(acceptance, match.length, origin, end, k_cap, copying))
        if self.view is not None and self.view.length >= self.config.min_match and k_cap > 0:
            end = self.view.source_end()
            horizon = min(k_cap, self.view.available(end))
            options.append(self._option(acceptance, self.view.length, CORPUS, end, horizon, copying))
        reflowed = None
        if self.reflow is not None and k_cap > 0:
            reflowed = self.reflow.source(match.length)
        if reflowed is not None:
            length, end = reflowed
            horizon = min(k_cap, len(self.index) - 1 - end)
            options.append(self._option(acceptance, length, REFLOWED, end, horizon, copying))
        stepped = self.stepped.source(self.index, k_cap) if self.stepped is not None else None
        if stepped is not None:  # judged as a copy whatever the regime: its length grows as a copy's match does
            length, period, stepped_draft = stepped
            options.append(self._option(acceptance, length, STEPPED, period, stepped_draft.size, True, stepped_draft))
        return max(options, key=lambda option: option[0]) if options else None  # the first of equals

    def _option(self, acceptance, length, origin, end, horizon, copying, stepped_draft=None):
        expected = acceptance.expected(length, origin, horizon, copying)
        cost, first_rows = self.cost.staged(expected)
        k, value = best_draft(expected, cost.__getitem__, self.excluded)
        return value, k, length, origin, end, int(first_rows[k]), expected, copying, stepped_draft

    def source_end(self, match):
        """The end of the earlier occurrence of ``match`` (the index's longest match, at least ``min_match``
        long) whose continuation is drafted, by the configured ``occurrence`` rule; the "frequent" rule's end
        moves to the match's earliest occurrence by ``earliest_in_prompt``."""
        occurrence = self.config.occurrence
        end = source_end(self.index, match, occurrence)
        return self._copied_passage(match, end) if occurrence == "frequent" else end

    def _copied_passage(self, match, end):
        """``end``, the "frequent" rule's occurrence of ``match``, or, while the output is copying and that
        occurrence lies in the prompt, the match's earliest occurrence (also in the prompt) if the match is at
        least ``earliest_in_prompt`` tokens long."""
        least = self.config.earliest_in_prompt
        if least and match.length >= least and end < self.prompt_len and self.regime.copying:
            return match.first_end
        return end

    def update(self, tokens: object) -> None:
        tokens = as_token_array(tokens, self.index.vocab_size).astype(np.int64)  # checked before any state moves
        if self._pending is not None:
            length, origin, copying, draft = self._pending
            accepted = agreement(draft, tokens[:-1])  # the last token is the target's own
            self.acceptance.observe(length, origin, accepted, draft.size, copying)
            if self._starting:  # the request's first verified draft (it was chosen under ``request_start``)
                self.request_start.observe(length, origin, accepted, draft.size, copying)
                self._starting = False
            if origin == REFLOWED:
                self.reflow.learn(self._reflow_source, tokens, accepted)
            self._pending = None
        if tokens.size > 1:  # the accepted draft tokens, then the target's own: a copy usually ends at the latter
            self._extend(tokens[:-1])
            self.regime.observe(tokens.size - 1, self._matched_length())
        self._extend(tokens[-1:])
        self.regime.observe(min(1, tokens.size), self._matched_length())

    def _extend(self, tokens):
        self.index.extend(tokens)
        if self.reflow is not None:
            self.reflow.extend(tokens)
        if self.view is not None:
            self.view.feed(tokens)

    def _matched_length(self):
        """The longest match of the stream's end, in the stream itself or in the corpus."""
        length = self.index.longest_match().length
        return length if self.view is None else max(length, self.view.length)

    @property
    def stages_output_layer(self) -> bool:
        """Whether this proposer may ask for a staged output layer (``first_rows``): its cost model stages
        (``staged_head`` and a curve with the output layer's times). The loop hooks the output
        layer only then."""
        return self.cost.staged_head

    def record_pass(self, k: int, seconds: float, head_rows: tuple[int, ...] | None = None) -> None:
        """A pass over ``1 + k`` tokens took ``seconds``, its output layer computed in products over ``head_rows``
        rows (``cost_model.head_products``; by default one over all)."""
        self.cost.observe(k, seconds, head_rows)

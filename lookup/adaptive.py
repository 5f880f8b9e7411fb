"""Adaptive drafting: per step, the draft length k that maximises expected tokens per unit of time.

    k* = argmax_k (1 + E[accepted | k]) / c(k),   k = 0 .. min(cap, continuation available, budget)

with ``c`` the target's cost model (``cost_model``) and ``E`` from the online acceptance model
(``acceptance_model``). k = 0 is a plain decode step, chosen whenever no draft is expected to pay for
itself; the acceptance model keeps learning from every verification, so drafting comes back when the text
starts repeating. The proposer infers each verification's outcome from the tokens passed to ``update``
(the accepted prefix of its draft, then the target's own token), so the loop needs no extra interface;
``record_pass(k, seconds)`` lets the loop refine the cost model with the passes it makes anyway.
"""

from dataclasses import dataclass

import numpy as np

from draftless.index import SuffixIndex
from draftless.index.validation import as_token_array, check_positive_int

from .acceptance_model import (CORPUS, CORPUS_PRIOR, DEFAULT_PRIOR, GENERATED, LENGTH_EDGES, PROMPT, REFLOWED,
                               AcceptanceModel)
from .config import check_max_draft
from .copy_regime import CopyRegime
from .corpus import ReferenceCorpus
from .cost_model import CostCurve, OnlineCost
from .occurrence import OccurrenceChooser, agreement, periodic_continuation, rule_ends, source_end
from .proposer import draft_budget
from .reflow import ReflowIndex, check_text_classes

EMPTY = np.empty(0, dtype=np.int64)
OCCURRENCES = ("frequent", "recent", "first", "learned")
# c(k)/c(0) calibrated for Gemma 3 270M, fp32, on a 2-core CPU (MKL, every linear layer in its fastest form,
# integration/linear_plan.py): a stand-in for replays of runs that recorded no curve, and for callers that
# pass none
CPU_SMALL_MODEL = CostCurve((0, 1, 2, 3, 4, 8, 16, 32, 64), (1.0, 1.02, 1.34, 1.34, 1.63, 3.16, 4.25, 6.46, 9.41))


@dataclass(frozen=True, slots=True)
class AdaptiveConfig:
    """Knobs of the adaptive policy. Each default was chosen by replaying the 86 greedy outputs of the full
    development run on Gemma 3 270M (``python -m benchmarks.replay
    benchmarks/recorded/gemma-3-270m_limit10_2026-11-29.json --grid``: one knob at a time away from the
    default, modelled with the run's calibrated cost curve; table in ``benchmarks/recorded/README.md``).
    Overall modelled speedup 3.12x; ``max_draft`` 64 (32: code_edit 6.37x instead of 7.12x; 128: no change),
    ``occurrence`` "recent" ("first": 3.01x overall, math 1.64x instead of 1.96x, RAG 2.05x instead of
    2.16x), ``prior`` fitted on recorded outputs (flat 0.5: 2.59x, flat 0.8: 2.92x); ``min_match``,
    ``prior_strength`` and ``forgetting`` move the overall figure by 2% at most. Out of sample, on
    SmolLM2-135M-Instruct's recorded run, one knob moved alone helps by 2% at most (``min_match`` 2)
    and ``prior_strength`` 8 costs 6%. Checked again on the ``*_linear-plans`` runs, whose plain step is
    cheaper and curve steeper (Gemma 2.55x, SmolLM2 1.39x; ``min_match`` 2 now loses on both, ``max_draft``
    16 helps SmolLM2 by 4% and costs Gemma's code edits 21%), and under a near-flat accelerator curve
    (``--cost near_flat``: ``min_match`` 2 costs 7-8%).

    ``occurrence`` "frequent" and the copy regime (``copy_length``, ``copy_share``, ``copy_memory``; see
    ``copy_regime``) were chosen the same way on the ``*_linear-plans`` runs (Gemma all / code_edit, SmolLM2
    summarization / rag / qa): the defaults give 2.61 / 4.25 and 1.35 / 1.36 / 1.24; ``copy_share`` 0 (always
    copying, the policy before, with "frequent") 2.56 / 4.25 and 1.25 / 1.27 / 1.23; ``copy_share`` 0.3 leaves
    SmolLM2's summaries at 1.31; ``copy_length`` 8 or 12 costs Gemma's code edits 3-5%; "recent" instead of
    "frequent" 2.59 and 1.34 / 1.35 / 1.24; ``copy_memory`` 0.95 costs Gemma's summaries 3% and 1.0 moves
    nothing by more than 2%.

    ``occurrence`` "learned" (``occurrence_memory`` 0.6, ``occurrence_margin`` 1.0; see ``occurrence``) was
    chosen on the H200 run (``gemma-3-270m_h200-fp32_limit10_2026-11-30_pass-check``, its curve) and the
    session-10 CPU runs (``*_reserved-cache``). Against "frequent": H200 4.58x instead of 4.50x (translation
    4.97x / 4.78x, qa 4.24x / 4.15x), Gemma CPU 2.59x / 2.57x and 2.40x / 2.36x (translation 2.86x / 2.75x),
    SmolLM2 1.51x / 1.52x; over 58 suite columns of these and the older recordings +1.1% on average, none
    losing more than 1.1%. Memory 0.7 gives the same, 0.8 a worst column of -1.7%; margin 0.5 +1.5% with a
    worst of -2.4% to -3.5%, margin 0 +1.2% with -5.2% (SmolLM2's code edits), margin 2 +0.4%.

    ``periodic`` (a continuation that reaches the stream's end goes on with itself) was chosen on every recorded
    run, each under its own curve (``python -m benchmarks.knob_evidence benchmarks/recorded/*.json --knob
    periodic --values false,true``; ``benchmarks/recorded/README.md``, "The periodic continuation"): over 123
    suite columns +1.8% on average, worst -3.9% (SmolLM2's code edits on an old curve), best +9.2%; a whole
    run, Gemma -0.9% to +6.1% (multi_turn +6.1%, the H200 runs +3.3% to +5.3%), SmolLM2 -1.4% to +0.5%.

    ``earliest_in_prompt`` 2 was chosen on every recorded run, each under its own curve (``python -m
    benchmarks.knob_evidence benchmarks/recorded/*.json --knob earliest_in_prompt --values 0,1,2,3,4``;
    ``benchmarks/recorded/README.md``, "The copied passage"): over 204 suite columns of 48 runs, against 0 (the
    "frequent" occurrence wherever it lies), +1.5 % on average, worst -0.8 %, best +16.7 % (Gemma's multi_turn);
    SmolLM2's code edits +4.2 % to +6.5 %, no whole run below -0.1 %. 1: +1.6 %, worst -1.8 % (Gemma's rag);
    3 and 4: +0.8 %, and none of the code edits' gain.

    ``corpus_prior`` (used only with a ``ReferenceCorpus``) was fitted on Gemma's recorded outputs, each matched
    against the outputs recorded before it (``benchmarks/recorded/README.md``, "Drafting from earlier
    requests"). Drafting from that history under ``prior`` instead measured 0.966-0.984 of the request-only
    policy on SmolLM2's code_edit, rag and summarization; under ``corpus_prior`` no suite fell below 0.993 on
    either model (overall 1.024x SmolLM2, 1.027x Gemma; replayed 2.08x against 2.04x and 3.91x against 3.85x).
    """

    max_draft: int = 64  # the largest draft ever proposed (at most 1024)
    min_match: int = 1  # shorter matches are never drafted from
    # which earlier occurrence supplies the continuation: "learned" (per request, "frequent" or the earliest
    # occurrence of the last 5 tokens, whichever the request's own passes favour; see ``occurrence``),
    # "frequent" (the latest occurrence of the token that most often followed the matched suffix), "recent"
    # (the latest occurrence) or "first" (the earliest)
    occurrence: str = "learned"
    prior_strength: float = 2.0
    forgetting: float = 0.98
    prior: tuple = DEFAULT_PRIOR  # acceptance rate per matched-length bucket before any evidence
    corpus_prior: tuple = CORPUS_PRIOR  # the same for a match in a ReferenceCorpus (see ``acceptance_model``)
    copy_length: int = 6  # a generated token is copied when it ends a match of at least this many tokens
    copy_share: float = 0.4  # the output is copying while at least this share of recent tokens is copied
    copy_memory: float = 0.98  # per-token forgetting of that share
    occurrence_memory: float = 0.6  # "learned": per-pass forgetting of the rules' scores
    occurrence_margin: float = 1.0  # "learned": the lead (tokens) the earliest short match needs to be drafted
    # a continuation that runs into the end of the stream (an occurrence one period back in text that repeats
    # with that period) goes on with itself, period after period, rather than stopping there
    periodic: bool = True
    # while the output is copying, a match of at least this many tokens whose "frequent" occurrence lies in the
    # prompt is continued from its earliest occurrence instead, the passage the output is copying (0: never)
    earliest_in_prompt: int = 2
    # given the tokens' texts, also draft from the longest match with whitespace ignored (``reflow``: a copy the
    # model re-wraps or re-indents) where it spans at least ``reflow_lead`` more words than the exact match
    reflow: bool = True
    reflow_lead: int = 2
    # the cost curve's shape learned from the run's own passes at this rate per pass (``cost_model.OnlineCost``;
    # 0: the calibrated shape as it is, only its scale followed). 0.1 by replay under another host's curve with
    # 4 % noise on each pass (the loop's, measured): a stale shape's 8.0 % / 11.3 % loss (Gemma / SmolLM2, every
    # suite) falls to 1.7 % / 1.4 % across requests and 6.1 % / 4.9 % within each; under the run's own curve it
    # costs 0.2 % at most (``benchmarks.coarse_curve --shape-rates``; "The curve's shape, learned" in
    # ``benchmarks/recorded/README.md``)
    shape_rate: float = 0.1
    # the cost model's scale set by its first pass, not averaged up from 1 (``OnlineCost``): under a curve 0.68x or
    # 1.5x the machine's, the learned shape then drafts exactly as under the right one (averaged: Gemma's
    # multi_turn -3.5 %, code_edit -1.1 %; ``benchmarks.coarse_curve --levels 0.68,1.5 [--averaged-level]``)
    first_level: bool = True
    # the shape learned from passes drafted at a knot's length only (``OnlineCost(knots_only=True)``). Off: a
    # pass between knots costs 27-33 % more than the line between them in the loop (the 8-row stairs; 19 such
    # passes against 546 at knots in session 32's runs) and raises the knots around it, but replayed with that
    # excess and the shape kept, learning at knots only recovers less of a stale shape's loss (Gemma -3.5 %
    # against -1.2 %, code_edit -7.5 % against -3.0 %; SmolLM2 -1.6 % against -1.4 %) for +0.2-0.3 % under the
    # right curve (``benchmarks.coarse_curve --stair-excess 1.3 --kept-shape [--learn-at-knots]``)
    shape_at_knots: bool = False
    # where the calibration timed the output layer within each pass (``CostCurve.head``), a pass may compute it
    # in two stages, the rows after the first stage only where the draft held through it (``OnlineCost.staged``),
    # chosen per pass by the expected cost under the acceptance model. Off: on Gemma 3 270M's code_edit (the
    # output layer 42-70 % of a pass) measured 78.0 against 78.9 tok/s off and 67.2 against 68.8, modelled -0.9 %
    # and -3.5 %; replayed over 36 suite columns of 12 runs of both models -0.2 % on average, worst -4.5 %, best
    # +8.2 % (``benchmarks.knob_evidence --knob staged_head``; "The output layer in two stages" in
    # ``benchmarks/recorded/README.md``): the rows it saves follow drafts that fail early, which the acceptance
    # model cannot tell from drafts that hold
    staged_head: bool = False

    def __post_init__(self):
        check_max_draft(self.max_draft)
        for name in ("min_match", "copy_length"):
            check_positive_int(getattr(self, name), name)
        check_positive_int(self.earliest_in_prompt, "earliest_in_prompt", minimum=0)
        check_positive_int(self.reflow_lead, "reflow_lead", minimum=0)
        for name in ("prior_strength", "forgetting", "copy_share", "copy_memory", "occurrence_memory",
                     "occurrence_margin", "shape_rate"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise TypeError(f"{name} must be a number, got {type(value).__name__}")
        if self.occurrence not in OCCURRENCES:
            raise ValueError(f"occurrence must be one of {OCCURRENCES}, got {self.occurrence!r}")
        if not 0 < self.prior_strength < np.inf:  # infinite: every rate inf / inf, NaN
            raise ValueError(f"prior_strength must be positive and finite, got {self.prior_strength}")
        for name in ("forgetting", "copy_memory", "occurrence_memory"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {getattr(self, name)}")
        if not 0 <= self.shape_rate < 1:
            raise ValueError(f"shape_rate must be in [0, 1), got {self.shape_rate}")
        if not self.occurrence_margin >= 0:
            raise ValueError(f"occurrence_margin must be >= 0, got {self.occurrence_margin}")
        for name in ("periodic", "reflow", "first_level", "shape_at_knots", "staged_head"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise TypeError(f"{name} must be a bool, got {type(getattr(self, name)).__name__}")
            object.__setattr__(self, name, bool(getattr(self, name)))  # numpy's bool too, but stored as JSON's
        if not 0 <= self.copy_share <= 1:
            raise ValueError(f"copy_share must be in [0, 1], got {self.copy_share}")
        for name in ("prior", "corpus_prior"):
            value = getattr(self, name)
            rates = tuple(float(x) for x in value)
            if len(rates) != len(LENGTH_EDGES) or not all(0 < x < 1 for x in rates):
                raise ValueError(f"{name} must hold {len(LENGTH_EDGES)} rates in (0, 1), got {value!r}")
            object.__setattr__(self, name, rates)


def cost_model(config, curve, log_shape=None):
    """The ``OnlineCost`` that ``config`` (an ``AdaptiveConfig``) learns ``curve`` with, from ``log_shape`` if
    given (a shape learned before)."""
    return OnlineCost(curve, shape_rate=config.shape_rate, first_level=config.first_level, log_shape=log_shape,
                      knots_only=config.shape_at_knots, staged=config.staged_head)


def best_draft_length(expected, cost, excluded=()):
    """The k that maximises (1 + E[accepted | k]) / cost(k), given ``expected[k] = E[accepted | k]``, among the
    lengths not in ``excluded`` (draft lengths >= 1 whose verification is not exact on the device)."""
    return best_draft(expected, cost, excluded)[0]


def best_draft(expected, cost, excluded=()):
    """``(k, value)``: ``best_draft_length``'s k and its expected tokens per unit of cost."""
    expected = np.asarray(expected, dtype=np.float64)
    value = (1.0 + expected) / np.asarray(cost(np.arange(expected.size)), dtype=np.float64)
    for k in excluded:
        if k < value.size:
            value[k] = -np.inf
    k = int(np.argmax(value))
    return k, float(value[k])


class AdaptiveProposer:
    """The adaptive policy over the request's own stream and, given a ``ReferenceCorpus``, over the corpus
    too, and, given the tokens' texts (``text_classes``), over the stream with its whitespace ignored
    (``reflow``): each step weighs the longest match in each (its own acceptance cells,
    ``acceptance_model.CORPUS`` for the corpus, ``REFLOWED`` for the re-flowed match) and drafts from whichever is
    worth more tokens per unit of time; the request's own stream wins ties."""

    def __init__(self, config=None, cost=None, vocab_size=None, excluded=(), corpus=None, text_classes=None):
        self.config = AdaptiveConfig() if config is None else config
        if not isinstance(self.config, AdaptiveConfig):
            raise TypeError(f"config must be an AdaptiveConfig, got {type(self.config).__name__}")
        if isinstance(excluded, (str, bytes)) or not hasattr(excluded, "__iter__"):
            raise TypeError(f"excluded must be a collection of draft lengths, got {type(excluded).__name__}")
        excluded = tuple(excluded)
        if not all(isinstance(k, (int, np.integer)) and not isinstance(k, bool) and k >= 1 for k in excluded):
            raise ValueError(f"excluded must hold draft lengths >= 1 (0, a plain step, is always allowed), "
                             f"got {excluded!r}")
        self.excluded = tuple(sorted({int(k) for k in excluded}))
        curve = CPU_SMALL_MODEL if cost is None else cost
        if not isinstance(curve, OnlineCost):
            curve = cost_model(self.config, curve)
        self.cost = curve
        self.vocab_size = vocab_size
        if corpus is not None and not isinstance(corpus, ReferenceCorpus):
            raise TypeError(f"corpus must be a ReferenceCorpus or None, got {type(corpus).__name__}")
        self.corpus = corpus
        self.chosen = []  # (stream length, k) per step: the policy's trace
        # the rows of the output layer the loop computes first for the latest draft, the rest only where the
        # draft held through them (``OnlineCost.staged``); None: all at once
        self.first_rows = None
        self.reflow = None
        self.use_text_classes(text_classes)

    def use_text_classes(self, text_classes):
        """Draft re-flowed copies too (``reflow``), from the next request on: ``text_classes`` maps each token id
        to its text class (``reflow.check_text_classes``); None: never. Checked, then unused, when the config's
        ``reflow`` is off."""
        self.reflow = None
        if text_classes is not None and self.config.reflow:
            self.reflow = ReflowIndex(text_classes, lead=self.config.reflow_lead)  # checks them
        elif text_classes is not None:
            check_text_classes(text_classes)
        self.reset(EMPTY)

    def reset(self, tokens):
        self.index = SuffixIndex(tokens, vocab_size=self.vocab_size)
        self.prompt_len = len(self.index)
        c = self.config
        self.acceptance = AcceptanceModel(c.prior, c.prior_strength, c.forgetting, c.corpus_prior)
        self.regime = CopyRegime(c.copy_length, c.copy_share, c.copy_memory)
        self.occurrences = OccurrenceChooser(c.occurrence_memory, c.occurrence_margin, c.periodic)
        self._pending = None
        self._ends = None
        self.chosen = []
        self.view = None  # the request's match against the corpus
        if self.reflow is not None:
            self.reflow.reset(self.index.tokens)
        if self.corpus is not None:
            self.view = self.corpus.view()
            self.view.feed(self.index.tokens)

    def propose(self, max_tokens):
        self._pending = self._ends = None
        self.first_rows = None
        match = self.index.longest_match()
        k_cap = min(draft_budget(max_tokens), self.config.max_draft)
        copying = self.regime.copying
        options = []  # (value, k, matched length, origin, end) per source, the request's own stream first
        if match.length >= self.config.min_match and k_cap > 0:
            end = self.source_end(match)
            available = len(self.index) - 1 - end  # >= 1: the match's own end is the stream's, never drafted from
            horizon = k_cap if self.config.periodic else min(k_cap, available)
            options.append(self._option(match.length, PROMPT if end < self.prompt_len else GENERATED, end,
                                        horizon, copying))
        if self.view is not None and self.view.length >= self.config.min_match and k_cap > 0:
            end = self.view.source_end()
            options.append(self._option(self.view.length, CORPUS, end, min(k_cap, self.view.available(end)),
                                        copying))
        reflowed = self.reflow.source(match.length) if self.reflow is not None and k_cap > 0 else None
        if reflowed is not None:
            length, end = reflowed
            options.append(self._option(length, REFLOWED, end, min(k_cap, len(self.index) - 1 - end), copying))
        if not options:
            self.chosen.append((len(self.index), 0))
            return EMPTY
        _, k, length, origin, end, first_rows = max(options, key=lambda option: option[0])  # the first of equals
        self.chosen.append((len(self.index), k))
        if k == 0:
            return EMPTY
        self.first_rows = first_rows if first_rows < k + 1 else None
        if origin == CORPUS:
            draft = self.view.continuation(k, end)
        elif origin == REFLOWED:  # the copy with the whitespace the model has been writing instead
            self._reflow_source = self.index.continuation(end, k)
            draft = self.reflow.substituted(self._reflow_source)
        else:
            draft = periodic_continuation(self.index, end, k, self.config.periodic)
        self._pending = (length, origin, copying, draft)
        return draft

    def _option(self, length, origin, end, horizon, copying):
        expected = self.acceptance.expected(length, origin, horizon, copying)
        cost, first_rows = self.cost.staged(expected)
        k, value = best_draft(expected, cost.__getitem__, self.excluded)
        return value, k, length, origin, end, int(first_rows[k])

    def source_end(self, match):
        """The end of the earlier occurrence of ``match`` (the index's longest match, at least ``min_match``
        long) whose continuation is drafted, by the configured ``occurrence`` rule; "learned" also keeps both
        rules' ends, for ``update`` to score them against the target's tokens. The "frequent" rule's end, in
        either, moves to the match's earliest occurrence by ``earliest_in_prompt``."""
        occurrence = self.config.occurrence
        if occurrence == "learned":
            frequent, first_short = rule_ends(self.index, match)
            self._ends = (self._copied_passage(match, frequent), first_short)
            return self._ends[self.occurrences.choice]
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

    def update(self, tokens):
        tokens = as_token_array(tokens, self.index.vocab_size).astype(np.int64)  # checked before any state moves
        if self._pending is not None:
            length, origin, copying, draft = self._pending
            accepted = agreement(draft, tokens[:-1])  # the last token is the target's own
            self.acceptance.observe(length, origin, accepted, draft.size, copying)
            if origin == REFLOWED:
                self.reflow.learn(self._reflow_source, tokens, accepted)
            self._pending = None
        if self._ends is not None and tokens.size:
            self.occurrences.observe(self.index, self._ends, tokens)
            self._ends = None
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
    def stages_output_layer(self):
        """Whether this proposer may ask for a staged output layer (``first_rows``): its cost model stages
        (``AdaptiveConfig.staged_head`` and a curve with the output layer's times). The loop hooks the output
        layer only then."""
        return self.cost.staged_head

    def record_pass(self, k, seconds, head_rows=None):
        """A pass over ``1 + k`` tokens took ``seconds``, its output layer computed in products over ``head_rows``
        rows (``cost_model.head_products``; by default one over all)."""
        self.cost.observe(k, seconds, head_rows)

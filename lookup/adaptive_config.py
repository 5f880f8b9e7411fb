"""``AdaptiveConfig``: the adaptive policy's knobs, each default with the replayed or measured figure that chose it."""

from dataclasses import dataclass

import numpy as np

from draftless.index.validation import check_positive_int

from .acceptance_model import CORPUS_PRIOR, DEFAULT_PRIOR, LENGTH_EDGES
from .config import check_max_draft

OCCURRENCES = ("frequent", "recent", "first", "learned")


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
    # also where the stream ends in the whitespace the model has been writing in place of the source's (a learned
    # substitute, ``reflow``) before the source's next word: drafted from that word on. Replayed over the 190
    # recorded runs (session 61, "Re-flowed copies after the new indentation" in ``benchmarks/recorded/README.md``):
    # code_edit +1.45 % (Gemma 3 270M, 70 columns) and +0.43 % (SmolLM2-135M, 61), every other suite unchanged,
    # the worst column -0.8 %. Offered after any whitespace: -0.6 % on average (Gemma's math -3.9 %); after any
    # whitespace where the source has a whitespace token before its next word: +0.2 %, Gemma's repetitive -0.5 %
    reflow_after_space: bool = True
    # given the digits' token ids, also draft the period before with its numbers stepped where the stream repeats
    # with its numbers moving on (``stepped_copy``: a log's next line, a table's next row); measured in
    # "Stepped copies" in ``benchmarks/recorded/README.md``
    stepped_copy: bool = True
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
    # knots above the longest one the loop timed start their learning from its multiplier where it is below 1
    # (``OnlineCost.follow_timed``). Measured side by side (session 55, Gemma's code_edit, ten prompts, the shape
    # kept by the runs before): 226.64 tok/s against 218.56 without it (1.037x; 0.73 of the oracle against 0.71,
    # the first drafts of clean edits 64 tokens rather than 48); qa, translation, math and summarization, four
    # prompts each, 1.000x pooled (0.99-1.02 by suite). Replays learn no shape from real pass times, so they cannot
    # price it; runs recorded before it replay with it off ("Knots above the longest timed one" in
    # ``benchmarks/recorded/README.md``)
    follow_timed: bool = True
    # where the calibration timed the output layer within each pass (``CostCurve.head``), a pass may compute it
    # in two stages, the rows after the first stage only where the draft held through it (``OnlineCost.staged``),
    # chosen per pass by the expected cost under the acceptance model. Off: on Gemma 3 270M's code_edit (the
    # output layer 42-70 % of a pass) measured 78.0 against 78.9 tok/s off and 67.2 against 68.8, modelled -0.9 %
    # and -3.5 %; replayed over 36 suite columns of 12 runs of both models -0.2 % on average, worst -4.5 %, best
    # +8.2 % (``benchmarks.knob_evidence --knob staged_head``; "The output layer in two stages" in
    # ``benchmarks/recorded/README.md``): the rows it saves follow drafts that fail early, which the acceptance
    # model cannot tell from drafts that hold
    staged_head: bool = False
    # a greedy pass (from ``screened_head.SCREEN_FROM_ROWS`` rows, 1) without logits processors, scores or
    # logits returned chooses each row's token through the output layer screened in bfloat16 (exact;
    # ``integration/screened_head.py``) where the loop serves it (a CPU with bfloat16 dot products, an output layer
    # of at least 64M weights). On: Gemma 3 270M's code_edit decoded 3-20 % faster in six runs side by side (each
    # prompt both ways), outputs identical
    # ("The output layer screened in bfloat16" in ``benchmarks/recorded/README.md``). A sampled pass whose processors
    # cut each row to its top k tokens (transformers' default, k = 50) is screened too: the tokens that can survive
    # the cut scored in fp32 (``integration/screened_sampling.py``; "Sampled runs through the screen")
    screened_head: bool = True
    # a request's first draft chosen under what earlier requests' first drafts showed (``request_start``; the
    # integration layer shares them per model and config in a process), each earlier outcome weighing this much
    # less per request after it; 0: every request's first draft under the prior alone. Carried to every later
    # request alike (``start_key`` 0; session 38) 0.8 gave +0.0 % on average over 371 suite columns of 104
    # recorded runs (Gemma's code_edit +3.3 %, but columns of other suites down 5-6 %); carried only between
    # requests that open alike (``start_key``), over 575 suite columns of 163 runs (``python -m
    # benchmarks.knob_evidence benchmarks/recorded/*.json --knob start_memory --values 0.0,0.5,0.8``): 0.5 +0.3 % on
    # average, worst -2.0 % (a Gemma code_edit run), Gemma's code_edit +2.3 % (up to +8.1 %), its multi_turn +0.6 %,
    # SmolLM2's code_edit -0.3 % (worst -1.7 %), no other suite below -1.4 %; 0.8 the same on average with SmolLM2's
    # code_edit -0.8 % (worst -2.7 %). Measured side by side on code_edit (session 55) against 0: Gemma 0.985x (the
    # same drafts but for one request: the curve's kept shape held every first draft at 48 tokens), SmolLM2 1.008x
    # ("How requests start, keyed by their opening" in ``benchmarks/recorded/README.md``)
    start_memory: float = 0.5
    # the tokens that key a request's opening: a request carries its first draft's outcome to later requests whose
    # first match ends in the same ``start_key`` tokens (fewer where it is shorter; ``RequestStarts``); 0: to every
    # later request. 2 against 0 at ``start_memory`` 0.5 (``--knob start_key --values 0,1,2,3``): +0.3 % on average,
    # every suite of both models gaining on average but Gemma's code_edit (-0.6 %: carried alike, every code edit's
    # copying opening teaches every other), worst -5.8 %; 1 and 3 within 0.05 % of 2
    start_key: int = 2
    # where the matched suffix pays no draft, for this many generated tokens after a copy from the request's own
    # text broke, draft the copy resumed after the token the target replaced (``resumed_copy``); 0: never. 16 by
    # replay over 493 suite columns of 139 recorded runs (``benchmarks.knob_evidence --knob resume_horizon --values
    # 0,4,16,64``): +1.5 % on average against 0, worst -2.5 % (the H200's translation), best +25.2 % (Gemma's
    # repetitive); on the CPU every suite of both models gains on average (Gemma's math +5.0 %, repetitive +3.7 %,
    # code_edit +0.7 %; SmolLM2's multi_turn +3.5 %, translation +2.9 %, code_edit +0.6 %), no column below -1.6 %;
    # 4 and 64 within 0.1 % of 16 ("The resumed copy" in ``benchmarks/recorded/README.md``)
    resume_horizon: int = 16

    def __post_init__(self):
        check_max_draft(self.max_draft)
        for name in ("min_match", "copy_length"):
            check_positive_int(getattr(self, name), name)
        check_positive_int(self.earliest_in_prompt, "earliest_in_prompt", minimum=0)
        check_positive_int(self.reflow_lead, "reflow_lead", minimum=0)
        check_positive_int(self.resume_horizon, "resume_horizon", minimum=0)
        object.__setattr__(self, "start_key", check_positive_int(self.start_key, "start_key", minimum=0))
        for name in ("prior_strength", "forgetting", "copy_share", "copy_memory", "occurrence_memory",
                     "occurrence_margin", "shape_rate", "start_memory"):
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
        if not 0 <= self.start_memory <= 1:
            raise ValueError(f"start_memory must be in [0, 1], got {self.start_memory}")
        if not 0 <= self.shape_rate < 1:
            raise ValueError(f"shape_rate must be in [0, 1), got {self.shape_rate}")
        if not self.occurrence_margin >= 0:
            raise ValueError(f"occurrence_margin must be >= 0, got {self.occurrence_margin}")
        for name in ("periodic", "reflow", "reflow_after_space", "stepped_copy", "first_level", "shape_at_knots",
                     "follow_timed", "staged_head", "screened_head"):
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

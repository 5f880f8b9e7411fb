"""``AdaptiveConfig``: the adaptive drafting policy's knobs, checked on construction."""

from dataclasses import dataclass

import numpy as np

from draftless.index.validation import check_positive_int

from .acceptance_model import CORPUS_PRIOR, DEFAULT_PRIOR, LENGTH_EDGES
from .config import check_max_draft

OCCURRENCES = ("frequent", "recent", "first")


@dataclass(frozen=True, slots=True)
class AdaptiveConfig:
    """Knobs of the adaptive drafting policy. Each default was chosen by replaying recorded outputs through the
    policy under their runs' cost curves, one knob at a time, and checked end to end where it mattered;
    docs/policy.md gives each knob's evidence in a sentence."""

    max_draft: int = 64  # the longest draft ever proposed (at most 1024)
    min_match: int = 1  # shorter matches are never drafted from
    # which earlier occurrence supplies the continuation: "frequent" (the latest occurrence of the token that most
    # often followed the match), "recent" (the latest occurrence) or "first" (the earliest)
    occurrence: str = "frequent"
    prior_strength: float = 2.0  # pseudo-observations behind the prior acceptance rates
    prior: tuple = DEFAULT_PRIOR  # acceptance rate per matched-length bucket before any evidence
    corpus_prior: tuple = CORPUS_PRIOR  # the same for a match in a ReferenceCorpus (see ``acceptance_model``)
    copy_share: float = 0.4  # the output is copying while at least this share of recent tokens is copied
    # while copying, a match of at least this many tokens whose occurrence lies in the prompt is continued from its
    # earliest occurrence, the passage being copied rather than a later quote of it (0: never)
    earliest_in_prompt: int = 2
    # given the tokens' texts, also draft from the longest match with whitespace ignored (``reflow``: a copy the
    # model re-wraps or re-indents) where it spans at least ``reflow_lead`` more words than the exact match
    reflow: bool = True
    reflow_lead: int = 2
    # given the digits' token ids, also draft the period before with its numbers stepped where the stream repeats
    # with its numbers moving on (``stepped_copy``: a log's next line, a table's next row)
    stepped_copy: bool = True
    # the cost curve's shape learned from the run's own passes at this rate a pass (``cost_model.OnlineCost``;
    # 0: the calibrated shape as it is, only its scale followed)
    shape_rate: float = 0.1
    first_level: bool = True  # the cost model's scale set by its first pass, not averaged up from 1
    shape_at_knots: bool = False  # the shape learned from passes drafted at a knot's length only
    # knots above the longest length the loop timed start their learning from its multiplier where it is below 1
    follow_timed: bool = True
    # a request's first drafts chosen under what earlier requests' first drafts showed (``request_start``), each
    # earlier outcome weighing this much less per request after it; 0: under the prior alone
    start_memory: float = 0.5

    def __post_init__(self):
        check_max_draft(self.max_draft)
        check_positive_int(self.min_match, "min_match")
        check_positive_int(self.earliest_in_prompt, "earliest_in_prompt", minimum=0)
        check_positive_int(self.reflow_lead, "reflow_lead", minimum=0)
        for name in ("prior_strength", "copy_share", "shape_rate", "start_memory"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise TypeError(f"{name} must be a number, got {type(value).__name__}")
        if self.occurrence not in OCCURRENCES:
            raise ValueError(f"occurrence must be one of {OCCURRENCES}, got {self.occurrence!r}")
        if not 0 < self.prior_strength < np.inf:  # infinite: every rate inf / inf, NaN
            raise ValueError(f"prior_strength must be positive and finite, got {self.prior_strength}")
        if not 0 <= self.start_memory <= 1:
            raise ValueError(f"start_memory must be in [0, 1], got {self.start_memory}")
        if not 0 <= self.shape_rate < 1:
            raise ValueError(f"shape_rate must be in [0, 1), got {self.shape_rate}")
        for name in ("reflow", "stepped_copy", "first_level", "shape_at_knots", "follow_timed"):
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

"""Configuration of the drafting policy."""

from dataclasses import dataclass

from draftless.index.validation import check_positive_int

OCCURRENCES = ("recent", "first", "frequent")
# the largest max_draft a config takes: the policy sizes arrays by it, and off the CPU every pass length up to
# it is checked for exactness once; a pass over a thousand drafted tokens is past any measured payoff
MAX_DRAFT_LIMIT = 1024


def check_max_draft(value):
    """``value`` as a ``max_draft``: a positive int no larger than ``MAX_DRAFT_LIMIT``."""
    check_positive_int(value, "max_draft")
    if value > MAX_DRAFT_LIMIT:
        raise ValueError(f"max_draft must be at most {MAX_DRAFT_LIMIT}, got {value}")


@dataclass(frozen=True, slots=True)
class DraftConfig:
    """How the suffix proposer drafts.

    ``min_match``: the shortest matched suffix (tokens) worth drafting from; below it the step is a plain
    decode step. ``max_draft``: the most tokens one draft may hold (at most 1024). ``occurrence``: which earlier
    occurrence of the matched suffix supplies the continuation: ``"recent"`` (the latest), ``"first"``
    (the earliest, as transformers and vLLM do) or ``"frequent"`` (the next token that most often followed,
    then the continuation of its latest occurrence).
    """

    min_match: int = 2
    max_draft: int = 16
    occurrence: str = "recent"

    def __post_init__(self):
        check_positive_int(self.min_match, "min_match")
        check_max_draft(self.max_draft)
        if self.occurrence not in OCCURRENCES:
            raise ValueError(f"occurrence must be one of {OCCURRENCES}, got {self.occurrence!r}")

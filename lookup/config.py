"""Configuration of the drafting policy."""

from dataclasses import dataclass

from draftless.index.validation import check_positive_int

OCCURRENCES = ("recent", "first", "frequent")


@dataclass(frozen=True, slots=True)
class DraftConfig:
    """How the suffix proposer drafts.

    ``min_match``: the shortest matched suffix (tokens) worth drafting from; below it the step is a plain
    decode step. ``max_draft``: the most tokens one draft may hold. ``occurrence``: which earlier
    occurrence of the matched suffix supplies the continuation: ``"recent"`` (the latest), ``"first"``
    (the earliest, as transformers and vLLM do) or ``"frequent"`` (the next token that most often followed,
    then the continuation of its latest occurrence).
    """

    min_match: int = 2
    max_draft: int = 16
    occurrence: str = "recent"

    def __post_init__(self):
        for name in ("min_match", "max_draft"):
            check_positive_int(getattr(self, name), name)
        if self.occurrence not in OCCURRENCES:
            raise ValueError(f"occurrence must be one of {OCCURRENCES}, got {self.occurrence!r}")

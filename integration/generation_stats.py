"""Statistics of one speculative generation run, returned to the caller (the library never prints)."""

from dataclasses import dataclass, field

from draftless.lookup import RequestStart


@dataclass(frozen=True, slots=True)
class GenerationStats:
    """What one ``generate`` call did.

    ``passes`` counts verification forward passes after the prefill; each yields the accepted draft tokens
    plus one token of the target's own (the bonus). ``accepted_per_position[i]`` is how many passes
    accepted draft position ``i`` (so position 0 is accepted at most ``passes`` times).
    ``mean_accepted_length`` counts the bonus token: tokens produced per verification pass.
    ``draft_trace`` holds ``(drafted, accepted)`` per pass, in order: what the drafting policy chose.
    ``pass_seconds`` holds each pass's seconds as the loop told the proposer (``record_pass``): with the
    outputs, what a replay needs to follow a policy that learns its cost curve's shape from them;
    ``start_shape`` the shape it started from (``OnlineCost.learned_shape``, kept from earlier runs; empty for
    a proposer without one) and ``start_evidence`` the passes behind each knot (``learned_evidence``),
    ``start_acceptance`` what earlier requests' first drafts had shown its first draft
    (``RequestStart.state``: hits and trials; empty where nothing had, or for a proposer without one).
    """

    new_tokens: int = 0
    passes: int = 0
    drafted: int = 0
    accepted: int = 0
    accepted_per_position: tuple = ()
    prefill_s: float = 0.0
    propose_s: float = 0.0
    verify_s: float = 0.0
    total_s: float = 0.0
    draft_trace: tuple = ()
    pass_seconds: tuple = ()
    start_shape: tuple = ()
    start_evidence: tuple = ()
    start_acceptance: tuple = ()
    # passes whose output layer was computed in two stages (``staged_head``), and the rows of it not computed
    # because their draft failed in the first stage
    staged_passes: int = 0
    head_rows_skipped: int = 0
    # a batch's: each row's own statistics, and the passes the batch made (``passes`` then counts a pass once per
    # row it carried, so that the per-row figures above add up)
    rows: tuple = ()
    batch_passes: int = 0

    @classmethod
    def of_batch(cls, rows, batch_passes, prefill_s, propose_s, verify_s, total_s):
        """A batch's statistics: the rows' counts added up, the batch's own times, and ``rows``."""
        positions = max((len(r.accepted_per_position) for r in rows), default=0)
        per_position = [
            sum(r.accepted_per_position[i] for r in rows if i < len(r.accepted_per_position)) for i in range(positions)
        ]
        return cls(
            new_tokens=sum(r.new_tokens for r in rows),
            passes=sum(r.passes for r in rows),
            drafted=sum(r.drafted for r in rows),
            accepted=sum(r.accepted for r in rows),
            accepted_per_position=tuple(per_position),
            prefill_s=prefill_s,
            propose_s=propose_s,
            verify_s=verify_s,
            total_s=total_s,
            rows=tuple(rows),
            batch_passes=batch_passes,
        )

    @property
    def tokens_per_pass(self):
        """New tokens per verification pass, all rows together (a single request: ``mean_accepted_length``)."""
        passes = self.batch_passes or self.passes
        return (self.accepted + self.passes) / passes if passes else 0.0

    def __post_init__(self):
        for name in ("new_tokens", "passes", "drafted", "accepted", "staged_passes", "head_rows_skipped"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.accepted > self.drafted:
            raise ValueError(f"accepted ({self.accepted}) cannot exceed drafted ({self.drafted})")
        if sum(self.accepted_per_position) != self.accepted:
            raise ValueError("accepted_per_position must sum to accepted")
        if any(a > self.passes for a in self.accepted_per_position):
            raise ValueError("a draft position cannot be accepted in more passes than there were")
        for name in ("prefill_s", "propose_s", "verify_s", "total_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.draft_trace and (
            len(self.draft_trace) != self.passes
            or sum(d for d, _ in self.draft_trace) != self.drafted
            or sum(a for _, a in self.draft_trace) != self.accepted
        ):
            raise ValueError("draft_trace must hold one (drafted, accepted) pair per pass, summing to the totals")
        if self.pass_seconds and (len(self.pass_seconds) != self.passes or min(self.pass_seconds) < 0):
            raise ValueError("pass_seconds must hold one duration >= 0 per pass")
        if self.start_acceptance and (
            len(self.start_acceptance) != 2 or len(self.start_acceptance[0]) != len(self.start_acceptance[1])
        ):
            raise ValueError("start_acceptance must be empty or (hits, trials) of equal lengths")

    @property
    def mean_accepted_length(self):
        """Tokens per verification pass, the bonus token included (1.0 means no draft ever helped)."""
        return (self.accepted + self.passes) / self.passes if self.passes else 0.0

    @property
    def acceptance_rate(self):
        return self.accepted / self.drafted if self.drafted else 0.0


@dataclass(slots=True)
class StatsRecorder:
    """Mutable tally that the loop fills in, frozen into ``GenerationStats`` at the end."""

    passes: int = 0
    drafted: int = 0
    accepted: int = 0
    per_position: list = field(default_factory=list)
    prefill_s: float = 0.0
    propose_s: float = 0.0
    verify_s: float = 0.0
    trace: list = field(default_factory=list)
    seconds: list = field(default_factory=list)
    start_shape: tuple = ()
    start_evidence: tuple = ()
    start_acceptance: tuple = ()
    staged_passes: int = 0
    head_rows_skipped: int = 0

    def note_start(self, proposer):
        """What ``proposer`` starts the request from: its cost model's learned shape, and what its
        ``RequestStart`` has learned (``GenerationStats.start_shape``, ``start_acceptance``)."""
        learned = getattr(getattr(proposer, "cost", None), "learned_shape", None)
        if callable(learned):
            self.start_shape = tuple(float(x) for x in learned())
            evidence = getattr(proposer.cost, "learned_evidence", None)
            self.start_evidence = tuple(float(x) for x in evidence()) if callable(evidence) else ()
        start = getattr(proposer, "request_start", getattr(proposer, "start", None))  # this request's (``reset``)
        if isinstance(start, RequestStart) and start.learned:
            self.start_acceptance = start.state()

    def record_pass(self, drafted, accepted, seconds=0.0, head_rows=None):
        """One pass; ``head_rows``: the row counts of its output layer's products where it was staged."""
        if head_rows is not None:
            self.staged_passes += 1
            self.head_rows_skipped += drafted + 1 - sum(head_rows)
        self.trace.append((drafted, accepted))
        self.seconds.append(seconds)
        self.passes += 1
        self.drafted += drafted
        self.accepted += accepted
        if accepted > len(self.per_position):
            self.per_position.extend([0] * (accepted - len(self.per_position)))
        for i in range(accepted):
            self.per_position[i] += 1

    def freeze(self, new_tokens, total_s):
        return GenerationStats(
            new_tokens=new_tokens,
            passes=self.passes,
            drafted=self.drafted,
            accepted=self.accepted,
            accepted_per_position=tuple(self.per_position),
            prefill_s=self.prefill_s,
            propose_s=self.propose_s,
            verify_s=self.verify_s,
            total_s=total_s,
            draft_trace=tuple(self.trace),
            pass_seconds=tuple(self.seconds),
            start_shape=self.start_shape,
            start_evidence=self.start_evidence,
            start_acceptance=self.start_acceptance,
            staged_passes=self.staged_passes,
            head_rows_skipped=self.head_rows_skipped,
        )

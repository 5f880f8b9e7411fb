"""Drafts for a serving engine's batch: one adaptive proposer a request, kept by request id across steps.

An engine such as vLLM runs many requests at once, moves them between rows of its batch as others join and
finish, preempts some and resumes them later, and after each step asks for every running row's next draft. This
is the engine-independent part of draftless's proposer for it: ``RequestDrafts.step`` takes one step's rows (each
request's id, the tokens it gained in the step, its whole token stream so far) and returns each row's draft.

Per request, an ``AdaptiveProposer`` holds the incremental index over its prompt and output (the step's new tokens
are appended: no rescan), and learns from its own verified drafts. The rows' draft lengths are chosen together
(``batch_policy.ragged_lengths``) under a cost model of the engine's step (``step_cost.StepCost``), learned from
the time between one call and the next: the step that verified the drafts the previous call returned. A request
that is no longer among the engine's live ones (finished or aborted) is dropped at the next step; one preempted
and resumed keeps its state. Whenever the tokens a row holds are not the proposer's stream plus the step's new
tokens (a request whose state was dropped, or whose stream the engine rewrote), the proposer is built again over
the row's tokens, drafting as a fresh index over them would.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import numpy as np

from draftless.lookup.adaptive import AdaptiveConfig, AdaptiveProposer
from draftless.lookup.batch_policy import ragged_lengths
from draftless.lookup.step_cost import StepCost

logger = logging.getLogger(__name__)


@dataclass
class StepStats:
    """Counts since the drafts were created: steps, rows drafted for, draft tokens proposed, proposers built
    (``built``; again after a mismatch: ``rebuilt``), requests dropped, steps timed into the cost model."""

    steps: int = 0
    rows: int = 0
    draft_tokens: int = 0
    built: int = 0
    rebuilt: int = 0
    dropped: int = 0
    timed_steps: int = 0


class RequestDrafts:
    """Per-request adaptive drafting for an engine's batch.

    ``max_draft`` caps every draft (the engine's number of speculative tokens); ``max_model_len`` keeps a draft
    within the model's context; ``vocab_size`` checks the tokens. ``config`` is the adaptive policy's (its own
    ``max_draft`` is lowered to the cap). ``clock`` is for tests.
    """

    def __init__(
        self,
        max_draft: int,
        max_model_len: int,
        vocab_size: int | None = None,
        config: AdaptiveConfig | None = None,
        step_cost: StepCost | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        for name, value in (("max_draft", max_draft), ("max_model_len", max_model_len)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        config = AdaptiveConfig() if config is None else config
        if not isinstance(config, AdaptiveConfig):
            raise TypeError(f"config must be an AdaptiveConfig, got {type(config).__name__}")
        if step_cost is not None and not isinstance(step_cost, StepCost):
            raise TypeError(f"step_cost must be a StepCost, got {type(step_cost).__name__}")
        self.max_draft = int(max_draft)
        self.max_model_len = int(max_model_len)
        self.config = dataclasses.replace(config, max_draft=min(config.max_draft, self.max_draft))
        self.vocab_size = vocab_size
        self.cost = StepCost() if step_cost is None else step_cost
        self.clock = clock
        self.proposers: dict[str, AdaptiveProposer] = {}
        self.stats = StepStats()
        # rows and draft tokens of the step the previous call's drafts went to; no rows: none
        self._last_rows = self._last_drafts = 0
        self._last_time = 0.0
        self._previous_rows: set[str] = set()

    def step(
        self,
        request_ids: Sequence[str],
        new_tokens: Sequence[Sequence[int]],
        num_tokens: Sequence[int],
        token_rows: np.ndarray,
        prompt_lengths: Sequence[int],
        live: Collection[str],
    ) -> list[list[int]]:
        """Row i's draft (a list of token ids, maybe empty) for request ``request_ids[i]``, which gained
        ``new_tokens[i]`` in the step just run (empty: a prompt still being read, no draft) and whose stream is
        ``token_rows[i, :num_tokens[i]]``, its first ``prompt_lengths[i]`` the prompt. ``live`` holds every request
        the engine still has, running or preempted: the others' proposers are dropped."""
        now = self.clock()
        rows = len(request_ids)
        if not len(new_tokens) == rows <= min(len(num_tokens), len(token_rows), len(prompt_lengths)):
            raise ValueError(
                f"one entry a row: request_ids has {rows}, new_tokens {len(new_tokens)}, num_tokens "
                f"{len(num_tokens)}, token_rows {len(token_rows)}, prompt_lengths {len(prompt_lengths)}"
            )
        # the step just run read a prompt where a row is still reading one or joined (or came back) in it: its
        # time is not a verification's
        read_prompt = any(not len(t) for t in new_tokens) or not self._previous_rows.issuperset(request_ids)
        if self._last_rows and not read_prompt:
            self.cost.observe(self._last_rows, self._last_drafts, now - self._last_time)
            self.stats.timed_steps += 1
        self._previous_rows = set(request_ids)
        offered, expected = [], []
        for i in range(rows):
            n = int(num_tokens[i])
            if not len(new_tokens[i]) or n >= self.max_model_len - 1:
                continue
            proposer = self._follow(request_ids[i], new_tokens[i], token_rows[i, :n], int(prompt_lengths[i]))
            _, gains = proposer.offer(min(self.max_draft, self.max_model_len - 1 - n))
            offered.append((i, proposer))
            expected.append(gains)
        for request_id in [r for r in self.proposers if r not in live]:
            del self.proposers[request_id]
            self.stats.dropped += 1
        drafts: list[list[int]] = [[] for _ in range(rows)]
        lengths = ragged_lengths(expected, self.cost) if expected else ()
        for (i, proposer), k in zip(offered, lengths):
            drafts[i] = proposer.take(int(k)).tolist()
        drafted = int(np.sum(lengths))
        self.stats.steps += 1
        self.stats.rows += len(offered)
        self.stats.draft_tokens += drafted
        self._last_rows, self._last_drafts = len(offered), drafted
        self._last_time = self.clock()
        return drafts

    def _follow(self, request_id, new_tokens, stream, prompt_length):
        """The request's proposer brought up to ``stream`` (its tokens so far)."""
        proposer = self.proposers.get(request_id)
        new = np.asarray(new_tokens, dtype=np.int64)
        known = len(stream) - new.size
        if proposer is not None and len(proposer.index) == known and np.array_equal(stream[known:], new):
            proposer.update(new)
            return proposer
        if proposer is not None:
            self.stats.rebuilt += 1
            logger.debug("request %s: stream not the proposer's plus the step's tokens; built again", request_id)
        proposer = AdaptiveProposer(self.config, vocab_size=self.vocab_size)
        prompt_length = min(max(prompt_length, 0), len(stream))
        proposer.reset(np.asarray(stream[:prompt_length], dtype=np.int64))
        if prompt_length < len(stream):
            proposer.update(np.asarray(stream[prompt_length:], dtype=np.int64))
        self.proposers[request_id] = proposer
        self.stats.built += 1
        return proposer

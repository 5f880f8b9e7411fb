"""The target model's side of a step: one forward pass over ``[last token] + draft``, and the cache rollback."""

from __future__ import annotations

import contextlib
from typing import NamedTuple

import torch

from . import kv_cache
from .acceptance import accept_choices
from .fastpass import FastPass
from .fastpass.staged_head import accept_in_stages


class Verdict(NamedTuple):
    """What one pass kept: ``accepted`` draft tokens, then the target's own; ``tokens`` (accepted + 1), the
    scores they were chosen by, the logits read (None for a screened pass) and, for a staged pass, the row counts
    of its output layer's products (else None)."""

    accepted: int
    tokens: torch.Tensor
    chosen: torch.Tensor | None
    logits: torch.Tensor | None
    head_rows: tuple[int, ...] | None


class Verifier:
    """Runs the target over a request's tokens, keeping its KV cache equal to the accepted prefix.

    ``length`` is the number of positions in the cache: at first those a caller's cache holds from an earlier
    turn (the prompt's first tokens), then the whole prompt, then each accepted token. The prompt's attention
    mask (left padding) is kept and extended with ones; positions follow it as ``generate`` computes them
    (cumulative sum of the mask).
    """

    def __init__(self, model, plan, max_positions: int, fast: FastPass, accept) -> None:
        self.model = model
        self.plan = plan
        self.accept = accept  # ``acceptance.greedy_accept`` or a seeded ``sample_accept``
        self.staging = fast.staging  # a ``StagedHead`` whose hooks are installed, or None: never staged
        self.screen = fast.screen  # a ``ScreenedHead`` for this run, or None: never screened
        self.top_k = fast.top_k  # a sampled run's top-k cut that the screen serves (``screened_sampling``)
        self.cache_arg = plan.cache_arg
        self.cache = plan.cache if plan.cache is not None else kv_cache.new_cache(model, max_positions)
        kv_cache.check_rollback(self.cache, max_positions)
        prompt_len = plan.input_ids.shape[1]
        self.length = kv_cache.cached_prefix(self.cache, prompt_len)  # a caller's cache may hold a first part
        kv_cache.reserve_room(self.cache, max_positions)  # only once the call is known to be served
        mask = plan.attention_mask
        if mask is None:
            self.positions = torch.arange(prompt_len, device=model.device)[None]
        else:
            self.positions = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)
        self.mask = mask

    def _run(self, ids, logits_to_keep, raw=False):
        q = ids.shape[1]
        start = self.length
        have = self.positions.shape[1]
        if start + q > have:  # new tokens: one position further each
            extra = self.positions[:, -1:] + torch.arange(1, start + q - have + 1, device=ids.device)[None]
            self.positions = torch.cat([self.positions, extra], dim=1)
            if self.mask is not None:
                self.mask = torch.cat([self.mask, self.mask.new_ones((1, start + q - have))], dim=1)
        kwargs = {self.cache_arg: self.cache}
        out = self.model(
            input_ids=ids,
            position_ids=self.positions[:, start : start + q],
            attention_mask=None if self.mask is None else self.mask[:, : start + q],
            use_cache=True,
            logits_to_keep=logits_to_keep,
            **kwargs,
        )
        self.length = start + q
        logits = out.logits[0].to(dtype=torch.float32)
        return (logits, out.logits) if raw else logits

    def prefill(self, prompt_ids):
        """Logits (1, vocab) after the prompt, computed as ``generate`` does (last position only, over the
        prompt tokens the cache does not hold yet)."""
        with self.screen.checking_prefill() if self.screen is not None else contextlib.nullcontext():
            logits, raw = self._run(prompt_ids[:, self.length :], 1, raw=True)
        if self.staging is not None:
            self.staging.check_prefill(raw)
        if self.screen is not None:
            self.screen.check_prefill(raw)
        kv_cache.start_recording(self.cache)
        return logits

    @property
    def stages(self):
        """Whether ``forward`` can compute the output layer in two stages on this model."""
        return self.staging is not None and self.staging.supported

    def screens(self, rows):
        """Whether a pass over ``rows`` rows is screened (``ScreenedHead``): ``forward`` then returns the target's
        token per row, not logits."""
        return self.screen is not None and self.screen.screens(rows)

    def forward(self, last_token, draft, first_rows=None):
        """Logits (1 + len(draft), vocab): row i scores the token after ``[last_token] + draft[:i]``; with
        ``first_rows`` (where ``stages``), those rows only, the others then from ``rest``; where ``screens``,
        the target's token per row instead (1-D long; after the first row where the draft certainly fails, not
        the target's: ``ScreenedHead.argmax``), or in a sampled run the rows over their candidates
        (``screened_sampling.ScreenedRows``)."""
        ids = torch.cat([last_token.view(1, 1), draft.view(1, -1)], dim=1)
        if self.screens(ids.shape[1]):
            with self.screen.choosing(draft=None if self.top_k else draft, top_k=self.top_k):
                self._run(ids, ids.shape[1])
            return self.screen.choices
        if first_rows is None:
            return self._run(ids, ids.shape[1])
        with self.staging.first_stage(first_rows):
            return self._run(ids, ids.shape[1])

    def rest(self):
        """The logits of the rows after the last ``forward``'s first stage."""
        return self.staging.rest().to(dtype=torch.float32)[0]

    def rollback(self, rejected):
        kv_cache.rollback(self.cache, rejected)
        self.length -= int(rejected)

    def verify(self, ids: torch.Tensor, draft: torch.Tensor, first_rows: int | None = None) -> Verdict:
        """One pass over ``[ids[-1]] + draft``, its tokens accepted, and the cache cut back to them. A screened
        greedy pass returns the target's token per row; a staged pass (``first_rows``) computes the rows after
        its first stage only where the draft held through it; any other pass accepts from logits."""
        screened = self.screens(draft.shape[0] + 1)
        out = self.forward(ids[0, -1], draft, first_rows)
        head_rows = None
        if screened and not self.plan.do_sample:
            n, tokens, chosen = accept_choices(out, draft)
            out = None
        elif first_rows is None:  # logits, or a sampled screened pass's rows (``screened_sampling``)
            n, tokens, chosen = self.accept(out, draft, ids, self.plan.processors)
        else:
            n, tokens, chosen, out, head_rows = accept_in_stages(
                self.accept, out, self.rest, draft, ids, self.plan.processors
            )
        self.rollback(draft.shape[0] - n)
        return Verdict(n, tokens, chosen, out, head_rows)

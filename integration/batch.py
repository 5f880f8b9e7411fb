"""A batch of requests decoded together: every row drafts from its own index, one pass verifies all the drafts
padded to a common width, and each row accepts its own prefix of its draft plus the target's token.

Each row's tokens equal those ``model.generate`` gives that row in the same batch (greedy, fp32): a row's inputs,
positions (the cumulative sum of its attention mask) and attention span are ``generate``'s, whatever the other
rows accepted (``batch_cache``). A finished row leaves the batch; ``generate``'s output pads it as ``generate``
does. The width is chosen for the batch (``draftless.lookup.batch_policy``): on a CPU, where a pass costs what its
positions do, the wider the batch the shorter the drafts, down to plain batched decoding.
"""

from __future__ import annotations

import contextlib
import time

import torch
from transformers.generation.utils import GenerateDecoderOnlyOutput

from draftless.lookup import AdaptiveProposer
from draftless.lookup.batch_policy import common_width

from . import batch_cache
from .acceptance import accept_choices, greedy_accept, sample_accept
from .batch_rows import Row, reference_corpora, row_draws, row_proposers
from .fastpass.lean_layers import lean_layers
from .fastpass.screened_head import screen_for_run
from .generation_plan import embedding_rows
from .generation_stats import GenerationStats
from .proposing import proposed_draft
from .stop_strings import first_stop


class BatchDecoder:
    """The batch loop: prefill -> (propose -> verify -> accept -> realign -> update) until every row ends."""

    def __init__(self, model, plan, proposers, cost, draws, rows_allowed, screen=None) -> None:
        self.model = model
        self.plan = plan
        self.screen = screen  # a greedy run's ``ScreenedHead`` (each row's token chosen through it), or None
        self.cost = cost  # ``step_cost.StepCost`` for adaptive proposers (``offer``/``take``), else None
        self.rows_allowed = rows_allowed  # the ids a draft may hold
        mask = plan.attention_mask if plan.attention_mask is not None else torch.ones_like(plan.input_ids)
        self.mask = mask
        self.rows = [
            Row(plan.input_ids[r : r + 1], int(mask[r].sum()), proposers[r], d, limit=plan.max_length)
            for r, d in enumerate(row_draws(draws, plan.input_ids.shape[0]))
        ]
        self.pads_finished = bool(plan.eos_token_ids)  # generate pads a finished row only where EOS is set
        self.cache = batch_cache.new_batch_cache()
        self.batch_passes = 0
        self.prefill_s = self.propose_s = self.verify_s = 0.0
        self.streamed = 0

    def _forward(self, ids, mask, positions, keep):
        """The model's logits over the last ``keep`` positions (its output layer's output, as the model returns it;
        within ``ScreenedHead.choosing``, the hidden rows)."""
        return self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            **{self.plan.cache_arg: self.cache},
            use_cache=True,
            logits_to_keep=keep,
        ).logits

    def run(self) -> None:
        plan, mask = self.plan, self.mask
        t0 = time.perf_counter()
        positions = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 1)
        with self.screen.checking_prefill() if self.screen is not None else contextlib.nullcontext():
            raw = self._forward(plan.input_ids, mask, positions, 1)
        if self.screen is not None and not self.screen.check_prefill(raw):
            self.screen = None  # the model changes its output layer's output: passes return logits
        logits = raw[:, -1].to(dtype=torch.float32)
        if plan.streamer is not None:
            plan.streamer.put(plan.input_ids.cpu())
        empty = plan.input_ids.new_empty(0)
        prompt = plan.input_ids.shape[1]
        for r, row in enumerate(self.rows):
            self._accept(row, empty, logits[r : r + 1])
            if not row.done:  # the proposer sees the row's tokens, not its padding
                tokens = torch.cat([plan.input_ids[r][mask[r] == 1], row.ids[0, prompt:]])
                row.proposer.reset(tokens.cpu().numpy())
        self._end_together()
        self._stream()
        self.prefill_s = time.perf_counter() - t0
        active = [r for r, row in enumerate(self.rows) if not row.done]
        cmask = batch_cache.keep_rows(self.cache, mask, active) if len(active) < len(self.rows) else mask
        while active:
            t0 = time.perf_counter()
            width = self._propose([self.rows[r] for r in active])
            t1 = time.perf_counter()
            ids, pass_mask, positions = self._pass_inputs(active, cmask, width)
            rows = self._verify(active, ids, pass_mask, positions, width)
            t2 = time.perf_counter()
            seconds = t2 - t1
            self.batch_passes += 1
            self.verify_s += seconds
            kept = []
            for i, r in enumerate(active):
                row = self.rows[r]
                before = row.ids.shape[1]
                n = self._accept(row, row.draft, *rows[i])
                kept.append(n + 1)
                accepted = min(n, row.ids.shape[1] - before - 1)  # a stop inside the draft drops what follows
                row.recorder.record_pass(int(row.draft.shape[0]), accepted, seconds)
                if not row.done:
                    row.proposer.update(row.ids[0, before:].cpu().numpy())
            if self.cost is not None:  # the rows' moves ride the next pass's append (``batch_cache``): no cost apart
                self.cost.observe(len(active), len(active) * (width - 1), seconds)
            cmask = batch_cache.realign(self.cache, cmask, width, kept)
            self._end_together()
            still = [i for i, r in enumerate(active) if not self.rows[r].done]
            if len(still) < len(active):
                cmask = batch_cache.keep_rows(self.cache, cmask, still)
                active = [active[i] for i in still]
            self._stream()
            self.propose_s += time.perf_counter() - t2 + t1 - t0
        self._stream(final=True)

    def _propose(self, rows) -> int:
        """Each row's draft (``row.draft``), padded to the width chosen for the batch; returns the width."""
        offers = []
        for row in rows:
            budget = row.limit - row.ids.shape[1]
            if self.plan.position_limit is not None:  # the pass feeds positions real - 1 .. real - 1 + draft
                budget = min(budget, self.plan.position_limit - row.real + 1)
                if budget < 1:
                    raise ValueError(
                        f"a row of {row.real} positions passes the model's {self.plan.position_limit} learned "
                        "positions before generation ended: lower max_new_tokens (or max_length)"
                    )
            if self.cost is None:  # a proposer of the caller's: its drafts as it proposes them
                offers.append((proposed_draft(row.proposer.propose(budget - 1), budget - 1, self.rows_allowed), None))
            else:
                draft, expected = row.proposer.offer(budget - 1)
                offers.append((proposed_draft(draft, budget - 1, self.rows_allowed), expected))
        if self.cost is None:
            for row, (draft, _) in zip(rows, offers):
                row.draft = torch.as_tensor(draft, dtype=torch.long, device=row.ids.device)
        else:
            width = common_width([e for _, e in offers], self.cost)
            for row, (draft, _) in zip(rows, offers):
                k = min(width - 1, draft.size)
                row.draft = torch.as_tensor(row.proposer.take(k), dtype=torch.long, device=row.ids.device)
        return 1 + max(int(row.draft.shape[0]) for row in rows)

    def _pass_inputs(self, active, cmask, width):
        """``[last token] + draft`` per row, padded on the right to ``width`` (the padding is cut off after the
        pass), with the attention mask over cache and pass, and each row's positions."""
        ids = torch.empty((len(active), width), dtype=torch.long, device=cmask.device)
        positions = torch.empty_like(ids)
        for i, r in enumerate(active):
            row = self.rows[r]
            last = row.ids[0, -1:]
            ids[i] = torch.cat([last, row.draft, last.expand(width - 1 - row.draft.shape[0])])
            positions[i] = row.real - 1 + torch.arange(width, device=ids.device)
        pass_mask = torch.cat([cmask, cmask.new_ones((len(active), width))], dim=1)
        return ids, pass_mask, positions

    def _verify(self, active, ids, mask, positions, width) -> list:
        """One pass over the batch; per row, ``(logits, None)`` over its ``[last token] + draft`` or, screened,
        ``(None, choices)``: the target's token after each of them (``ScreenedHead``, the padding left out)."""
        if self.screen is None:
            logits = self._forward(ids, mask, positions, width).to(dtype=torch.float32)
            return [(logits[i], None) for i in range(len(active))]
        sizes = [int(self.rows[r].draft.shape[0]) + 1 for r in active]
        read = torch.cat([i * width + torch.arange(n) for i, n in enumerate(sizes)])  # each row's, flattened
        with self.screen.choosing(rows=read):
            self._forward(ids, mask, positions, width)
        return [(None, choices) for choices in self.screen.choices.split(sizes)]

    def _accept(self, row, draft, logits=None, choices=None) -> int:
        """Accept from ``logits`` (rows after ``[last token] + draft[:i]``) or the target's ``choices`` there,
        append to the row up to its first stop; returns the draft tokens accepted."""
        if choices is not None:
            n, tokens, chosen = accept_choices(choices, draft)
        else:
            logits = logits[: draft.shape[0] + 1]
            if row.draws is None:
                n, tokens, chosen = greedy_accept(logits, draft, row.ids, self.plan.processors)
            else:
                n, tokens, chosen = sample_accept(logits, draft, row.ids, self.plan.processors, row.draws)
        start = row.ids.shape[1]
        ids = torch.cat([row.ids, tokens.view(1, -1).to(row.ids.dtype)], dim=1)
        stop = first_stop(self.plan, ids, start) if row.stopped is None else None
        if stop is not None and not self.pads_finished and stop + 1 < self.plan.max_length:
            row.stopped, stop = stop + 1, None  # generate decodes it on until every row has stopped
        if ids.shape[1] >= row.limit:
            stop = row.limit - 1 if stop is None else min(stop, row.limit - 1)
        if stop is not None:
            ids = ids[:, : stop + 1]
            row.done = True
        added = ids.shape[1] - start
        row.ids = ids
        row.real += added
        if self.plan.output_scores:
            row.scores.extend(chosen[i] for i in range(added))
        if self.plan.output_logits:
            row.raw.extend(logits[i] for i in range(added))
        return n

    def _end_together(self):
        """Without EOS, ``generate`` stops at the step where the last row meets a stop, every row decoded to it:
        once every row has met one, each is decoded to that length (or cut back to it)."""
        if self.pads_finished or not all(row.done or row.stopped is not None for row in self.rows):
            return
        end = max(row.ids.shape[1] if row.stopped is None else row.stopped for row in self.rows)
        steps = end - self.plan.input_ids.shape[1]
        for row in self.rows:
            row.limit = min(row.limit, end)
            if row.ids.shape[1] >= end:
                row.ids = row.ids[:, :end]
                del row.scores[steps:], row.raw[steps:]
                row.done = True

    def _stream(self, final=False):
        """Put every step that all rows have reached to the streamer, one token per row as ``generate`` puts it
        (a finished row's padding included)."""
        if self.plan.streamer is None:
            return
        prompt = self.plan.input_ids.shape[1]
        lengths = [row.ids.shape[1] - prompt for row in self.rows]
        running = [n for n, row in zip(lengths, self.rows) if not row.done]
        ready = min(running) if running and not final else max(lengths)
        for step in range(self.streamed, ready):
            self.plan.streamer.put(self.sequences(step + 1)[:, prompt + step].cpu())
        self.streamed = max(self.streamed, ready)
        if final:
            self.plan.streamer.end()

    def sequences(self, steps: int | None = None) -> torch.Tensor:
        """The batch's sequences, each row padded after its end with the pad token, as ``generate`` returns them."""
        prompt = self.plan.input_ids.shape[1]
        length = prompt + (max(row.ids.shape[1] - prompt for row in self.rows) if steps is None else steps)
        out = self.plan.input_ids.new_full((len(self.rows), length), self.plan.pad_token_id)
        for r, row in enumerate(self.rows):
            n = min(length, row.ids.shape[1])
            out[r, :n] = row.ids[0, :n]
        return out

    def step_rows(self, values: str) -> tuple[torch.Tensor, ...]:
        """``scores`` or ``logits`` per step (rows x vocabulary): a row that has ended scores its pad token alone,
        the token its sequence holds there."""
        steps = max(len(getattr(row, values)) for row in self.rows)
        vocab = next(len(getattr(row, values)[0]) for row in self.rows if getattr(row, values))
        out = []
        for step in range(steps):
            rows = []
            for row in self.rows:
                got = getattr(row, values)
                if step < len(got):
                    rows.append(got[step])
                else:
                    ended = torch.full((vocab,), -float("inf"), device=self.mask.device)
                    ended[self.plan.pad_token_id] = 0.0
                    rows.append(ended)
            out.append(torch.stack(rows))
        return tuple(out)

    def stats(self, total_s: float) -> GenerationStats:
        """The batch's ``GenerationStats`` (passes counted per row; ``rows`` holds each row's own)."""
        prompt = self.plan.input_ids.shape[1]
        rows = tuple(row.recorder.freeze(row.ids.shape[1] - prompt, total_s) for row in self.rows)
        return GenerationStats.of_batch(rows, self.batch_passes, self.prefill_s, self.propose_s, self.verify_s, total_s)


def batch_screen(generator, plan):
    """The ``ScreenedHead`` a greedy batch chooses its tokens through (``screen_for_run``'s rules: no processors,
    scores or logits to return), or None."""
    options = generator.fast_pass
    if not options.enabled or plan.do_sample:
        return None
    return screen_for_run(generator.model, plan, None, options.screened_head)[0]


def generate_batch(generator, plan, draws, references):
    """``SpeculativeGenerator.generate`` for a batch (``plan`` with more than one row): the sequences, or
    ``generate``'s output object; ``generator.last_stats`` the batch's ``GenerationStats``."""
    t_start = time.perf_counter()
    rows = plan.input_ids.shape[0]
    template = generator.proposer
    pool = generator.row_pool
    if len(pool) < rows:
        pool.extend(row_proposers(template, rows - len(pool)))
    proposers = pool[:rows]
    corpora = reference_corpora(references, rows, generator.tokenizer, getattr(template, "vocab_size", None))
    adaptive = isinstance(template, AdaptiveProposer)
    if references is not None and not adaptive:
        raise ValueError("references are drafted from by the adaptive proposer only: pass no proposer")
    try:
        if adaptive:
            for proposer, corpus in zip(proposers, corpora):
                proposer.corpus = corpus if corpus is not None else template.corpus
        decoder = BatchDecoder(
            generator.model,
            plan,
            proposers,
            generator.batch_cost() if adaptive else None,
            draws,
            embedding_rows(generator.model),
            batch_screen(generator, plan),
        )
        # the fast pass's lean layers: a pass over drafts attends grouped key/value heads without copying the cache
        with lean_layers(generator.model) if generator.fast_pass.enabled else contextlib.nullcontext():
            decoder.run()
    finally:
        if adaptive:
            for proposer in proposers:
                proposer.corpus = template.corpus
    sequences = decoder.sequences()
    generator.last_stats = decoder.stats(time.perf_counter() - t_start)
    if generator.remember:
        for row in decoder.rows:
            generator.corpus.add(row.ids[0, plan.input_ids.shape[1] :].cpu().numpy())
    if not plan.return_dict:
        return sequences
    return GenerateDecoderOnlyOutput(
        sequences=sequences,
        scores=decoder.step_rows("scores") if plan.output_scores else None,
        logits=decoder.step_rows("raw") if plan.output_logits else None,
    )

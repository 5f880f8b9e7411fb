"""``SpeculativeGenerator``: generation that drafts from the suffix index and verifies a draft in one pass.

Greedy output equals ``model.generate(do_sample=False)`` token for token in fp32 (16-bit types: see
``pass_check.warn_coarse_rounding``); sampled output follows the same distribution as
``model.generate(do_sample=True)`` and, for one seed, the same text whatever was drafted (see
``acceptance.sample_accept``).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Any

import torch
from transformers.generation.utils import GenerateDecoderOnlyOutput

from draftless.lookup import AdaptiveConfig, AdaptiveProposer, DraftConfig, ReferenceCorpus
from draftless.lookup.step_cost import StepCost

from . import kv_cache
from .acceptance import TokenDraws, greedy_accept, sample_accept
from .batch import generate_batch
from .batch_rows import reference_corpora
from .calibration import cached_inexact_drafts, cached_linear_plans, checks_pass_lengths
from .fastpass import FastPass, FastPassOptions
from .generation_plan import UnsupportedGeneration, embedding_rows, plan_generation, positions_left
from .generation_stats import GenerationStats, StatsRecorder
from .kept_state import model_lock, save_learned_shape, stale_curve_scale
from .pass_check import MAX_DRAFT, exact_length, warn_coarse_rounding
from .pass_timing import seconds_to_learn_from
from .proposing import TokenizerTexts, build_proposer, check_generator_arguments, may_stage, proposed_draft, staged_rows
from .stop_strings import first_stop
from .verifier import Verifier

logger = logging.getLogger(__name__)


class SpeculativeGenerator:
    """Drop-in ``generate`` for one decoder-only model.

    ``config`` chooses the built-in proposer: an ``AdaptiveConfig`` (the default: per step, the draft length
    that maximises expected tokens per second under the model's calibrated cost curve) or a ``DraftConfig`` (a
    fixed-length suffix proposer). ``proposer`` replaces it with any object that has ``reset``/``propose``/
    ``update`` (see ``draftless.lookup.Proposer``). ``corpus``, a ``ReferenceCorpus`` (documents a RAG pipeline
    retrieves, earlier answers), is drafted from too where it matches better than the request itself; with
    ``remember``, every request's output joins it when the request ends. ``fast_pass`` (a bool or
    ``FastPassOptions``) chooses the CPU fast pass's parts; it never changes a token. ``last_stats`` holds the
    ``GenerationStats`` of the latest call.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        config: AdaptiveConfig | DraftConfig | None = None,
        proposer: Any = None,
        corpus: ReferenceCorpus | None = None,
        remember: bool = False,
        fast_pass: bool | FastPassOptions = True,
    ) -> None:
        check_generator_arguments(model, tokenizer, config, proposer, corpus, remember)
        self.fast_pass = FastPassOptions.of(fast_pass)
        kv_cache.check_model_cache(model)  # before any calibration runs the model
        self.model = model
        self.tokenizer = tokenizer
        self.config = config if config is not None else AdaptiveConfig()
        warn_coarse_rounding(model)
        with model_lock(model):  # the calibration runs the model with the fast pass installed
            # off the CPU, every draft length the config allows is checked, and those whose verification pass is
            # not exact there are never drafted (see ``pass_check``); None where nothing is checked (the CPU)
            self.checked_drafts = max(MAX_DRAFT, self.config.max_draft) if checks_pass_lengths(model) else None
            self.inexact_drafts = cached_inexact_drafts(model, self.checked_drafts or MAX_DRAFT)
            self.proposer = build_proposer(
                model, self.config, proposer, corpus, self.inexact_drafts, self.fast_pass.staged_head
            )
        # only the adaptive proposer built here keeps its learned shape on disk
        built = proposer is None and isinstance(self.proposer, AdaptiveProposer)
        self._keeps_shape = built and self.config.shape_rate > 0
        self._texts = TokenizerTexts(self.proposer)
        self._texts.use(tokenizer)
        self.corpus = corpus
        self.remember = remember
        self.last_stats: GenerationStats | None = None
        self.row_pool: list = []  # a batch's per-row proposers, kept for the next batch
        self._batch_cost: StepCost | None = None
        self._warned_stale = False
        self._lock = threading.Lock()

    def generate(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        generation_config: Any = None,
        logits_processor: Any = None,
        stopping_criteria: Any = None,
        streamer: Any = None,
        *,
        seed: int | None = None,
        generator: torch.Generator | None = None,
        **kwargs: Any,
    ) -> torch.Tensor | GenerateDecoderOnlyOutput:
        """``model.generate``'s arguments and return value. Sampling draws each position's token with a uniform
        fixed by ``seed`` and the position (``acceptance.TokenDraws``), or by a key taken from ``generator``, or
        with neither from torch's global RNG, so that ``torch.manual_seed`` makes runs repeatable as it does for
        transformers; the same seed gives the same text whatever was drafted. Calls from several threads run one
        at a time, and so do calls on one model from several generators or ``enable``: each returns what it would
        alone."""
        with self._lock, model_lock(self.model):
            return self._generate(
                input_ids,
                attention_mask,
                generation_config,
                logits_processor,
                stopping_criteria,
                streamer,
                seed=seed,
                generator=generator,
                **kwargs,
            )

    @torch.no_grad()
    def _generate(
        self,
        input_ids,
        attention_mask,
        generation_config,
        logits_processor,
        stopping_criteria,
        streamer,
        *,
        seed,
        generator,
        **kwargs,
    ):
        if input_ids is None:
            input_ids = kwargs.pop("inputs", None)
        if input_ids is None:  # generate starts from inputs_embeds or the BOS token; drafts need the token ids
            given = "inputs_embeds alone" if kwargs.get("inputs_embeds") is not None else "no prompt"
            raise UnsupportedGeneration(f"draftless needs input_ids (the prompt's token ids): {given} is not supported")
        references = kwargs.pop("references", None)
        if self.tokenizer is not None:
            kwargs.setdefault("tokenizer", self.tokenizer)
        self._texts.use(kwargs.get("tokenizer"))
        t_start = time.perf_counter()
        plan = plan_generation(
            self.model,
            input_ids,
            attention_mask,
            generation_config,
            logits_processor,
            stopping_criteria,
            streamer,
            kwargs,
        )
        draws = TokenDraws.from_seed(seed, generator) if plan.do_sample else None
        if plan.input_ids.shape[0] > 1:
            return generate_batch(self, plan, draws, references)
        if references is None:
            return self._generate_row(plan, draws, t_start)
        if not isinstance(self.proposer, AdaptiveProposer):
            raise ValueError("references are drafted from by the adaptive proposer only: pass no proposer")
        shared = self.proposer.corpus  # the row's documents are its corpus for this call only
        self.proposer.corpus = reference_corpora(references, 1, self.tokenizer, self.proposer.vocab_size)[0]
        try:
            return self._generate_row(plan, draws, t_start)
        finally:
            self.proposer.corpus = shared

    def _generate_row(self, plan, draws, t_start):
        positions_left(plan, plan.input_ids.shape[1])  # a prompt longer than the learned positions is refused
        accept = greedy_accept if draws is None else functools.partial(sample_accept, draws=draws)
        fast = FastPass.for_run(self.model, plan, may_stage(self.proposer), self.fast_pass)
        # a run whose passes the calibration does not time alike learns their costs for itself alone
        timed = fast.timed_like_calibration(plan)
        cost = getattr(self.proposer, "cost", None)
        saved = cost.snapshot() if not timed and hasattr(cost, "snapshot") else None
        try:
            with fast.output_layer_hooks():
                return self._run_loop(
                    plan, Verifier(self.model, plan, plan.max_length, fast, accept), fast, t_start, timed
                )
        finally:
            if saved is not None:
                cost.restore(saved)

    def _run_loop(self, plan, verifier, fast, t_start, keep_shape):
        """The prefill, then propose -> verify -> accept -> update until a stop; ``generate``'s return value."""
        ids = plan.input_ids
        prompt_len = ids.shape[1]
        rec, scores, raw = StatsRecorder(), [], []
        if plan.streamer is not None:
            plan.streamer.put(ids.cpu())
        t0 = time.perf_counter()
        logits = verifier.prefill(ids)
        _, tokens, chosen = verifier.accept(logits, ids.new_empty(0), ids, plan.processors)
        rec.prefill_s = time.perf_counter() - t0
        ids, done = self._append(plan, ids, tokens, chosen, logits, scores, raw)
        self.proposer.reset(ids[0].cpu().numpy())
        rec.note_start(self.proposer)  # what a replay starts from
        rows = embedding_rows(self.model)  # the ids a draft may hold
        record_cost = getattr(self.proposer, "record_pass", None)
        plans = cached_linear_plans(self.model, output_layer=not fast.screens(1)) if fast.options.enabled else None
        with fast.installed(plans):
            while not done:
                t0 = time.perf_counter()
                draft = self._propose(plan, ids, rows)  # lookup/: reads the index
                first_rows = staged_rows(self.proposer, draft.shape[0]) if fast.stages else None
                t1 = time.perf_counter()
                verdict = verifier.verify(ids, draft, first_rows)  # one target pass, its tokens accepted
                t2 = time.perf_counter()
                seconds = seconds_to_learn_from(t2 - t1, self.model)  # 0 for the model's first pass here
                if record_cost is not None:  # an adaptive proposer refines its cost model with real passes
                    extra = () if verdict.head_rows is None else (verdict.head_rows,)
                    record_cost(int(draft.shape[0]), seconds, *extra)
                before = ids.shape[1]
                kept = None if verdict.logits is None else verdict.logits[: verdict.accepted + 1]
                ids, done = self._append(plan, ids, verdict.tokens, verdict.chosen, kept, scores, raw)
                # a stop inside the accepted draft drops the tokens after it: the stats count what the pass kept
                accepted = min(verdict.accepted, ids.shape[1] - before - 1)
                rec.record_pass(int(draft.shape[0]), accepted, seconds, verdict.head_rows)
                self.proposer.update(ids[0, before:].cpu().numpy())  # lookup/ -> index/
                rec.propose_s += (t1 - t0) + (time.perf_counter() - t2)
                rec.verify_s += t2 - t1
        return self._finish(plan, ids, prompt_len, rec, t_start, keep_shape, verifier, scores, raw)

    def _propose(self, plan, ids, rows):
        """The proposer's draft, checked and cut to the budget (one token is always the bonus), to the learned
        positions, and off the CPU to the longest length checked exact."""
        budget = plan.max_length - ids.shape[1]
        room = positions_left(plan, ids.shape[1])  # the pass feeds the last token, then the draft
        if room is not None:
            budget = min(budget, room + 1)
        draft = proposed_draft(self.proposer.propose(budget - 1), budget - 1, rows)
        if self.checked_drafts is not None:
            draft = draft[: exact_length(draft.size, self.inexact_drafts, self.checked_drafts)]
        return torch.as_tensor(draft, device=ids.device)

    def _append(self, plan, ids, tokens, chosen, logits, scores, raw):
        """Append ``tokens`` up to the first that ends generation; returns ``(ids, done)``."""
        start = ids.shape[1]
        ids = torch.cat([ids, tokens.view(1, -1).to(ids.dtype)], dim=1)
        stop = first_stop(plan, ids, start)
        if stop is not None:
            ids = ids[:, : stop + 1]
        kept = ids.shape[1] - start
        if plan.output_scores:
            scores.extend(chosen[i : i + 1] for i in range(kept))
        if plan.output_logits:
            raw.extend(logits[i : i + 1] for i in range(kept))
        if plan.streamer is not None and kept:
            plan.streamer.put(ids[:, start:].cpu())
        return ids, stop is not None

    def _finish(self, plan, ids, prompt_len, rec, t_start, keep_shape, verifier, scores, raw):
        """The run's statistics, what it keeps (the output in a remembering corpus, the learned shape on disk),
        and ``generate``'s return value."""
        if plan.streamer is not None:
            plan.streamer.end()
        if self.remember:
            self.corpus.add(ids[0, prompt_len:].cpu().numpy())
        self.last_stats = rec.freeze(ids.shape[1] - prompt_len, time.perf_counter() - t_start)
        self._check_stale_curve()
        if keep_shape and self._keeps_shape:
            try:
                save_learned_shape(self.model, self.proposer.cost)
            except OSError as error:
                self._keeps_shape = False
                logger.warning(
                    "draftless: the learned cost-curve shape cannot be kept on disk (%s); each process "
                    "will learn it anew",
                    error,
                )
        if not plan.return_dict:
            return ids
        return GenerateDecoderOnlyOutput(
            sequences=ids,
            scores=tuple(scores) if plan.output_scores else None,
            logits=tuple(raw) if plan.output_logits else None,
            cache=verifier.cache,
        )

    def batch_cost(self) -> StepCost:
        """What a batch's pass costs on this machine (``step_cost.StepCost``, shaped like the calibrated curve),
        learned across this generator's batches."""
        if self._batch_cost is None:
            self._batch_cost = StepCost.shaped_like(self.proposer.cost.curve.at)
        return self._batch_cost

    def _check_stale_curve(self):
        """Warn once when passes run much faster than the cached curve says (``kept_state.stale_curve_scale``)."""
        scale = None if self._warned_stale else stale_curve_scale(self.proposer, self.last_stats.passes)
        if scale is None:
            return
        self._warned_stale = True
        logger.warning(
            "verification passes take %.2fx the times of the cached cost curve, which was measured while the "
            "machine was slower; `draftless calibrate` (draftless.integration.calibration.recalibrate) measures "
            "it again",
            scale,
        )


def generate(
    model: Any, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None, **generate_kwargs
) -> torch.Tensor | GenerateDecoderOnlyOutput:
    """``model.generate`` sped up by suffix drafting: same arguments, same return value; ``corpus``, a
    ``ReferenceCorpus``, is drafted from too and ``fast_pass`` chooses the fast pass (see
    ``SpeculativeGenerator``)."""
    generator = SpeculativeGenerator(
        model,
        generate_kwargs.pop("tokenizer", None),
        corpus=generate_kwargs.pop("corpus", None),
        fast_pass=generate_kwargs.pop("fast_pass", True),
    )
    return generator.generate(input_ids, attention_mask=attention_mask, **generate_kwargs)

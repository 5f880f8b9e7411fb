"""``SpeculativeGenerator``: generation that drafts from the suffix index and verifies a draft in one pass.

One step reads as propose -> verify -> accept -> update:

    draft = proposer.propose(budget)                     # lookup/, reads index/
    logits = verifier.forward(last, draft)               # one target pass over [last] + draft
    n, tokens, _ = accept(logits, draft, ...)            # accepted prefix + the target's own next token
    verifier.rollback(len(draft) - n); proposer.update(tokens)

Greedy output equals ``model.generate(do_sample=False)`` token for token in fp32 (16-bit types: see
``pass_check.warn_coarse_rounding``); sampled output follows the same
distribution as ``model.generate(do_sample=True)`` and, for one seed, the same text whatever was drafted (see
``acceptance.sample_accept``).
"""

import contextlib
import functools
import logging
import threading
import time

import torch
from transformers.generation.utils import GenerateDecoderOnlyOutput

from draftless.lookup import AdaptiveConfig, AdaptiveProposer, DraftConfig, ReferenceCorpus, SuffixProposer
from draftless.lookup.adaptive import cost_model

from .acceptance import TokenDraws, accept_choices, greedy_accept, sample_accept
from .attention import grouped_query_sdpa
from .calibration import cached_cost_curve, cached_inexact_drafts, cached_linear_plans, checks_pass_lengths
from .learned_shape import load_learned_state, save_learned_shape, stale_curve_scale
from .lean_layers import lean_layers
from .lean_layers import verified as lean_verified
from .linear_plan import planned_linears
from .pass_check import MAX_DRAFT, exact_length, warn_coarse_rounding
from .pass_timing import told_seconds
from .proposer_output import may_stage, proposed_draft, staged_rows
from .request_starts import request_start
from . import kv_cache
from .generation_plan import UnsupportedGeneration, embedding_rows, plan_generation, positions_left
from .screened_head import screen_for_run, timed_like_calibration
from .staged_head import StagedHead, accept_in_stages
from .generation_stats import StatsRecorder
from .stop_strings import first_stop
from .token_text import digit_tokens, text_classes
from .verifier import Verifier

logger = logging.getLogger(__name__)


class SpeculativeGenerator:
    """Drop-in ``generate`` for one decoder-only model.

    ``config`` chooses the built-in proposer: an ``AdaptiveConfig`` (the default: per step, the draft length
    that maximises expected tokens per second under the model's calibrated cost curve, see
    ``draftless.lookup.adaptive``) or a ``DraftConfig`` (a fixed-length suffix proposer). ``proposer``
    replaces it with any object that has ``reset``/``propose``/``update`` (see ``draftless.lookup.Proposer``).
    ``corpus``, a ``draftless.lookup.ReferenceCorpus`` (documents a RAG pipeline retrieves, earlier answers),
    is drafted from too, where it matches the request's text better than the request itself does (adaptive
    proposer only); with ``remember``, every request's generated tokens join it as a new document when the
    request ends, so that later requests draft from earlier outputs. ``last_stats`` holds the
    ``GenerationStats`` of the latest call.
    """

    def __init__(self, model, tokenizer=None, config=None, proposer=None, corpus=None, remember=False):
        if not hasattr(model, "forward") or not hasattr(model, "generation_config"):
            raise TypeError("model must be a transformers causal language model")
        if tokenizer is not None and not callable(getattr(tokenizer, "decode", None)):  # stop strings decode
            raise TypeError(f"tokenizer must be a transformers tokenizer or None, got {type(tokenizer).__name__}")
        if config is not None and not isinstance(config, (AdaptiveConfig, DraftConfig)):
            raise TypeError(f"config must be an AdaptiveConfig or a DraftConfig, got {type(config).__name__}")
        if corpus is not None and not isinstance(corpus, ReferenceCorpus):
            raise TypeError(f"corpus must be a draftless.lookup.ReferenceCorpus or None, got {type(corpus).__name__}")
        if not isinstance(remember, bool):
            raise TypeError(f"remember must be a bool, got {type(remember).__name__}")
        if remember and corpus is None:
            raise ValueError("remember=True needs a corpus to remember the outputs in")
        if corpus is not None and (proposer is not None or isinstance(config, DraftConfig)):
            raise ValueError("corpus is drafted from by the adaptive proposer only: pass no proposer and an "
                             "AdaptiveConfig (or no config)")
        kv_cache.check_model_cache(model)  # before any calibration runs the model
        self.model = model
        self.tokenizer = tokenizer
        self.config = config if config is not None else AdaptiveConfig()
        warn_coarse_rounding(model)
        # off the CPU, every draft length the config allows is checked, and those whose verification pass is
        # not exact there are never drafted (see ``pass_check``); None where nothing is checked (the CPU)
        self.checked_drafts = max(MAX_DRAFT, self.config.max_draft) if checks_pass_lengths(model) else None
        self.inexact_drafts = cached_inexact_drafts(model, self.checked_drafts or MAX_DRAFT)
        self._keeps_shape = False  # only the adaptive proposer built here keeps its learned shape on disk
        if proposer is not None:
            missing = [name for name in ("reset", "propose", "update") if not callable(getattr(proposer, name, None))]
            if missing:
                raise TypeError(f"proposer must implement draftless.lookup.Proposer (reset, propose, update); "
                                f"{type(proposer).__name__} has no {', '.join(missing)}")
            self.proposer = proposer
        elif isinstance(self.config, DraftConfig):
            self.proposer = SuffixProposer(self.config)
        else:  # the cost curve is calibrated once per model/device/dtype/threads and cached on disk, and its
            # shape as earlier runs learned it kept beside it (``learned_shape``)
            curve = cached_cost_curve(model)
            learned = load_learned_state(model, curve) if self.config.shape_rate > 0 else (None, None)
            cost = cost_model(self.config, curve, *learned)
            self.proposer = AdaptiveProposer(self.config, cost=cost, excluded=self.inexact_drafts, corpus=corpus,
                                             start=request_start(model, self.config))
            self._keeps_shape = self.config.shape_rate > 0
        adaptive = isinstance(self.proposer, AdaptiveProposer)  # what it reads from a tokenizer, not yet given
        self._texts_pending = adaptive and self.proposer.config.reflow and self.proposer.reflow is None
        self._digits_pending = adaptive and self.proposer.config.stepped_copy and self.proposer.stepped is None
        self._use_tokenizer_texts(tokenizer)
        self.corpus = corpus
        self.remember = remember
        self.last_stats = None
        self._warned_stale = False
        self._lock = threading.Lock()

    def generate(self, input_ids=None, attention_mask=None, generation_config=None, logits_processor=None,
                 stopping_criteria=None, streamer=None, *, seed=None, generator=None, **kwargs):
        """``model.generate``'s arguments and return value. Sampling (``do_sample=True``) draws each position's
        token with a uniform fixed by ``seed`` and the position (``acceptance.TokenDraws``), or by a key taken
        from ``generator`` (a ``torch.Generator``), or with neither from torch's global RNG, so that
        ``torch.manual_seed`` makes runs repeatable as it does for transformers. The same seed gives the same
        text whatever was drafted: on another machine's cost curve, with another proposer, or none. Calls
        from several threads run one at a time: the proposer holds one request's index and acceptance counts
        (interleaved, each request would draft from the other's text, and ``last_stats`` mix them)."""
        with self._lock:
            return self._generate(input_ids, attention_mask, generation_config, logits_processor,
                                  stopping_criteria, streamer, seed=seed, generator=generator, **kwargs)

    @torch.no_grad()
    def _generate(self, input_ids, attention_mask, generation_config, logits_processor, stopping_criteria,
                  streamer, *, seed, generator, **kwargs):
        if input_ids is None:
            input_ids = kwargs.pop("inputs", None)
        if input_ids is None:  # generate starts from inputs_embeds or the BOS token; drafts need the token ids
            raise UnsupportedGeneration("draftless needs input_ids (the prompt's token ids): "
                                        + ("inputs_embeds alone" if kwargs.get("inputs_embeds") is not None
                                           else "no prompt") + " is not supported")
        if self.tokenizer is not None:
            kwargs.setdefault("tokenizer", self.tokenizer)
        self._use_tokenizer_texts(kwargs.get("tokenizer"))
        t_start = time.perf_counter()
        plan = plan_generation(self.model, input_ids, attention_mask, generation_config, logits_processor,
                               stopping_criteria, streamer, kwargs)
        ids = plan.input_ids
        positions_left(plan, ids.shape[1])  # a prompt longer than the learned positions is refused up front
        accept = greedy_accept
        if plan.do_sample:
            accept = functools.partial(sample_accept, draws=TokenDraws.from_seed(seed, generator))
        lean_verified(self.model)  # checked (once a model) before any hook of the loop's is on the model
        # the output layer in two stages where the proposer asks for it (``staged_head``), checked at the prefill
        staging = StagedHead(self.model) if may_stage(self.proposer) else None
        screen = screen_for_run(self.model, plan, staging,
                                getattr(getattr(self.proposer, "config", None), "screened_head", True))
        # a run whose passes the calibration does not time alike (sampled, or its output layer not screened where
        # the calibration's is) learns their costs for itself alone: the cost model is left as it was after it
        timed = timed_like_calibration(self.model, plan, screen[0])
        cost = getattr(self.proposer, "cost", None)
        saved = cost.snapshot() if not timed and hasattr(cost, "snapshot") else None
        try:
            with staging.installed() if staging is not None else contextlib.nullcontext():
                return self._run_loop(plan, ids, accept, staging, screen, t_start, timed)
        finally:
            if saved is not None:
                cost.restore(saved)

    def _run_loop(self, plan, ids, accept, staging, screen, t_start, keep_shape):
        """The prefill, then propose -> verify -> accept -> update until a stop; ``generate``'s return value."""
        prompt_len = ids.shape[1]
        # the cache never holds more than max_length - 1 positions: a draft is capped by the budget
        verifier = Verifier(self.model, plan, plan.max_length, staging, *screen)
        rec = StatsRecorder()
        scores, raw = [], []
        if plan.streamer is not None:
            plan.streamer.put(ids.cpu())

        t0 = time.perf_counter()
        logits = verifier.prefill(ids)
        _, tokens, chosen = accept(logits, ids.new_empty(0), ids, plan.processors)
        rec.prefill_s = time.perf_counter() - t0
        ids, done = self._append(plan, ids, tokens, chosen, logits, scores, raw)
        self.proposer.reset(ids[0].cpu().numpy())
        rec.note_start(self.proposer)  # with the outputs, what a replay starts from (the request's opening known)
        rows = embedding_rows(self.model)  # the ids a draft may hold
        record_cost = getattr(self.proposer, "record_pass", None)
        # each linear layer's product in its fastest form (the output layer's plan read only where a pass
        # multiplies by it in fp32, measured on first use); grouped key/value heads attended as they are; decoder
        # layers without transformers' plumbing where bit for bit the same (``lean_layers``)
        plans = cached_linear_plans(self.model, output_layer=not verifier.screens(1))
        with planned_linears(self.model, plans), grouped_query_sdpa(self.model), lean_layers(self.model):
            while not done:
                budget = plan.max_length - ids.shape[1]  # tokens still allowed; one is always the bonus
                room = positions_left(plan, ids.shape[1])  # the pass feeds the last token, then the draft
                if room is not None:  # a draft takes no position past the learned ones
                    budget = min(budget, room + 1)
                t0 = time.perf_counter()
                draft_np = proposed_draft(self.proposer.propose(budget - 1), budget - 1, rows)
                if self.checked_drafts is not None:  # cut to the longest length checked exact
                    draft_np = draft_np[: exact_length(draft_np.size, self.inexact_drafts, self.checked_drafts)]
                draft = torch.as_tensor(draft_np, device=ids.device)
                t1 = time.perf_counter()
                first_rows = staged_rows(self.proposer, draft.shape[0]) if verifier.stages else None
                screened = verifier.screens(draft.shape[0] + 1)
                logits = verifier.forward(ids[0, -1], draft, first_rows)
                head_rows = None
                if screened and not plan.do_sample:  # the target's token per row, chosen through the screen
                    n, tokens, chosen = accept_choices(logits, draft)
                elif first_rows is None:  # logits, or a sampled screened pass's rows (``screened_sampling``)
                    n, tokens, chosen = accept(logits, draft, ids, plan.processors)
                else:  # the rows after the first stage computed only where its draft tokens all held
                    n, tokens, chosen, logits, head_rows = accept_in_stages(accept, logits, verifier.rest, draft,
                                                                            ids, plan.processors)
                verifier.rollback(draft.shape[0] - n)
                t2 = time.perf_counter()
                told = told_seconds(t2 - t1, self.model)  # 0 for the model's first pass here: one-time work
                if record_cost is not None:  # an adaptive proposer refines its cost model with real passes
                    if head_rows is None:
                        record_cost(int(draft.shape[0]), told)
                    else:
                        record_cost(int(draft.shape[0]), told, head_rows)
                before = ids.shape[1]
                ids, done = self._append(plan, ids, tokens, chosen, logits[: n + 1], scores, raw)
                # a stop (EOS, stop string, criteria) inside the accepted draft drops the tokens after it: the
                # stats count what the pass kept, so that new tokens = 1 (prefill) + sum(accepted + 1)
                rec.record_pass(int(draft.shape[0]), min(n, ids.shape[1] - before - 1), told, head_rows)
                self.proposer.update(ids[0, before:].cpu().numpy())
                rec.propose_s += (t1 - t0) + (time.perf_counter() - t2)
                rec.verify_s += t2 - t1
        if plan.streamer is not None:
            plan.streamer.end()
        if self.remember:
            self.corpus.add(ids[0, prompt_len:].cpu().numpy())
        self.last_stats = rec.freeze(ids.shape[1] - prompt_len, time.perf_counter() - t_start)
        self._check_stale_curve()
        if keep_shape:
            self._keep_learned_shape()
        if not plan.return_dict:
            return ids
        return GenerateDecoderOnlyOutput(
            sequences=ids, scores=tuple(scores) if plan.output_scores else None,
            logits=tuple(raw) if plan.output_logits else None, cache=verifier.cache)

    def _use_tokenizer_texts(self, tokenizer):
        """Give the adaptive proposer the tokens' texts (``token_text``) the first time a tokenizer is known, so
        that it drafts re-flowed copies too (``draftless.lookup.reflow``), and where the tokenizer writes numbers
        digit by digit, its digits' tokens, so that it drafts stepped copies (``draftless.lookup.stepped_copy``)."""
        if tokenizer is None:
            return
        if self._digits_pending:
            self._digits_pending = False
            try:
                self.proposer.use_digit_tokens(digit_tokens(tokenizer))
            except (AttributeError, TypeError, ValueError) as error:  # an object that only decodes (stop strings)
                logger.info("draftless: no stepped copies: the tokenizer's digits could not be read (%s)", error)
        if self._texts_pending:
            self._texts_pending = False
            try:
                classes = text_classes(tokenizer)
            except (AttributeError, TypeError, ValueError) as error:
                logger.info("draftless: no re-flowed drafts: the tokenizer's texts could not be read (%s)", error)
                return
            self.proposer.use_text_classes(classes)

    def _keep_learned_shape(self):
        """Keep the curve's shape as learned so far on disk, for the next generator on this model (a cache
        directory that cannot be written loses it, with one warning)."""
        if not self._keeps_shape:
            return
        try:
            save_learned_shape(self.model, self.proposer.cost)
        except OSError as error:
            self._keeps_shape = False
            logger.warning("draftless: the learned cost-curve shape cannot be kept on disk (%s); each process "
                           "will learn it anew", error)

    def _check_stale_curve(self):
        """Warn once when passes run much faster than the cached curve says (``learned_shape.stale_curve_scale``)."""
        scale = None if self._warned_stale else stale_curve_scale(self.proposer, self.last_stats.passes)
        if scale is None:
            return
        self._warned_stale = True
        logger.warning("verification passes take %.2fx the times of the cached cost curve, which was measured while "
                       "the machine was slower; `draftless calibrate` (draftless.integration.calibration.recalibrate) "
                       "measures it again", scale)

    def _append(self, plan, ids, tokens, chosen, logits, scores, raw):
        """Append ``tokens`` up to the first that ends generation; returns ``(ids, done)``."""
        start = ids.shape[1]
        ids = torch.cat([ids, tokens.view(1, -1).to(ids.dtype)], dim=1)
        stop = first_stop(plan, ids, start)
        if stop is not None:
            ids = ids[:, : stop + 1]
        kept = ids.shape[1] - start
        if plan.output_scores:
            scores.extend(chosen[i: i + 1] for i in range(kept))
        if plan.output_logits:
            raw.extend(logits[i: i + 1] for i in range(kept))
        if plan.streamer is not None and kept:
            plan.streamer.put(ids[:, start:].cpu())
        return ids, stop is not None


def generate(model, input_ids=None, attention_mask=None, **generate_kwargs):
    """``model.generate``, greedy, sped up by suffix drafting: same arguments, same return value; ``corpus``, a
    ``ReferenceCorpus``, is drafted from too (see ``SpeculativeGenerator``)."""
    return SpeculativeGenerator(model, generate_kwargs.pop("tokenizer", None),
                                corpus=generate_kwargs.pop("corpus", None)).generate(
        input_ids, attention_mask=attention_mask, **generate_kwargs)

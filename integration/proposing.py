"""The proposer's side of the loop, as the integration layer sees it: building the default adaptive proposer for a
model (its calibrated cost curve, the shape kept from earlier runs, how requests start), giving it the tokenizer's
texts and digits, and checking what any proposer returns (``proposed_draft``, ``staged_rows``): a proposer is any
object with ``reset``/``propose``/``update``, and what it returns is refused naming it, not met as an error deep
inside the model."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from draftless.lookup import AdaptiveConfig, AdaptiveProposer, DraftConfig, ReferenceCorpus, SuffixProposer
from draftless.lookup.adaptive import cost_model

from .calibration import cached_cost_curve
from .kept_state import load_learned_state, request_start
from .token_text import digit_tokens, text_classes

logger = logging.getLogger(__name__)


def build_proposer(model, config, proposer, corpus, excluded: tuple[int, ...], staged: bool) -> Any:
    """``proposer`` checked, else the proposer ``config`` chooses: a ``SuffixProposer`` for a ``DraftConfig``, or
    the adaptive one with ``model``'s cost curve (calibrated once per machine and cached), the curve's shape as
    earlier runs learned it, and what earlier requests' first drafts showed."""
    if proposer is not None:
        missing = [name for name in ("reset", "propose", "update") if not callable(getattr(proposer, name, None))]
        if missing:
            raise TypeError(
                f"proposer must implement draftless.lookup.Proposer (reset, propose, update); "
                f"{type(proposer).__name__} has no {', '.join(missing)}"
            )
        return proposer
    if isinstance(config, DraftConfig):
        return SuffixProposer(config)
    curve = cached_cost_curve(model)
    learned = load_learned_state(model, curve) if config.shape_rate > 0 else (None, None)
    cost = cost_model(config, curve, *learned, staged=staged)
    return AdaptiveProposer(config, cost=cost, excluded=excluded, corpus=corpus, start=request_start(model, config))


def check_generator_arguments(model, tokenizer, config, proposer, corpus, remember) -> None:
    """``SpeculativeGenerator``'s arguments refused with a clear error naming the one that is wrong."""
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
        raise ValueError(
            "corpus is drafted from by the adaptive proposer only: pass no proposer and an "
            "AdaptiveConfig (or no config)"
        )


class TokenizerTexts:
    """Gives an adaptive proposer the tokens' texts the first time a tokenizer is known, so that it drafts
    re-flowed copies (``draftless.lookup.reflow``), and, where the tokenizer writes numbers digit by digit, its
    digits' tokens, so that it drafts stepped copies (``draftless.lookup.stepped_copy``)."""

    def __init__(self, proposer) -> None:
        self.proposer = proposer
        adaptive = isinstance(proposer, AdaptiveProposer)
        self.texts_pending = adaptive and proposer.config.reflow and proposer.reflow is None
        self.digits_pending = adaptive and proposer.config.stepped_copy and proposer.stepped is None

    def use(self, tokenizer) -> None:
        if tokenizer is None:
            return
        if self.digits_pending:
            self.digits_pending = False
            try:
                self.proposer.use_digit_tokens(digit_tokens(tokenizer))
            except (AttributeError, TypeError, ValueError) as error:  # an object that only decodes (stop strings)
                logger.info("draftless: no stepped copies: the tokenizer's digits could not be read (%s)", error)
        if self.texts_pending:
            self.texts_pending = False
            try:
                classes = text_classes(tokenizer)
            except (AttributeError, TypeError, ValueError) as error:
                logger.info("draftless: no re-flowed drafts: the tokenizer's texts could not be read (%s)", error)
                return
            self.proposer.use_text_classes(classes)


def may_stage(proposer):
    """Whether ``proposer`` may ask for a staged output layer: it has ``first_rows`` and does not say otherwise
    by ``stages_output_layer`` (the adaptive proposer with ``staged_head`` off, the default)."""
    return hasattr(proposer, "first_rows") and bool(getattr(proposer, "stages_output_layer", True))


def staged_rows(proposer, k):
    """The rows of the output layer the proposer asks the loop to compute first for its latest draft, as verified
    (``k`` tokens, after any cut to the budget or to an exact length), or None for all at once (None, or at least
    ``1 + k`` rows: a draft cut below the first stage is verified whole); anything but a positive int or None
    refused naming the proposer."""
    rows = getattr(proposer, "first_rows", None)
    if rows is None:
        return None
    if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)):
        raise TypeError(f"the proposer's first_rows must be an int or None, got {type(rows).__name__}")
    if rows < 1:
        raise ValueError(f"the proposer's first_rows must be at least 1 (or None), got {rows}")
    return None if rows >= k + 1 else int(rows)


def proposed_draft(raw, room, rows):
    """A proposer's draft as at most ``room`` int64 token ids. Anything else (None, floats, a 2-D array, an id
    the input embedding of ``rows`` rows has none for) is refused naming the proposer, not met as an error deep
    inside the model or truncated to integers in silence."""
    draft = np.asarray(raw)
    if draft.ndim != 1 or (draft.size and not np.issubdtype(draft.dtype, np.integer)):
        raise TypeError(
            f"the proposer's propose() must return a 1-D sequence of integer token ids, got "
            f"{type(raw).__name__} of dtype {draft.dtype} and shape {draft.shape}"
        )
    draft = draft[:room].astype(np.int64, copy=False)
    if rows is not None and draft.size and (draft.min() < 0 or draft.max() >= rows):
        bad = draft[(draft < 0) | (draft >= rows)][0]
        raise ValueError(
            f"the proposer's propose() returned token id {int(bad)}, outside the model's vocabulary "
            f"of {rows} embeddings"
        )
    return draft

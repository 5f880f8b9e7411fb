"""Turn ``generate``'s arguments into a plan, resolved exactly as ``model.generate`` resolves them.

transformers' own (private) helpers do the resolving -- the generation config merge, special tokens, the
max/min length rules and the logits-processor list -- so a draftless run follows the same rules as the
model's own ``generate``; what draftless cannot do yet is refused here with a ``ValueError``.
"""

import inspect
import logging
import math
import numbers
from dataclasses import dataclass

import torch
from transformers import LogitsProcessorList, StoppingCriteriaList

from .stop_strings import StopStringMatcher

logger = logging.getLogger(__name__)

_UNSUPPORTED = {
    "num_beams": (1, "beam search"),
    "num_return_sequences": (1, "several sequences per prompt"),
    "output_attentions": (False, "output_attentions"),
    "output_hidden_states": (False, "output_hidden_states"),
}


class UnsupportedGeneration(ValueError):
    """A generation mode draftless does not serve (yet); ``enable`` hands such calls to transformers."""


@dataclass
class GenerationPlan:
    input_ids: torch.Tensor  # (rows, prompt_len) long
    attention_mask: torch.Tensor | None  # None when it is all ones
    max_length: int  # prompt + new tokens, never exceeded
    eos_token_ids: frozenset
    processors: LogitsProcessorList
    stopping_criteria: StoppingCriteriaList  # the caller's own, checked after every token
    stop_strings: StopStringMatcher | None
    streamer: object
    return_dict: bool
    output_scores: bool
    output_logits: bool
    do_sample: bool
    cache: object  # a caller's Cache or None
    cache_arg: str  # the model's forward keyword for the cache
    position_limit: int | None = None  # learned absolute positions (gpt2's n_positions): no pass reaches past them
    masked: int = 0  # masked (pad) prompt tokens: positions run that many behind the sequence's length
    pad_token_id: int = 0  # what a batch's finished rows are padded with, as generate pads them


def _cache_keyword(model):
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def learned_position_limit(model):
    """How many positions the model's learned absolute position table holds (gpt2's ``wpe``, OPT's
    ``embed_positions`` less its offset), or None where positions are computed (rotary, ALiBi) and any is
    defined."""
    inputs = model.get_input_embeddings()
    for name, module in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if (
            isinstance(module, torch.nn.Embedding)
            and module is not inputs
            and leaf in ("wpe", "embed_positions", "position_embeddings")
        ):
            return module.num_embeddings - int(getattr(module, "offset", 0))
    return None


def embedding_rows(model):
    """How many token ids the model's input embedding has rows for; None for an input layer that is not a
    table."""
    return getattr(model.get_input_embeddings(), "num_embeddings", None)


def _check_token_ids(model, input_ids):
    """Refuse ids the input embedding has no row for, before they reach it (an IndexError deep in the model
    for ``generate``)."""
    rows = embedding_rows(model)
    if rows is None:  # an input layer that is not a table: nothing to check against
        return
    bad = input_ids[(input_ids < 0) | (input_ids >= rows)]
    if bad.numel():
        raise ValueError(f"input_ids holds token id {int(bad[0])} outside the model's vocabulary of {rows} embeddings")


def positions_left(plan, length):
    """How many positions of the learned table lie past the last token of a ``length``-token sequence (pads
    take none: positions follow the attention mask, as ``generate`` counts them), or None where positions are
    unbounded. Refuses to go on once that token itself has none (``generate`` fails there with an IndexError
    deep in the model)."""
    if plan.position_limit is None:
        return None
    left = plan.position_limit - (length - plan.masked)
    if left < 0:
        raise ValueError(
            f"a sequence of {length - plan.masked} positions passes the model's {plan.position_limit} "
            f"learned positions before generation ended: lower max_new_tokens (or max_length) so that "
            f"the prompt's {plan.input_ids.shape[1] - plan.masked} tokens and the new ones fit in "
            f"{plan.position_limit}"
        )
    return left


def _check_generation_mode(config):
    """Refuse a config that ``generate`` would decode some other way than greedy search or sampling (contrastive
    search, DoLa, constrained or group beam search, its own assisted generation, token healing): draftless
    would otherwise decode it greedily, silently."""
    if getattr(config, "token_healing", False):
        raise UnsupportedGeneration("token_healing (token_healing=True) is not supported by draftless yet")
    for name in ("assistant_early_exit", "use_mtp"):
        if getattr(config, name, None):
            raise UnsupportedGeneration(f"{name} selects transformers' own assisted generation; draftless replaces it")
    mode = config.get_generation_mode()
    mode = str(getattr(mode, "value", mode))
    if mode not in ("greedy_search", "sample"):
        raise UnsupportedGeneration(
            f"{mode.replace('_', ' ')}, which the generation config selects, is not supported "
            f"by draftless: it serves greedy search and sampling"
        )


def _check_lengths(value_of):
    """The requested lengths (``value_of(name)``) as numbers, named: generate itself fails on a string with an
    unnamed comparison error and on NaN or infinity deep in its loop. A float is taken as generate takes it."""
    for name in ("max_new_tokens", "max_length", "min_new_tokens", "min_length"):
        value = value_of(name)
        if value is None:
            continue
        if not isinstance(value, numbers.Real):  # True runs one token, as in generate
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if not math.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value}")


def plan_generation(
    model, input_ids, attention_mask, generation_config, logits_processor, stopping_criteria, streamer, kwargs
):
    if not isinstance(input_ids, torch.Tensor) or input_ids.dtype not in (torch.long, torch.int):
        raise TypeError("input_ids must be an integer torch.Tensor of shape (batch, prompt_length)")
    if input_ids.ndim == 1:
        input_ids = input_ids[None]
    if input_ids.ndim != 2 or input_ids.shape[1] == 0 or input_ids.shape[0] == 0:
        raise ValueError(f"input_ids must have shape (batch, prompt_length), got {tuple(input_ids.shape)}")
    input_ids = input_ids.to(model.device, torch.long)
    _check_token_ids(model, input_ids)
    if attention_mask is not None and not isinstance(attention_mask, torch.Tensor):
        raise TypeError(
            f"attention_mask must be a torch.Tensor, got {type(attention_mask).__name__} (pass "
            f"generation_config and the rest by keyword)"
        )
    tokenizer = kwargs.pop("tokenizer", None)
    cache = kwargs.pop("cache", None)
    if cache is None:
        cache = kwargs.pop("past_key_values", None)
    for name in (
        "assistant_model",
        "prefix_allowed_tokens_fn",
        "negative_prompt_ids",
        "custom_generate",
        "synced_gpus",
        "inputs_embeds",
    ):
        if kwargs.get(name) is not None:
            raise UnsupportedGeneration(f"{name} is not supported by draftless")
        kwargs.pop(name, None)
    has_default_max_length = (
        kwargs.get("max_length") is None
        and (generation_config is None or generation_config.max_length is None)
        and model.generation_config.max_length is None
    )
    has_default_min_length = (
        kwargs.get("min_length") is None
        and (generation_config is None or generation_config.min_length is None)
        and model.generation_config.min_length is None
    )
    asked_no_cache = kwargs.get("use_cache") is False or (  # the caller's choice, not the model's default
        generation_config is not model.generation_config and getattr(generation_config, "use_cache", None) is False
    )
    _check_lengths(kwargs.get)  # before transformers compares them
    if generation_config is not None:
        _check_lengths(lambda name: getattr(generation_config, name, None))
    config, model_kwargs = model._prepare_generation_config(generation_config, **kwargs)
    for name, (allowed, what) in _UNSUPPORTED.items():
        if getattr(config, name, allowed) not in (allowed, None):
            raise UnsupportedGeneration(f"{what} ({name}={getattr(config, name)!r}) is not supported by draftless yet")
    if asked_no_cache:
        raise UnsupportedGeneration(
            "use_cache=False asks for generation without a KV cache; draftless verifies drafts against one"
        )
    if config.use_cache is False:  # the model's default (MPT's), not the caller's: a cache changes no token
        logger.debug("draftless: the model's generation config sets use_cache=False; using a KV cache anyway")
        config.use_cache = True
    if config.prompt_lookup_num_tokens is not None:
        raise UnsupportedGeneration(
            "prompt_lookup_num_tokens selects transformers' own prompt lookup; draftless replaces it"
        )
    _check_generation_mode(config)
    extra = set(model_kwargs) - {"attention_mask", "use_cache", "logits_to_keep"}
    if extra:
        raise UnsupportedGeneration(f"unsupported generate arguments: {sorted(extra)}")  # enable: transformers
    if attention_mask is None:
        attention_mask = model_kwargs.get("attention_mask")
    model._prepare_special_tokens(config, attention_mask is not None, device=model.device)
    if attention_mask is None:  # as generate does: pad tokens in the prompt are masked out
        attention_mask = model._prepare_attention_mask_for_generation(input_ids, config, {})
    attention_mask = attention_mask.to(model.device)
    if cache is not None and input_ids.shape[0] > 1:
        raise UnsupportedGeneration("a batch continued from a caller's cache is not supported by draftless")
    if cache is not None and attention_mask.shape[1] > input_ids.shape[1]:  # generate's other way to continue
        raise UnsupportedGeneration(
            "input_ids with only the tokens after a cache (attention_mask longer than "
            "input_ids): draftless continues a cache given the whole sequence"
        )
    if attention_mask.shape != input_ids.shape:
        raise ValueError(f"attention_mask has shape {tuple(attention_mask.shape)}, input_ids {tuple(input_ids.shape)}")
    if input_ids.shape[0] > 1:
        _check_left_padding(attention_mask)
    if bool((attention_mask == 1).all()):
        attention_mask = None  # generate drops an all-ones mask too
    config = model._prepare_generated_length(
        config, has_default_max_length, has_default_min_length, "input_ids", input_ids.shape[1], input_ids
    )
    model._validate_generated_length(config, input_ids.shape[1], has_default_max_length)
    processors = model._get_logits_processor(
        generation_config=config,
        input_ids_seq_length=input_ids.shape[1],
        encoder_input_ids=input_ids,
        logits_processor=logits_processor if logits_processor is not None else LogitsProcessorList(),
        device=model.device,
        model_kwargs={"attention_mask": attention_mask},
    )
    eos = config._eos_token_tensor
    eos_ids = frozenset() if eos is None else frozenset(int(t) for t in eos.flatten().tolist())
    pad = config._pad_token_tensor  # generate pads finished rows with it (the EOS token where there is none)
    pad_token_id = int(pad.flatten()[0]) if pad is not None else (min(eos_ids) if eos_ids else 0)
    stop_strings = config.stop_strings
    if stop_strings is not None and "" in ([stop_strings] if isinstance(stop_strings, str) else list(stop_strings)):
        raise UnsupportedGeneration(
            "an empty stop string, on which generate stops after the first new token; draftless refuses it"
        )  # enable: transformers serves it as it does
    # generate stops once the length reaches max_length, so a budget of 2.5 new tokens runs 3 of them
    return GenerationPlan(
        input_ids=input_ids,
        attention_mask=attention_mask,
        max_length=math.ceil(config.max_length),
        eos_token_ids=eos_ids,
        processors=processors,
        stopping_criteria=stopping_criteria if stopping_criteria is not None else StoppingCriteriaList(),
        stop_strings=StopStringMatcher(stop_strings, tokenizer) if stop_strings else None,
        streamer=streamer,
        return_dict=bool(config.return_dict_in_generate),
        output_scores=bool(config.output_scores),
        output_logits=bool(config.output_logits),
        do_sample=bool(config.do_sample),
        cache=cache,
        cache_arg=_cache_keyword(model),
        position_limit=learned_position_limit(model),
        masked=0 if attention_mask is None else int((attention_mask == 0).sum()),
        pad_token_id=pad_token_id,
    )


def _check_left_padding(attention_mask):
    """Refuse a batch's mask with padding after a row's last token (right padding), with which ``generate`` would
    append new tokens after the padding and warn; and a row with no token at all."""
    empty = ~attention_mask.bool().any(dim=1)
    if bool(empty.any()):
        raise ValueError(f"attention_mask row {int(empty.nonzero()[0])} masks every token: the row has no prompt")
    right = attention_mask[:, -1] == 0
    if bool(right.any()):
        row = int(right.nonzero()[0])
        raise ValueError(
            f"attention_mask row {row} has padding after its tokens (right padding); pad prompts on the left "
            "(tokenizer.padding_side = 'left'), as generate expects"
        )

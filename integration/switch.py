"""``enable(model)``: make a model's own ``generate`` use draftless; ``disable(model)`` restores it."""

import functools
import inspect
import logging

from .generation_plan import UnsupportedGeneration as _Unsupported
from .speculative import SpeculativeGenerator

logger = logging.getLogger(__name__)
_ATTR = "_draftless_generator"


def enable(model, tokenizer=None, config=None, corpus=None, remember=False):
    """Route ``model.generate(...)`` through draftless (greedy search and sampling). Calls that draftless cannot
    serve (batches, beam search, contrastive search, DoLa, several sequences per prompt, ...) go to the original
    ``generate`` unchanged, with a log line saying why. ``corpus`` and ``remember``: see
    ``SpeculativeGenerator``."""
    if getattr(model, _ATTR, None) is not None:
        return model
    generator = SpeculativeGenerator(model, tokenizer=tokenizer, config=config, corpus=corpus, remember=remember)
    original = model.generate

    @functools.wraps(original)
    def generate(*args, **kwargs):
        try:
            return generator.generate(**_by_keyword(original, args, kwargs))
        except _Unsupported as exc:
            logger.info("draftless: falling back to transformers' generate (%s)", exc)
            if generator.tokenizer is not None and kwargs.get("tokenizer") is None:  # its stop strings need it too
                kwargs = {**kwargs, "tokenizer": generator.tokenizer}
            return original(*args, **kwargs)

    object.__setattr__(model, _ATTR, generator)
    object.__setattr__(model, "generate", generate)
    return model


def _by_keyword(original, args, kwargs):
    """The call's arguments by name, positional ones bound as ``original`` (transformers' ``generate``: inputs,
    generation_config, logits_processor, stopping_criteria, ...) binds them, whose order after the first is not
    ``SpeculativeGenerator.generate``'s."""
    if not args:
        return kwargs
    signature = inspect.signature(original)
    named = {}
    for name, value in signature.bind_partial(*args, **kwargs).arguments.items():
        if signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
            named.update(value)
        else:
            named[name] = value
    return named


def disable(model):
    """Undo ``enable``; a no-op on a model that is not enabled."""
    if getattr(model, _ATTR, None) is None:
        return model
    object.__delattr__(model, "generate")  # the class's own generate shows through again
    object.__setattr__(model, _ATTR, None)
    return model


def is_enabled(model):
    return getattr(model, _ATTR, None) is not None


def stats(model):
    """The ``GenerationStats`` of the last draftless call on an enabled model."""
    generator = getattr(model, _ATTR, None)
    return None if generator is None else generator.last_stats

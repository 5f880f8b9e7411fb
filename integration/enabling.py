"""``enable(model)``: make a model's own ``generate`` use draftless; ``disable(model)`` restores it.

The generator an enabled model uses is kept in this module, keyed weakly by the model, not on the model: a deep
copy or a pickle of an enabled model (``copy.deepcopy``, ``torch.save``) is a plain model whose ``generate`` is
transformers' own. Every call through an enabled ``generate``, served or handed on, holds the model's lock, so
that it never runs while another thread's draftless call has the model's layers in its fast form.
"""

from __future__ import annotations

import inspect
import logging
import threading
import weakref
from typing import Any, NamedTuple

from .fastpass import FastPassOptions
from .generation_plan import UnsupportedGeneration
from .kept_state import model_lock
from .speculative import SpeculativeGenerator

logger = logging.getLogger(__name__)


class _Enabled(NamedTuple):
    generator: SpeculativeGenerator
    arguments: tuple  # what ``enable`` was given, to tell a call with new arguments from a repeated one


_ENABLED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> _Enabled
_ENABLED_LOCK = threading.Lock()


class EnabledGenerate:
    """An enabled model's ``generate``: draftless where it serves the call, else transformers' own. It holds the
    model, not the generator, so that a copy of the model calls its own (plain) ``generate``."""

    def __init__(self, model: Any) -> None:
        self.model = model

    @property
    def __wrapped__(self) -> Any:  # ``inspect.signature`` and ``help`` show transformers' generate
        return type(self.model).generate

    @property
    def __doc__(self) -> str | None:  # type: ignore[override]
        return type(self.model).generate.__doc__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        plain = type(self.model).generate.__get__(self.model)
        with _ENABLED_LOCK:
            entry = _ENABLED.get(self.model)
        if entry is None:  # a copy of an enabled model, or one disabled meanwhile
            return plain(*args, **kwargs)
        generator = entry.generator
        try:
            return generator.generate(**_by_keyword(plain, args, kwargs))
        except UnsupportedGeneration as exc:
            logger.info("draftless: falling back to transformers' generate (%s)", exc)
            if generator.tokenizer is not None and kwargs.get("tokenizer") is None:  # its stop strings need it too
                kwargs = {**kwargs, "tokenizer": generator.tokenizer}
            with model_lock(self.model):  # never beside another thread's draftless call on the model
                return plain(*args, **kwargs)


def enable(
    model: Any,
    tokenizer: Any = None,
    config: Any = None,
    corpus: Any = None,
    remember: bool = False,
    fast_pass: bool | FastPassOptions = True,
) -> Any:
    """Route ``model.generate(...)`` through draftless (greedy search and sampling, one row or a left-padded batch).
    Calls that draftless cannot serve (a batch continuing a caller's cache, beam search, contrastive search, DoLa,
    several sequences per prompt, ...) go to the original ``generate`` unchanged, with a log line saying why.
    ``config``, ``corpus``, ``remember`` and ``fast_pass``: see ``SpeculativeGenerator``. On a model already enabled,
    new arguments replace the old (a new generator); the same ones change nothing."""
    arguments = (tokenizer, config, corpus, remember, FastPassOptions.of(fast_pass))
    with model_lock(model):
        with _ENABLED_LOCK:
            entry = _ENABLED.get(model)
        if entry is not None and _same_arguments(entry.arguments, arguments):
            return model
        generator = SpeculativeGenerator(
            model, tokenizer=tokenizer, config=config, corpus=corpus, remember=remember, fast_pass=fast_pass
        )
        with _ENABLED_LOCK:
            _ENABLED[model] = _Enabled(generator, arguments)
        if not isinstance(model.__dict__.get("generate"), EnabledGenerate):
            object.__setattr__(model, "generate", EnabledGenerate(model))
    return model


def _same_arguments(old: tuple, new: tuple) -> bool:
    """Whether ``enable``'s arguments are the ones it had: the same tokenizer and corpus objects, equal configs."""
    (tok, config, corpus, remember, fast), (tok2, config2, corpus2, remember2, fast2) = old, new
    return tok is tok2 and corpus is corpus2 and config == config2 and remember == remember2 and fast == fast2


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


def disable(model: Any) -> Any:
    """Undo ``enable``; a no-op on a model that is not enabled."""
    with model_lock(model):
        with _ENABLED_LOCK:
            _ENABLED.pop(model, None)
        if isinstance(model.__dict__.get("generate"), EnabledGenerate):
            object.__delattr__(model, "generate")  # the class's own generate shows through again
    return model


def is_enabled(model: Any) -> bool:
    """Whether ``model.generate`` goes through draftless."""
    with _ENABLED_LOCK:
        return model in _ENABLED


def stats(model: Any) -> Any:
    """The ``GenerationStats`` of the last draftless call on an enabled model (None for any other)."""
    with _ENABLED_LOCK:
        entry = _ENABLED.get(model)
    return None if entry is None else entry.generator.last_stats

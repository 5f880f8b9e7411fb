"""Lean decoder layers: within ``lean_layers(model)``, each decoder layer of a family ``lean_forwards`` knows runs
its forward there, transformers' own operations without the per-call plumbing, so its outputs are bit for bit the
model's while a small model's pass on a CPU runs a few percent faster (docs/fast-pass.md).

It is installed only where that holds here: on the CPU, for layers in eval mode with no hooks on them or their
parts and no forward replaced by anyone but the linear plans, once a prefill and a pass of the model gave bit for
bit the last hidden states of transformers' own layers (``verified``, once, cached with the calibration under its
key, which holds the torch and transformers versions; a layer whose operations changed in another release fails
it, and the model keeps its own layers).
"""

import contextlib
import functools
import logging

import torch
from transformers.models.gemma3.modeling_gemma3 import Gemma3DecoderLayer

from .. import kv_cache
from ..store import cache_file, cached, read_cached
from .lean_forwards import (  # noqa: F401 (looked up by name when installed: ``LEAN_FORWARDS``)
    LEAN_FORWARDS,
    gemma3_layer,
    gemma3_scales,
    llama_layer,
    mistral_layer,
    qwen2_layer,
    qwen3_layer,
)

logger = logging.getLogger(__name__)

# the calibration cache's name for whether a model's lean layers gave its own logits bit for bit (its key holds the
# architecture and the torch and transformers versions, on which the operations depend, not the weights)
LEAN_KIND = "lean-layers-v2"
_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def _plain(module):
    """Whether ``module`` runs as its class says: no hooks, in eval mode, and its forward replaced by nobody
    but the linear plans (a ``functools.partial`` on an ``nn.Linear``)."""
    if module.training or any(getattr(module, name, None) for name in _HOOKS):
        return False
    replaced = module.__dict__.get("forward")
    return replaced is None or (type(module) is torch.nn.Linear and isinstance(replaced, functools.partial))


def lean_candidates(model):
    """The decoder layers of ``model`` this module could run: exactly of a class in ``LEAN_FORWARDS``, on the CPU,
    each plain with all its parts (``_plain``); none where any layer of the model is not, or global module
    hooks are set."""
    if model.device.type != "cpu":
        return []
    if any(getattr(torch.nn.modules.module, "_global" + name, None) for name in _HOOKS):
        return []
    layers = [m for m in model.modules() if isinstance(m, tuple(LEAN_FORWARDS))]
    if not layers or any(type(m) not in LEAN_FORWARDS or not all(_plain(p) for p in m.modules()) for m in layers):
        return []  # a subclass may compute otherwise
    return layers


@torch.no_grad()
def _states_both_ways(model, layers, seed=0):
    """The last hidden states (the output layer's input: equal states, equal logits) of a 12-token prefill and a
    5-token pass after it, by the model's own layers and by the lean ones: two pairs of tensors."""
    vocab = model.config.get_text_config().vocab_size
    ids = torch.randint(0, vocab, (1, 17), generator=torch.Generator().manual_seed(seed)).to(model.device)
    base = model.base_model
    out = []
    for lean in (False, True):
        with _installed(layers) if lean else contextlib.nullcontext():
            cache = kv_cache.new_cache(model, 32)
            first = base(input_ids=ids[:, :12], cache=cache, use_cache=True).last_hidden_state
            second = base(
                input_ids=ids[:, 12:],
                position_ids=torch.arange(12, 17, device=model.device)[None],
                cache=cache,
                use_cache=True,
            ).last_hidden_state
        out.append((first, second))
    return out


def _same_states(model, layers):
    """Whether ``_states_both_ways`` gives equal tensors (False, logged, where the check itself fails)."""
    try:
        (own_first, own_second), (lean_first, lean_second) = _states_both_ways(model, layers)
    except Exception:  # a model the check cannot drive (another forward signature): its own layers serve
        logger.info("lean decoder layers not checked on %s: not used", type(model).__name__, exc_info=True)
        return False
    same = torch.equal(own_first, lean_first) and torch.equal(own_second, lean_second)
    if not same:
        logger.info("lean decoder layers differ from %s's own here: not used", type(model).__name__)
    return same


def _decode(data):
    return data["verified"] if isinstance(data.get("verified"), bool) else None


def verified(model):
    """Whether the lean layers give ``model``'s own logits bit for bit here: checked once (about 0.2 s for
    SmolLM2-135M and Gemma 3 270M) and cached with the calibration (``LEAN_KIND``); False where
    ``lean_candidates`` finds none."""
    layers = lean_candidates(model)
    if not layers:
        return False
    return cached(model, LEAN_KIND, lambda: _same_states(model, layers), lambda same: {"verified": same}, _decode)


def verification_cached(model):
    """Whether ``verified`` would measure nothing for ``model`` (``calibration.calibrated`` asks)."""
    return not lean_candidates(model) or read_cached(cache_file(model, LEAN_KIND), _decode, warn=False) is not None


class _installed:
    """Within the block, each of ``layers`` runs its lean forward (``LEAN_FORWARDS``)."""

    def __init__(self, layers):
        self.layers = layers

    def __enter__(self):
        for layer in self.layers:
            extra = {"norm_scales": gemma3_scales(layer)} if type(layer) is Gemma3DecoderLayer else {}
            layer.forward = functools.partial(globals()[LEAN_FORWARDS[type(layer)]], layer, **extra)
        return self

    def __exit__(self, *exc):
        for layer in self.layers:
            layer.__dict__.pop("forward", None)
        return False


def lean_layers(model):
    """A context manager: within it, ``model``'s decoder layers run lean where ``lean_candidates``
    finds them and ``verified`` holds (checked on the first call for the model), else nothing changes."""
    layers = lean_candidates(model)
    return _installed(layers if layers and verified(model) else [])

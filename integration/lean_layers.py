"""Decoder layers run as the same operations in the same order, without transformers' per-call plumbing.

A verification pass through a small model on a CPU spends much of its time between its products: SmolLM2-135M's
1-row pass took about 34 ms on a 2-core Xeon, its linear layers 11 ms of it, the rest some forty small operations a
layer and the Python around them (``nn.Module.__call__`` for every norm, projection and activation, a kwarg renaming
wrapper and a kernel-hub wrapper on every layer and attention, an attention-function lookup). Within
``lean_layers(model)``, each decoder layer of a family this module knows (``LEAN_FORWARDS``: Llama's, Mistral's,
Qwen2's, Qwen3's and Gemma 3's) runs its forward here (``llama_layer`` and the others): transformers' own
operations, in their order, on the same tensors (each projection's own ``forward``, so planned linear layers stay
planned), so its outputs are bit for bit the model's. Left out, as they change no value: casts of a tensor to its
own type, and Gemma 3's ``1.0 + weight.float()`` on every call of a norm (``gemma3_scales``, once per installation;
session 59: passes summed over eight lengths 0.991x the time for both bundled models). SmolLM2's passes at k = 0, 1,
3 and 7 drafted tokens took 0.953x, 0.948x, 0.974x and 0.965x the time (session 46, median of 12 interleaved
rounds), and side by side its code_edit decoded 1.043x as fast, its math, qa, rag and translation 1.027-1.053x;
Gemma 3 270M's 1.027x and 1.019-1.030x ("Lean decoder layers" in ``benchmarks/recorded/README.md``). Random models
of Qwen2.5-0.5B's and Qwen3-0.6B's shapes (larger layers, the same plumbing) passed at k = 0, 3, 7 and 15 in 0.977x,
0.993x, 0.983x and 0.994x, and 0.971x, 0.980x, 0.981x and 0.976x the time (session 47, ``python -m
benchmarks.lean_passes --shape qwen2-0.5b``).

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
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.gemma3.modeling_gemma3 import Gemma3DecoderLayer
from transformers.models.gemma3.modeling_gemma3 import eager_attention_forward as gemma3_eager
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, eager_attention_forward
from transformers.models.mistral.modeling_mistral import MistralDecoderLayer
from transformers.models.mistral.modeling_mistral import eager_attention_forward as mistral_eager
from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer
from transformers.models.qwen2.modeling_qwen2 import eager_attention_forward as qwen2_eager
from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer
from transformers.models.qwen3.modeling_qwen3 import eager_attention_forward as qwen3_eager

from . import kv_cache
from .calibration_cache import cache_file, cached, read_cached

logger = logging.getLogger(__name__)

# the calibration cache's name for whether a model's lean layers gave its own logits bit for bit (its key holds the
# architecture and the torch and transformers versions, on which the operations depend, not the weights)
LEAN_KIND = "lean-layers-v1"
_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def _norm(norm, hidden_states):
    """``LlamaRMSNorm.forward``'s operations (Mistral's, Qwen2's and Qwen3's RMS norms are the same); the casts
    to and from float32, which return the tensor itself on a float32 one, called only where they convert."""
    input_dtype = hidden_states.dtype
    if input_dtype != torch.float32:
        hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + norm.variance_epsilon)
    return norm.weight * (hidden_states if input_dtype == torch.float32 else hidden_states.to(input_dtype))


def _rotate_half(x):
    """``rotate_half``'s operations."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def _projected(attention, hidden_states, head_norms=False):
    """The attention's query, key and value, as its forward shapes them (batch, heads, positions, head size);
    with ``head_norms`` (Qwen3's), the query and key each through its own RMS norm over the head size first."""
    hidden_shape = (*hidden_states.shape[:-1], -1, attention.head_dim)
    query, key, value = (proj.forward(hidden_states).view(hidden_shape)
                         for proj in (attention.q_proj, attention.k_proj, attention.v_proj))
    if head_norms:
        query, key = _norm(attention.q_norm, query), _norm(attention.k_norm, key)
    return query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)


def _rotated(query, key, position_embeddings):
    """``apply_rotary_pos_emb``'s operations."""
    cos, sin = position_embeddings
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return (query * cos) + (_rotate_half(query) * sin), (key * cos) + (_rotate_half(key) * sin)


def _attended(attention, query, key, value, attention_mask, cache, eager, kwargs, **extra):
    """The attention's output before its output projection: the cache updated, then the model's attention
    function (``eager`` where it names none) as the attention's forward calls it, ``extra`` among its kwargs."""
    input_shape = query.shape[:1] + query.shape[2:3]  # (batch, positions)
    if cache is not None:
        key, value = cache.update(key, value, attention.layer_idx, kwargs=kwargs)
    interface = ALL_ATTENTION_FUNCTIONS.get_interface(attention.config._attn_implementation, eager)
    output, _ = interface(attention, query, key, value, attention_mask, dropout=0.0, scaling=attention.scaling,
                          **extra, **kwargs)
    return output.reshape(*input_shape, -1).contiguous()


def _mlp(mlp, hidden_states):
    """``LlamaMLP``'s and ``Gemma3MLP``'s forward."""
    gated = mlp.act_fn(mlp.gate_proj.forward(hidden_states))
    return mlp.down_proj.forward(gated * mlp.up_proj.forward(hidden_states))


def _rope_layer(layer, hidden_states, eager, extra, attention_mask, position_ids, cache, use_cache,
                position_embeddings, kwargs, head_norms=False):
    """The decoder layer of Llama and the families that copy it (pre-norm attention with rotary embeddings, a
    gated MLP), its attention's function given ``extra`` kwargs (a sliding window) and ``eager`` as fallback."""
    if cache is None:
        cache = kwargs.pop("past_key_values", None)  # the name transformers' wrapper renames
    attention = layer.self_attn
    kwargs = {"position_ids": position_ids, "use_cache": use_cache, **kwargs}  # as the layer passes them on
    residual = hidden_states
    query, key, value = _projected(attention, _norm(layer.input_layernorm, hidden_states), head_norms)
    query, key = _rotated(query, key, position_embeddings)
    output = _attended(attention, query, key, value, attention_mask, cache, eager, kwargs, **extra)
    hidden_states = residual + attention.o_proj.forward(output)
    return hidden_states + _mlp(layer.mlp, _norm(layer.post_attention_layernorm, hidden_states))


def llama_layer(layer, hidden_states, attention_mask=None, position_ids=None, cache=None, use_cache=False,
                position_embeddings=None, **kwargs):
    """``LlamaDecoderLayer.forward`` of ``layer`` (with its ``LlamaAttention`` and ``LlamaMLP``), operation for
    operation, each projection through its own ``forward``."""
    return _rope_layer(layer, hidden_states, eager_attention_forward, {}, attention_mask, position_ids, cache,
                       use_cache, position_embeddings, kwargs)


def mistral_layer(layer, hidden_states, attention_mask=None, position_ids=None, cache=None, use_cache=False,
                  position_embeddings=None, **kwargs):
    """``MistralDecoderLayer.forward``: Llama's, its attention given the config's sliding window."""
    extra = {"sliding_window": getattr(layer.self_attn.config, "sliding_window", None)}
    return _rope_layer(layer, hidden_states, mistral_eager, extra, attention_mask, position_ids, cache, use_cache,
                       position_embeddings, kwargs)


def qwen2_layer(layer, hidden_states, attention_mask=None, position_ids=None, cache=None, use_cache=False,
                position_embeddings=None, **kwargs):
    """``Qwen2DecoderLayer.forward``: Llama's (its query, key and value projections with biases, which their
    own ``forward`` adds), its attention given the layer's sliding window (None on a full-attention layer)."""
    extra = {"sliding_window": layer.self_attn.sliding_window}
    return _rope_layer(layer, hidden_states, qwen2_eager, extra, attention_mask, position_ids, cache, use_cache,
                       position_embeddings, kwargs)


def qwen3_layer(layer, hidden_states, attention_mask=None, position_ids=None, cache=None, use_cache=False,
                position_embeddings=None, **kwargs):
    """``Qwen3DecoderLayer.forward``: Qwen2's, with the query and key normed over each head before the rotary
    embedding."""
    extra = {"sliding_window": layer.self_attn.sliding_window}
    return _rope_layer(layer, hidden_states, qwen3_eager, extra, attention_mask, position_ids, cache, use_cache,
                       position_embeddings, kwargs, head_norms=True)


def _gemma3_norm(norm, x, scale):
    """``Gemma3RMSNorm.forward``'s operations, its ``1.0 + weight.float()`` given as ``scale`` (``gemma3_scales``),
    the casts called only where they convert (on a float32 tensor they return it)."""
    output = x if x.dtype == torch.float32 else x.float()
    output = output * torch.rsqrt(output.pow(2).mean(-1, keepdim=True) + norm.eps)
    output = output * scale
    return output if output.dtype == x.dtype else output.type_as(x)


def _gemma3_norms(layer):
    """A Gemma 3 decoder layer's six RMS norms, in the order its forward applies them."""
    attention = layer.self_attn
    return (layer.input_layernorm, attention.q_norm, attention.k_norm, layer.post_attention_layernorm,
            layer.pre_feedforward_layernorm, layer.post_feedforward_layernorm)


def gemma3_scales(layer):
    """``1.0 + weight.float()`` of each of ``_gemma3_norms(layer)``: what each norm multiplies by, the same tensor
    its forward computes on every call (computed once each time the lean layers are installed, so that weights
    changed between two generations are read)."""
    return tuple(1.0 + norm.weight.float() for norm in _gemma3_norms(layer))


def gemma3_layer(layer, hidden_states, position_embeddings=None, attention_mask=None, position_ids=None, cache=None,
                 norm_scales=None, **kwargs):
    """``Gemma3DecoderLayer.forward`` of ``layer`` (with its ``Gemma3Attention`` and ``Gemma3MLP``), operation for
    operation, each projection through its own ``forward``; the mask and rotary tables of the layer's type (sliding
    or global) come from the model, as they come to transformers' layer. ``norm_scales``: ``gemma3_scales(layer)``,
    computed here where not given (``lean_layers`` installs the forward with them)."""
    if cache is None:
        cache = kwargs.pop("past_key_values", None)
    attention = layer.self_attn
    kwargs = {"position_ids": position_ids, **kwargs}
    norms = _gemma3_norms(layer)
    scales = gemma3_scales(layer) if norm_scales is None else norm_scales

    def normed(i, x):  # the i-th of the layer's norms (``_gemma3_norms``' order)
        return _gemma3_norm(norms[i], x, scales[i])

    residual = hidden_states
    query, key, value = _projected(attention, normed(0, hidden_states))
    query, key = _rotated(normed(1, query), normed(2, key), position_embeddings)
    output = _attended(attention, query, key, value, attention_mask, cache, gemma3_eager, kwargs,
                       sliding_window=attention.sliding_window)
    hidden_states = residual + normed(3, attention.o_proj.forward(output))
    return hidden_states + normed(5, _mlp(layer.mlp, normed(4, hidden_states)))


# the decoder layer classes this module runs lean, each by the name of its forward here (looked up when installed)
LEAN_FORWARDS = {LlamaDecoderLayer: "llama_layer", Gemma3DecoderLayer: "gemma3_layer",
                 MistralDecoderLayer: "mistral_layer", Qwen2DecoderLayer: "qwen2_layer",
                 Qwen3DecoderLayer: "qwen3_layer"}


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
            second = base(input_ids=ids[:, 12:], position_ids=torch.arange(12, 17, device=model.device)[None],
                          cache=cache, use_cache=True).last_hidden_state
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

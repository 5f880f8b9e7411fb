"""Decoder layers' forwards as transformers' own operations in the same order, on the same tensors, without its
per-call plumbing (``nn.Module.__call__`` for every norm and projection, kwarg-renaming and kernel-hub wrappers,
the attention-function lookup): Llama's, Mistral's, Qwen2's, Qwen3's and Gemma 3's. Each projection runs its own
``forward``, so planned linear layers stay planned. Left out, as they change no value: casts of a tensor to its own
type, and Gemma 3's ``1.0 + weight.float()`` on every call of a norm (``gemma3_scales``, once per installation).
``lean_layers`` installs them where they give the model's own hidden states bit for bit."""

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward
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

from .attention import grouped_sdpa, groups_query_heads


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
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def _projected(attention, hidden_states, head_norms=False):
    """The attention's query, key and value, as its forward shapes them (batch, heads, positions, head size);
    with ``head_norms`` (Qwen3's), the query and key each through its own RMS norm over the head size first."""
    hidden_shape = (*hidden_states.shape[:-1], -1, attention.head_dim)
    query, key, value = (
        proj.forward(hidden_states).view(hidden_shape)
        for proj in (attention.q_proj, attention.k_proj, attention.v_proj)
    )
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
    if interface is sdpa_attention_forward and kwargs.get("softcap") is None and groups_query_heads(attention, query):
        output = grouped_sdpa(attention, query, key, value, attention_mask, attention.scaling)
    else:
        output, _ = interface(
            attention, query, key, value, attention_mask, dropout=0.0, scaling=attention.scaling, **extra, **kwargs
        )
    return output.reshape(*input_shape, -1).contiguous()


def _mlp(mlp, hidden_states):
    """``LlamaMLP``'s and ``Gemma3MLP``'s forward."""
    gated = mlp.act_fn(mlp.gate_proj.forward(hidden_states))
    return mlp.down_proj.forward(gated * mlp.up_proj.forward(hidden_states))


def _rope_layer(
    layer,
    hidden_states,
    eager,
    extra,
    attention_mask,
    position_ids,
    cache,
    use_cache,
    position_embeddings,
    kwargs,
    head_norms=False,
):
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


def llama_layer(
    layer,
    hidden_states,
    attention_mask=None,
    position_ids=None,
    cache=None,
    use_cache=False,
    position_embeddings=None,
    **kwargs,
):
    """``LlamaDecoderLayer.forward`` of ``layer`` (with its ``LlamaAttention`` and ``LlamaMLP``), operation for
    operation, each projection through its own ``forward``."""
    return _rope_layer(
        layer,
        hidden_states,
        eager_attention_forward,
        {},
        attention_mask,
        position_ids,
        cache,
        use_cache,
        position_embeddings,
        kwargs,
    )


def mistral_layer(
    layer,
    hidden_states,
    attention_mask=None,
    position_ids=None,
    cache=None,
    use_cache=False,
    position_embeddings=None,
    **kwargs,
):
    """``MistralDecoderLayer.forward``: Llama's, its attention given the config's sliding window."""
    extra = {"sliding_window": getattr(layer.self_attn.config, "sliding_window", None)}
    return _rope_layer(
        layer,
        hidden_states,
        mistral_eager,
        extra,
        attention_mask,
        position_ids,
        cache,
        use_cache,
        position_embeddings,
        kwargs,
    )


def qwen2_layer(
    layer,
    hidden_states,
    attention_mask=None,
    position_ids=None,
    cache=None,
    use_cache=False,
    position_embeddings=None,
    **kwargs,
):
    """``Qwen2DecoderLayer.forward``: Llama's (its query, key and value projections with biases, which their
    own ``forward`` adds), its attention given the layer's sliding window (None on a full-attention layer)."""
    extra = {"sliding_window": layer.self_attn.sliding_window}
    return _rope_layer(
        layer,
        hidden_states,
        qwen2_eager,
        extra,
        attention_mask,
        position_ids,
        cache,
        use_cache,
        position_embeddings,
        kwargs,
    )


def qwen3_layer(
    layer,
    hidden_states,
    attention_mask=None,
    position_ids=None,
    cache=None,
    use_cache=False,
    position_embeddings=None,
    **kwargs,
):
    """``Qwen3DecoderLayer.forward``: Qwen2's, with the query and key normed over each head before the rotary
    embedding."""
    extra = {"sliding_window": layer.self_attn.sliding_window}
    return _rope_layer(
        layer,
        hidden_states,
        qwen3_eager,
        extra,
        attention_mask,
        position_ids,
        cache,
        use_cache,
        position_embeddings,
        kwargs,
        head_norms=True,
    )


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
    return (
        layer.input_layernorm,
        attention.q_norm,
        attention.k_norm,
        layer.post_attention_layernorm,
        layer.pre_feedforward_layernorm,
        layer.post_feedforward_layernorm,
    )


def gemma3_scales(layer):
    """``1.0 + weight.float()`` of each of ``_gemma3_norms(layer)``: what each norm multiplies by, the same tensor
    its forward computes on every call (computed once each time the lean layers are installed, so that weights
    changed between two generations are read)."""
    return tuple(1.0 + norm.weight.float() for norm in _gemma3_norms(layer))


def gemma3_layer(
    layer,
    hidden_states,
    position_embeddings=None,
    attention_mask=None,
    position_ids=None,
    cache=None,
    norm_scales=None,
    **kwargs,
):
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
    output = _attended(
        attention,
        query,
        key,
        value,
        attention_mask,
        cache,
        gemma3_eager,
        kwargs,
        sliding_window=attention.sliding_window,
    )
    hidden_states = residual + normed(3, attention.o_proj.forward(output))
    return hidden_states + normed(5, _mlp(layer.mlp, normed(4, hidden_states)))


# the decoder layer classes this module runs lean, each by the name of its forward here (looked up when installed)
LEAN_FORWARDS = {
    LlamaDecoderLayer: "llama_layer",
    Gemma3DecoderLayer: "gemma3_layer",
    MistralDecoderLayer: "mistral_layer",
    Qwen2DecoderLayer: "qwen2_layer",
    Qwen3DecoderLayer: "qwen3_layer",
}

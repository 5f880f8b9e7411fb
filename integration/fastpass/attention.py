"""Grouped-query attention in the verification pass without copying the KV cache per head.

A pass over more than one token needs a mask, and with a mask transformers' SDPA attention expands the key/value
heads of a grouped-query model (``repeat_kv``) to one copy per query head, on every layer and every pass: copying
that grows with the context. On the CPU, torch's SDPA (2.5+) takes the grouped heads as they are (``enable_gqa``)
with a mask too, the same arithmetic bit for bit. The lean decoder layers call ``grouped_sdpa`` where
``groups_query_heads`` holds; nothing is set in the process or changed in transformers.
"""

import torch
from transformers.utils import is_torch_greater_or_equal

MAX_HEAD_DIM = 256


def groups_query_heads(attention, query):
    """Whether an attention module's call on ``query`` should take its grouped key/value heads as they are: more
    than one query position (one is packed by transformers without copying), fewer key/value heads than query
    heads, on the CPU, a head size up to ``MAX_HEAD_DIM``, and torch 2.5 or later."""
    return (
        query.shape[2] > 1
        and getattr(attention, "num_key_value_groups", 1) > 1
        and query.device.type == "cpu"
        and query.shape[-1] <= MAX_HEAD_DIM
        and is_torch_greater_or_equal("2.5")
    )


def grouped_sdpa(attention, query, key, value, attention_mask, scaling):
    """The attention output of transformers' ``sdpa_attention_forward`` for grouped heads taken as they are
    (its ``enable_gqa`` branch), as ``[batch, positions, heads, head_dim]``."""
    q_length = query.shape[2]
    is_causal = q_length > 1 and attention_mask is None and getattr(attention, "is_causal", True)
    if is_causal and key.shape[2] > q_length:  # an empty cache's prefill: only the first positions are attended
        key, value = key[:, :, :q_length], value[:, :, :q_length]
    output = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=0.0, scale=scaling, is_causal=is_causal, enable_gqa=True
    )
    return output.transpose(1, 2).contiguous()

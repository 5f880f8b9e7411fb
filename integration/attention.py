"""Grouped-query attention in the verification pass without copying the KV cache per head.

A pass over more than one token needs a causal mask, and with a mask transformers' SDPA attention expands the
key/value heads of a grouped-query model (``repeat_kv``) to one copy per query head, on every layer and every
pass: O(context) copying that a one-token step does not pay. On CPU, torch's SDPA (2.5+) takes the grouped heads
as they are (``enable_gqa``) with a mask too; transformers uses it when ``TRANSFORMERS_SDPA_FORCE_GQA`` is
``1``, which ``grouped_query_sdpa`` sets for the duration of a generation. The two are the same arithmetic.
Measured on SmolLM2-135M (9 query heads, 3 key/value heads; 2-core CPU, with ``kv_cache.ReservedLayer``): a
pass over 2 / 4 / 9 tokens after 2,048 cached positions takes 43 / 56 / 92 ms instead of 58 / 70 / 124 ms,
after 768 positions 36 / 47 / 81 ms instead of 40 / 50 / 85 ms.

On CUDA transformers' own choice stands: there a masked grouped call falls back to the math kernel.
"""

import contextlib
import os

from transformers.utils import is_torch_greater_or_equal

FORCE_GQA = "TRANSFORMERS_SDPA_FORCE_GQA"


def groups_query_heads(model):
    """Whether ``model`` runs SDPA attention on CPU with fewer key/value heads than query heads (head size up
    to 256), so that ``grouped_query_sdpa`` applies."""
    config = model.config.get_text_config()
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None)
    if not isinstance(heads, int) or not isinstance(kv_heads, int) or not 0 < kv_heads < heads:
        return False
    head_dim = getattr(config, "head_dim", None) or getattr(config, "hidden_size", 0) // heads
    return (model.device.type == "cpu" and getattr(config, "_attn_implementation", None) == "sdpa"
            and head_dim <= 256 and is_torch_greater_or_equal("2.5"))


@contextlib.contextmanager
def grouped_query_sdpa(model):
    """Within the block, ``model``'s masked SDPA calls take grouped key/value heads without expanding them
    (when ``groups_query_heads``). Sets a process environment variable and restores it on exit."""
    if not groups_query_heads(model):
        yield
        return
    before = os.environ.get(FORCE_GQA)
    os.environ[FORCE_GQA] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(FORCE_GQA, None)
        else:
            os.environ[FORCE_GQA] = before

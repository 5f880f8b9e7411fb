"""The loop's KV cache: reserved full-attention layers against transformers' DynamicLayer, and grouped-query
SDPA switched on only for the generation."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_models import VOCAB, tiny_model
from transformers.cache_utils import DynamicCache, DynamicLayer, DynamicSlidingWindowLayer
from transformers.utils import is_torch_greater_or_equal

from draftless.integration import kv_cache
from draftless.integration.fastpass import attention
from draftless.integration.fastpass.lean_layers import lean_layers

# a step: append q positions, or crop r of them (r <= 0 after the sign; cropping more than held empties it)
STEPS = st.lists(
    st.one_of(st.tuples(st.just("update"), st.integers(1, 9)), st.tuples(st.just("crop"), st.integers(0, 6))),
    min_size=1,
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(steps=STEPS, limit=st.one_of(st.none(), st.integers(1, 40)), seed=st.integers(0, 2**16))
def test_reserved_layer_holds_what_a_dynamic_layer_holds(steps, limit, seed):
    g = torch.Generator().manual_seed(seed)
    reserved, plain = kv_cache.ReservedLayer(limit=limit), DynamicLayer()
    most = 0
    for op, n in steps:
        if op == "update":
            k, v = torch.randn(2, 3, n, 4, generator=g), torch.randn(2, 3, n, 5, generator=g)
            got, want = reserved.update(k, v), plain.update(k, v)
            assert all(torch.equal(a, b) for a, b in zip(got, want))
        else:
            n = min(n, plain.get_seq_length())  # DynamicLayer's crop keeps nothing sensible past its length
            reserved.crop(-n)
            plain.crop(-n)
        assert reserved.get_seq_length() == plain.get_seq_length()
        most = max(most, plain.get_seq_length())
        if plain.is_initialized:
            assert torch.equal(reserved.keys, plain.keys) and torch.equal(reserved.values, plain.values)
        if reserved._keys is not None:  # room: within the limit while it held, else at most twice the most held
            assert reserved._keys.shape[-2] <= (limit if limit is not None and most <= limit else 2 * most)


def test_reserved_layer_appends_without_copying_what_it_holds():
    layer = kv_cache.ReservedLayer(limit=64)
    layer.update(torch.zeros(1, 2, 10, 4), torch.zeros(1, 2, 10, 4))
    buffer = layer._keys
    for _ in range(5):  # room was set aside at the first update (twice its length, within the limit)
        layer.update(torch.ones(1, 2, 2, 4), torch.ones(1, 2, 2, 4))
        layer.crop(-1)
    assert layer._keys is buffer and layer.get_seq_length() == 15
    assert layer.keys.data_ptr() == buffer.data_ptr()


def test_reserved_layer_rejects_a_positive_crop_and_resets():
    layer = kv_cache.ReservedLayer()
    layer.update(torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 3, 2))
    with pytest.raises(ValueError, match="negative"):
        layer.crop(2)
    layer.reset()
    assert layer.get_seq_length() == 0 and not layer.is_initialized
    layer.update(torch.ones(1, 1, 2, 2), torch.ones(1, 1, 2, 2))
    assert layer.get_seq_length() == 2 and torch.equal(layer.keys, torch.ones(1, 1, 2, 2))


def test_reserved_layer_batch_operations_match_dynamic_layer():
    k, v = torch.randn(3, 2, 5, 4), torch.randn(3, 2, 5, 4)
    for op, arg in (
        ("batch_select_indices", torch.tensor([2, 0])),
        ("batch_repeat_interleave", 2),
        ("reorder_cache", torch.tensor([1, 2, 0])),
    ):
        reserved, plain = kv_cache.ReservedLayer(), DynamicLayer()
        reserved.update(k, v)
        plain.update(k, v)
        getattr(reserved, op)(arg)
        getattr(plain, op)(arg)
        assert torch.equal(reserved.keys, plain.keys) and torch.equal(reserved.values, plain.values)
        extra = torch.randn(plain.keys.shape[0], 2, 1, 4)
        assert torch.equal(reserved.update(extra, extra)[0], plain.update(extra, extra)[0])


@pytest.mark.parametrize("kind", ["llama", "gemma3", "qwen2", "gpt2"])
def test_new_cache_reserves_full_attention_layers_only(kind):
    model = tiny_model(kind)
    cache = kv_cache.new_cache(model, 50)
    kv_cache.check_rollback(cache, 50)
    types = {type(layer) for layer in cache.layers}
    assert kv_cache.ReservedLayer in types and DynamicLayer not in types
    assert (DynamicSlidingWindowLayer in types) == (kind == "gemma3")
    with pytest.raises(ValueError, match="max_positions"):
        kv_cache.new_cache(model, 0)


@pytest.mark.parametrize("kind", ["llama", "gemma3", "gpt2"])
def test_logits_with_the_reserved_cache_equal_the_dynamic_cache(kind):
    """Prefill, then passes of several tokens with rollbacks in between, as the loop runs them."""
    model = tiny_model(kind)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(2, VOCAB, (1, 30), generator=g)
    caches = [kv_cache.new_cache(model, 60), DynamicCache(config=model.config)]
    outs = [[], []]
    with torch.no_grad():
        for cache, out in zip(caches, outs):
            out.append(model(input_ids=ids[:, :12], cache=cache, use_cache=True).logits)
            kv_cache.start_recording(cache)
            pos = 12
            for q, rejected in ((4, 3), (1, 0), (6, 2), (3, 3), (5, 0)):
                positions = torch.arange(pos, pos + q)[None]
                with lean_layers(model):  # grouped key/value heads attended as they are
                    out.append(
                        model(
                            input_ids=ids[:, pos : pos + q], position_ids=positions, cache=cache, use_cache=True
                        ).logits
                    )
                kv_cache.rollback(cache, rejected)
                pos += q - rejected
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("q_length", [2, 7])
@pytest.mark.parametrize("masked", [True, False])
def test_grouped_sdpa_equals_transformers_expanded_heads_bit_for_bit(q_length, masked):
    """The grouped heads attended as they are give transformers' own SDPA output (heads copied per query head)
    exactly, with a mask or without; one query position is left to transformers, which packs it."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    model = tiny_model("llama")  # 4 query heads, 2 key/value heads, SDPA on CPU
    layer = model.model.layers[0].self_attn
    g = torch.Generator().manual_seed(3)
    query = torch.randn(1, 4, q_length, 8, generator=g)
    key, value = torch.randn(2, 1, 2, 20, 8, generator=g)
    mask = None
    if masked:
        mask = torch.zeros(1, 1, q_length, 20)
        mask[..., -q_length:] = torch.triu(torch.full((q_length, q_length), -float("inf")), 1)
    assert attention.groups_query_heads(layer, query) == is_torch_greater_or_equal("2.5")
    assert not attention.groups_query_heads(layer, query[:, :, :1])
    ours = attention.grouped_sdpa(layer, query, key, value, mask, layer.scaling)
    theirs, _ = sdpa_attention_forward(layer, query, key, value, mask, scaling=layer.scaling)
    assert torch.equal(ours, theirs)


def test_grouped_attention_leaves_the_process_and_other_models_alone():
    import os

    before = dict(os.environ)
    model = tiny_model("llama")
    with lean_layers(model):
        model(input_ids=torch.tensor([[3, 4, 5, 6]]))
    assert dict(os.environ) == before  # nothing set in the process, during the call or after
    gpt2 = tiny_model("gpt2")  # one key/value head per query head: nothing to group
    assert not attention.groups_query_heads(gpt2.transformer.h[0].attn, torch.zeros(1, 4, 2, 8))

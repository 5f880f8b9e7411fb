"""The loop's KV cache: reserved full-attention layers against transformers' DynamicLayer, and grouped-query
SDPA switched on only for the generation."""

import json
import os

import pytest
import torch
from hypothesis import given, settings, strategies as st
from transformers.cache_utils import DynamicCache, DynamicLayer, DynamicSlidingWindowLayer
from transformers.utils import is_torch_greater_or_equal

from benchmarks import pass_cost
from draftless.integration import attention, kv_cache

from tiny_models import VOCAB, tiny_model, tiny_tokenizer

# a step: append q positions, or crop r of them (r <= 0 after the sign; cropping more than held empties it)
STEPS = st.lists(st.one_of(st.tuples(st.just("update"), st.integers(1, 9)),
                           st.tuples(st.just("crop"), st.integers(0, 6))), min_size=1, max_size=25)


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
    for op, arg in (("batch_select_indices", torch.tensor([2, 0])), ("batch_repeat_interleave", 2),
                    ("reorder_cache", torch.tensor([1, 2, 0]))):
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
                with attention.grouped_query_sdpa(model):
                    out.append(model(input_ids=ids[:, pos:pos + q], position_ids=positions, cache=cache,
                                     use_cache=True).logits)
                kv_cache.rollback(cache, rejected)
                pos += q - rejected
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("before", [None, "0"])
def test_grouped_query_sdpa_is_set_only_inside_the_block(monkeypatch, before):
    model = tiny_model("llama")  # 4 query heads, 2 key/value heads, SDPA on CPU
    if before is None:
        monkeypatch.delenv(attention.FORCE_GQA, raising=False)
    else:
        monkeypatch.setenv(attention.FORCE_GQA, before)
    assert attention.groups_query_heads(model) == is_torch_greater_or_equal("2.5")
    with pytest.raises(RuntimeError):
        with attention.grouped_query_sdpa(model):
            assert os.environ.get(attention.FORCE_GQA) == ("1" if attention.groups_query_heads(model) else before)
            raise RuntimeError("the variable is restored on the way out")
    assert os.environ.get(attention.FORCE_GQA) == before


def test_grouped_query_sdpa_leaves_other_models_alone(monkeypatch):
    monkeypatch.delenv(attention.FORCE_GQA, raising=False)
    gpt2 = tiny_model("gpt2")  # one key/value head per query head
    assert not attention.groups_query_heads(gpt2)
    eager = tiny_model("llama")
    eager.config._attn_implementation = "eager"
    assert not attention.groups_query_heads(eager)
    with attention.grouped_query_sdpa(gpt2):
        assert attention.FORCE_GQA not in os.environ


def test_pass_cost_tool_times_both_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTLESS_CACHE", str(tmp_path / "cache"))
    model = tiny_model("llama")
    rows = pass_cost.measure(model, contexts=[20, 40], ks=[0, 3], repeats=1)
    assert [(r["context"], r["k"]) for r in rows] == [(20, 0), (20, 3), (40, 0), (40, 3)]
    assert all(r["transformers_ms"] > 0 and r["draftless_ms"] > 0 for r in rows)
    assert pass_cost.markdown(rows).count("\n") == 2 + len(rows)
    model.save_pretrained(tmp_path / "tiny")
    tiny_tokenizer().save_pretrained(tmp_path / "tiny")
    out = tmp_path / "p.json"
    pass_cost.main(["--model", str(tmp_path / "tiny"), "--contexts", "16", "--ks", "0,2", "--json", str(out)])
    assert [r["k"] for r in json.loads(out.read_text())["rows"]] == [0, 2]
    for bad in (["--contexts", "a,b"], ["--ks", "-1"], ["--contexts", "0"]):
        with pytest.raises(SystemExit):
            pass_cost.main(["--model", str(tmp_path / "tiny"), *bad])

"""A caller's cache from an earlier turn (multi-turn chat reusing its KV cache, as transformers documents it):
``generate`` computes only the prompt tokens after the cached ones, and so does draftless, token for token."""

import copy

import pytest
import torch
from tiny_models import SLIDING_WINDOW, repetitive_prompt, tiny_model
from transformers import StaticCache
from transformers.cache_utils import DynamicLayer

from draftless.integration import SpeculativeGenerator, UnsupportedGeneration, disable, enable, generate, kv_cache

NEW = 30


def turns(model):
    """The first turn's output and cache (``generate``'s own), and the second turn's prompt: that output and a
    new user message. The cache holds every position but the last generated token's."""
    first = model.generate(
        repetitive_prompt(40), max_new_tokens=10, do_sample=False, eos_token_id=None, return_dict_in_generate=True
    )
    prompt = torch.cat([first.sequences, repetitive_prompt(12, seed=3)], dim=1)
    return first.past_key_values, prompt


@pytest.mark.parametrize("kind", ["llama", "gemma3", "gpt2"])  # gemma3: the cache is past its sliding window
def test_a_cache_from_an_earlier_turn_is_continued_exactly(kind):
    model = tiny_model(kind)
    cache, prompt = turns(model)
    held = cache.get_seq_length()
    assert held > 4 * SLIDING_WINDOW
    ours, theirs = copy.deepcopy(cache), copy.deepcopy(cache)
    ref = model.generate(prompt, cache=theirs, max_new_tokens=NEW, do_sample=False, eos_token_id=None)
    assert torch.equal(ref, model.generate(prompt, max_new_tokens=NEW, do_sample=False, eos_token_id=None))
    gen = SpeculativeGenerator(model)
    out = gen.generate(prompt, cache=ours, max_new_tokens=NEW, eos_token_id=None)
    assert torch.equal(out, ref)
    assert gen.last_stats.accepted > 0  # drafts were verified on top of the caller's positions
    assert ours.get_seq_length() == theirs.get_seq_length() == prompt.shape[1] + NEW - 1


def test_the_cached_positions_are_used_not_computed_again():
    """Both trust the cache for the tokens it covers: with a prompt whose cached part was changed afterwards,
    the cached keys and values, not the changed tokens, decide the answer (as in ``generate``)."""
    model = tiny_model("llama")
    cache, prompt = turns(model)
    changed = prompt.clone()
    changed[0, :10] = 2 + (changed[0, :10] + 5) % 90
    ref = model.generate(changed, cache=copy.deepcopy(cache), max_new_tokens=NEW, do_sample=False, eos_token_id=None)
    fresh = model.generate(changed, max_new_tokens=NEW, do_sample=False, eos_token_id=None)
    assert not torch.equal(ref, fresh)
    assert torch.equal(generate(model, changed, cache=copy.deepcopy(cache), max_new_tokens=NEW, eos_token_id=None), ref)


def test_draftless_turns_chain_through_the_cache_it_returns():
    model = tiny_model("gemma3")
    cache, prompt = turns(model)
    ref = model.generate(prompt, cache=copy.deepcopy(cache), max_new_tokens=NEW, do_sample=False, eos_token_id=None)
    first = generate(model, repetitive_prompt(40), max_new_tokens=10, eos_token_id=None, return_dict_in_generate=True)
    assert torch.equal(first.sequences, prompt[:, :50])
    assert first.past_key_values.get_seq_length() == cache.get_seq_length()
    out = generate(model, prompt, past_key_values=first.past_key_values, max_new_tokens=NEW, eos_token_id=None)
    assert torch.equal(out, ref)


def test_a_continued_cache_appends_in_place_and_generate_can_go_on_with_it():
    """The caller's full-attention layers become ``ReservedLayer``s holding the same positions (no whole-layer
    copy a pass); the same ``Cache`` object then serves transformers' own ``generate`` for the next turn."""
    model = tiny_model("gemma3")
    cache, prompt = turns(model)
    assert any(type(layer) is DynamicLayer for layer in cache.layers)
    out = generate(model, prompt, cache=cache, max_new_tokens=NEW, eos_token_id=None)
    assert not any(type(layer) is DynamicLayer for layer in cache.layers)
    assert any(isinstance(layer, kv_cache.ReservedLayer) for layer in cache.layers)
    third = torch.cat([out, repetitive_prompt(9, seed=5)], dim=1)
    ref = model.generate(third, max_new_tokens=NEW, do_sample=False, eos_token_id=None)
    assert torch.equal(model.generate(third, cache=cache, max_new_tokens=NEW, do_sample=False, eos_token_id=None), ref)


def test_a_static_cache_from_an_earlier_turn_is_continued_exactly():
    model = tiny_model("llama")
    prompt = repetitive_prompt(40)
    cache = StaticCache(config=model.config, max_cache_len=200)
    first = generate(model, prompt, cache=cache, max_new_tokens=10, eos_token_id=None)
    follow = torch.cat([first, repetitive_prompt(12, seed=3)], dim=1)
    out = generate(model, follow, cache=cache, max_new_tokens=NEW, eos_token_id=None)
    assert torch.equal(out, model.generate(follow, max_new_tokens=NEW, do_sample=False, eos_token_id=None))


def test_a_cache_with_nothing_left_to_compute_is_unsupported_and_enable_hands_it_on():
    model = tiny_model("llama")
    cache, prompt = turns(model)
    held = cache.get_seq_length()
    kept = copy.deepcopy(cache)
    with pytest.raises(UnsupportedGeneration, match=f"already holds {held} positions"):
        generate(model, prompt[:, :held], cache=kept, max_new_tokens=5)
    assert [type(layer) for layer in kept.layers] == [type(layer) for layer in cache.layers]  # left as it was
    # transformers' other form: input_ids only after the cache, the attention mask over the whole sequence
    tail, mask = prompt[:, held:], torch.ones_like(prompt)
    with pytest.raises(UnsupportedGeneration, match="only the tokens after a cache"):
        generate(model, tail, attention_mask=mask, cache=copy.deepcopy(cache), max_new_tokens=5)
    ref = model.generate(tail, attention_mask=mask, cache=copy.deepcopy(cache), max_new_tokens=5, do_sample=False)
    enable(model)
    try:
        out = model.generate(tail, attention_mask=mask, cache=copy.deepcopy(cache), max_new_tokens=5, do_sample=False)
    finally:
        disable(model)
    assert torch.equal(out, ref)


def test_inputs_embeds_alone_is_unsupported_and_enable_hands_it_on():
    model = tiny_model("llama")
    embeds = model.get_input_embeddings()(repetitive_prompt(20))
    with pytest.raises(UnsupportedGeneration, match="inputs_embeds alone"):
        generate(model, inputs_embeds=embeds, max_new_tokens=5)
    with pytest.raises(UnsupportedGeneration, match="no prompt"):
        generate(model, max_new_tokens=5)
    ref = model.generate(inputs_embeds=embeds, max_new_tokens=5, do_sample=False)
    enable(model)
    try:
        assert torch.equal(model.generate(inputs_embeds=embeds, max_new_tokens=5, do_sample=False), ref)
    finally:
        disable(model)

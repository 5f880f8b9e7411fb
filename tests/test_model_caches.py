"""Caches: a cache the caller passes (static, static sliding windows, layers that cannot roll back) and models
whose own cache draftless cannot or need not refuse (recurrent states, encoder-decoders, MPT's cache off)."""

import pytest
import torch
from tiny_models import VOCAB, repetitive_prompt, tiny_model
from transformers import GenerationConfig, StaticCache

from draftless.integration import SpeculativeGenerator, UnsupportedGeneration, enable, generate, is_enabled


def vanilla(model, ids, **kwargs):
    return model.generate(ids, do_sample=False, **kwargs)


def test_static_cache_passed_by_the_caller():
    model = tiny_model("llama")
    ids = repetitive_prompt(20)
    ref = vanilla(model, ids, max_new_tokens=30, eos_token_id=None)
    cache = StaticCache(config=model.config, max_cache_len=50)  # exactly prompt + new tokens, as generate needs
    gen = SpeculativeGenerator(model)
    assert torch.equal(gen.generate(ids, max_new_tokens=30, eos_token_id=None, cache=cache), ref)
    assert gen.last_stats.accepted > 0
    with pytest.raises(ValueError, match="room for 40 positions"):
        gen.generate(ids, max_new_tokens=30, cache=StaticCache(config=model.config, max_cache_len=40))


def test_static_sliding_window_cache_that_would_wrap_is_refused_up_front():
    model = tiny_model("gemma3")
    cache = StaticCache(config=model.config, max_cache_len=128)
    with pytest.raises(ValueError, match="sliding window"):
        generate(model, repetitive_prompt(20), max_new_tokens=30, cache=cache)


def test_cache_that_cannot_roll_back_is_refused():
    from transformers.cache_utils import Cache, CacheLayerMixin

    class OpaqueLayer(CacheLayerMixin):
        def lazy_initialization(self, *a):
            pass

        def update(self, *a, **k):
            raise AssertionError("generation must not start")

        def get_seq_length(self):
            return 0

        def get_mask_sizes(self, query_length):
            return query_length, 0

        def get_max_length(self):
            return -1

    cache = Cache(layers=[OpaqueLayer(), OpaqueLayer()])
    with pytest.raises(ValueError, match="cannot be rolled back"):
        generate(tiny_model("llama"), repetitive_prompt(10), max_new_tokens=5, cache=cache)


@pytest.mark.parametrize("kind", ["mamba", "recurrent_gemma"])
def test_a_model_with_a_recurrent_state_is_refused_by_name(kind):
    model = tiny_model(kind)
    name = type(model).__name__
    with pytest.raises(UnsupportedGeneration, match=f"{name} keeps a recurrent or linear-attention state"):
        SpeculativeGenerator(model)  # before any calibration runs it
    with pytest.raises(UnsupportedGeneration, match=name):
        enable(model)  # not a silent fall-back on every call
    assert not is_enabled(model)


def test_an_encoder_decoder_model_is_refused_by_name():
    from transformers import T5Config, T5ForConditionalGeneration

    model = T5ForConditionalGeneration(
        T5Config(vocab_size=VOCAB, d_model=32, d_ff=64, num_layers=1, num_heads=4, d_kv=8, decoder_start_token_id=0)
    )
    with pytest.raises(UnsupportedGeneration, match="T5ForConditionalGeneration is an encoder-decoder"):
        SpeculativeGenerator(model)


def test_a_model_whose_config_turns_the_cache_off_is_served_exactly():
    model = tiny_model("mpt")
    assert model.generation_config.use_cache is False
    ids = repetitive_prompt(25, seed=3)
    ref = vanilla(model, ids, max_new_tokens=40, eos_token_id=None)
    gen = SpeculativeGenerator(model)
    assert torch.equal(gen.generate(ids, max_new_tokens=40, eos_token_id=None), ref)
    assert gen.last_stats.accepted > 0
    # the model's own config passed back in is still its default; the caller's own choice is refused
    assert torch.equal(
        gen.generate(ids, generation_config=model.generation_config, max_new_tokens=40, eos_token_id=None), ref
    )
    with pytest.raises(UnsupportedGeneration, match="use_cache=False"):
        gen.generate(ids, max_new_tokens=5, use_cache=False)
    with pytest.raises(UnsupportedGeneration, match="use_cache=False"):
        gen.generate(ids, generation_config=GenerationConfig(use_cache=False, max_new_tokens=5))

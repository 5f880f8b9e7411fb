"""Lean decoder layers (``lean_layers``): transformers' operations in their order, so the logits bit for bit the
model's own; installed only where that was checked, and never over hooks, training mode or another forward."""

import logging

import pytest
import torch
from proposers import OracleProposer
from tiny_models import repetitive_prompt, tiny_model

from draftless.integration import SpeculativeGenerator, calibration, kv_cache, store
from draftless.integration.fastpass import lean_layers
from draftless.integration.fastpass.lean_layers import (
    gemma3_layer,
    lean_candidates,
    llama_layer,
    mistral_layer,
    qwen2_layer,
    qwen3_layer,
    verified,
)
from draftless.lookup import NullProposer


@torch.no_grad()
def logits_of_passes(model, ids, cuts):
    """Logits of a prefill up to ``cuts[0]`` and of a pass over each later span, through the loop's cache."""
    cache = kv_cache.new_cache(model, ids.shape[1] + 1)
    out = [model(input_ids=ids[:, : cuts[0]], cache=cache, use_cache=True, logits_to_keep=1).logits]
    for start, stop in zip(cuts, cuts[1:]):
        out.append(
            model(
                input_ids=ids[:, start:stop],
                position_ids=torch.arange(start, stop)[None],
                cache=cache,
                use_cache=True,
                logits_to_keep=stop - start,
            ).logits
        )
    return out


@pytest.mark.parametrize("kind", ["llama", "gemma3", "mistral", "qwen2", "qwen3"])
def test_lean_layers_give_the_models_own_logits_bit_for_bit(cache_dir, kind):
    model = tiny_model(kind)  # gemma3's, mistral's and qwen3's sliding windows are shorter than the prompt
    with torch.no_grad():  # qwen2's query, key and value biases, initialised to zero: made to count
        for module in model.modules():
            if isinstance(module, torch.nn.Linear) and module.bias is not None:
                module.bias.normal_(0, 0.5, generator=torch.Generator().manual_seed(1))
    assert (kind == "qwen2") == any(
        getattr(m, "bias", None) is not None for m in model.modules() if isinstance(m, torch.nn.Linear)
    )
    ids = repetitive_prompt(40, seed=3)
    cuts = [20, 21, 24, 32, 40]  # passes of 1, 3, 8 and 8 tokens after a prefill
    own = logits_of_passes(model, ids, cuts)
    assert verified(model) and len(lean_candidates(model)) == model.config.num_hidden_layers
    with lean_layers.lean_layers(model):
        assert all("forward" in layer.__dict__ for layer in model.model.layers)
        lean = logits_of_passes(model, ids, cuts)
    assert not any("forward" in layer.__dict__ for layer in model.model.layers)  # taken off on the way out
    assert all(torch.equal(a, b) for a, b in zip(own, lean))


def test_llama_with_biases_and_a_gelu_gives_its_own_logits_bit_for_bit(cache_dir):
    # Llama's config may put biases on every projection and another activation in its MLP: the projections' and
    # the activation's own forwards compute them, as in the model's layers
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        attention_bias=True,
        mlp_bias=True,
        hidden_act="gelu_pytorch_tanh",
        bos_token_id=0,
        eos_token_id=1,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear) and module.bias is not None:
                module.bias.normal_(0, 0.5, generator=torch.Generator().manual_seed(2))
    ids, cuts = repetitive_prompt(30, seed=4), [12, 13, 17, 30]
    own = logits_of_passes(model, ids, cuts)
    assert verified(model)
    with lean_layers.lean_layers(model):
        lean = logits_of_passes(model, ids, cuts)
    assert all(torch.equal(a, b) for a, b in zip(own, lean))


def test_gemma3_norm_scales_follow_weights_changed_between_two_generations(cache_dir):
    # each norm's 1 + weight is computed when the lean layers are installed, not once for the model's life
    model = tiny_model("gemma3")
    ids, cuts = repetitive_prompt(30, seed=4), [12, 13, 17, 30]
    assert verified(model)
    with lean_layers.lean_layers(model):
        before = logits_of_passes(model, ids, cuts)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.post_feedforward_layernorm.weight.add_(0.5)
            layer.self_attn.q_norm.weight.mul_(-1.0)
    own = logits_of_passes(model, ids, cuts)
    with lean_layers.lean_layers(model):
        lean = logits_of_passes(model, ids, cuts)
    assert not torch.equal(before[-1], own[-1])
    assert all(torch.equal(a, b) for a, b in zip(own, lean))


@pytest.mark.parametrize(
    "kind, forward",
    [
        ("llama", llama_layer),
        ("gemma3", gemma3_layer),
        ("mistral", mistral_layer),
        ("qwen2", qwen2_layer),
        ("qwen3", qwen3_layer),
    ],
)
@pytest.mark.parametrize("proposer", [NullProposer, "oracle"])
def test_generation_runs_lean_layers_and_equals_generate(cache_dir, monkeypatch, proposer, kind, forward):
    model = tiny_model(kind)
    prompt = repetitive_prompt(24, seed=5)
    want = model.generate(prompt, max_new_tokens=30, do_sample=False, eos_token_id=None)
    calls = []
    monkeypatch.setattr(lean_layers, forward.__name__, lambda *a, **k: calls.append(1) or forward(*a, **k))
    drafts = NullProposer() if proposer is NullProposer else OracleProposer(want[0].tolist(), length=6)
    got = SpeculativeGenerator(model, proposer=drafts).generate(prompt, max_new_tokens=30, eos_token_id=None)
    assert torch.equal(got, want) and calls  # the loop's passes ran the lean layers


@pytest.mark.parametrize("kind", ["gpt2", "mpt"])
def test_other_families_keep_their_own_layers(cache_dir, kind):
    model = tiny_model(kind)
    assert lean_candidates(model) == [] and not verified(model)
    with lean_layers.lean_layers(model):
        assert not any("forward" in m.__dict__ for m in model.modules() if not isinstance(m, torch.nn.Linear))


def test_hooks_training_and_a_replaced_forward_keep_the_models_layers(cache_dir):
    model = tiny_model("llama")
    handle = model.model.layers[1].mlp.register_forward_hook(lambda *args: None)
    assert lean_candidates(model) == []
    handle.remove()
    model.train()
    assert lean_candidates(model) == []
    model.eval()
    model.model.layers[0].input_layernorm.forward = lambda x: x  # someone else's forward on a part
    assert lean_candidates(model) == []
    del model.model.layers[0].input_layernorm.forward
    assert len(lean_candidates(model)) == model.config.num_hidden_layers


def test_layers_that_differ_from_the_models_are_not_used(cache_dir, monkeypatch, caplog):
    model = tiny_model("llama")
    from draftless.integration.fastpass import lean_forwards

    real_norm = lean_forwards._norm
    monkeypatch.setattr(lean_forwards, "_norm", lambda norm, x: real_norm(norm, x) * (1 + 2**-20))  # one ulp off
    with caplog.at_level(logging.INFO, logger="draftless.integration.fastpass.lean_layers"):
        assert not verified(model)
    assert "differ" in caplog.text
    with lean_layers.lean_layers(model):
        assert not any("forward" in layer.__dict__ for layer in model.model.layers)


def test_a_check_that_cannot_run_leaves_the_models_layers(cache_dir, monkeypatch):
    model = tiny_model("llama")
    monkeypatch.setattr(lean_layers, "_states_both_ways", lambda *a: 1 / 0)
    assert not verified(model)


def test_the_check_is_cached_with_the_calibration(cache_dir, monkeypatch):
    model = tiny_model("llama")
    checks = []
    real = lean_layers._same_states
    monkeypatch.setattr(lean_layers, "_same_states", lambda *a: checks.append(1) or real(*a))
    calibration.calibrate(model)
    assert calibration.calibrated(model) and checks == [1]
    assert any(lean_layers.LEAN_KIND in p.name for p in (cache_dir / "calibration").iterdir())
    store.forget_read_files()  # a new process: read from disk, not checked again
    assert verified(model) and checks == [1]
    for path in (cache_dir / "calibration").glob(f"*{lean_layers.LEAN_KIND}*"):
        path.unlink()
    store.forget_read_files()
    assert not calibration.calibrated(model)  # the loop would check: not yet calibrated

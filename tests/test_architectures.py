"""Greedy exactness across transformers' decoder-only families, on tiny random models built here: every
family's attention, positions and cache must give ``generate``'s output token for token once drafts are
accepted and rejected. (llama, gemma3, qwen2 and gpt2 are in ``test_greedy_exact``; models with a recurrent
state are refused in ``test_model_caches``.)"""

import pytest
import torch
import transformers
from proposers import PartlyWrongProposer
from tiny_models import VOCAB, repetitive_prompt

from draftless.integration import SpeculativeGenerator

COMMON = dict(vocab_size=VOCAB, bos_token_id=0, eos_token_id=1, pad_token_id=None)
SMALL = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
)
GPT_STYLE = dict(n_embd=32, n_layer=2, n_head=4)

# family: (config class, model class, config arguments past COMMON)
FAMILIES = {
    "mistral, sliding window": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=8, **SMALL)),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(num_local_experts=4, num_experts_per_tok=2, **SMALL)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=8, **SMALL)),
    "qwen3_moe": (
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        dict(head_dim=8, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, **SMALL),
    ),
    "phi": (
        "PhiConfig",
        "PhiForCausalLM",
        dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            max_position_embeddings=512,
        ),
    ),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", SMALL),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", dict(head_dim=8, **SMALL)),
    "gemma2, sliding window": ("Gemma2Config", "Gemma2ForCausalLM", dict(head_dim=8, sliding_window=8, **SMALL)),
    "gpt_neox": (
        "GPTNeoXConfig",
        "GPTNeoXForCausalLM",
        dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            max_position_embeddings=512,
        ),
    ),
    "gptj": ("GPTJConfig", "GPTJForCausalLM", dict(rotary_dim=4, n_positions=512, **GPT_STYLE)),
    "gpt_bigcode": ("GPTBigCodeConfig", "GPTBigCodeForCausalLM", dict(n_positions=512, **GPT_STYLE)),
    "codegen": ("CodeGenConfig", "CodeGenForCausalLM", dict(rotary_dim=4, n_positions=512, **GPT_STYLE)),
    "opt, learned positions": (
        "OPTConfig",
        "OPTForCausalLM",
        dict(
            hidden_size=32,
            ffn_dim=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            max_position_embeddings=512,
            word_embed_proj_dim=32,
        ),
    ),
    "xglm, sinusoidal positions": (
        "XGLMConfig",
        "XGLMForCausalLM",
        dict(d_model=32, ffn_dim=64, num_layers=2, attention_heads=4, max_position_embeddings=512),
    ),
    "bloom, alibi": ("BloomConfig", "BloomForCausalLM", dict(hidden_size=32, n_layer=2, n_head=4)),
    "mpt, alibi and no cache by default": ("MptConfig", "MptForCausalLM", dict(d_model=32, n_layers=2, n_heads=4)),
    "falcon": ("FalconConfig", "FalconForCausalLM", dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4)),
    "starcoder2, sliding window": ("Starcoder2Config", "Starcoder2ForCausalLM", dict(sliding_window=8, **SMALL)),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", SMALL),
    "cohere": ("CohereConfig", "CohereForCausalLM", SMALL),
    "cohere2, sliding window": ("Cohere2Config", "Cohere2ForCausalLM", dict(sliding_window=8, **SMALL)),
    "granite": ("GraniteConfig", "GraniteForCausalLM", SMALL),
    "stablelm": ("StableLmConfig", "StableLmForCausalLM", SMALL),
    "llama4 text": ("Llama4TextConfig", "Llama4ForCausalLM", dict(head_dim=8, **SMALL)),
    "gpt_oss, sliding window": (
        "GptOssConfig",
        "GptOssForCausalLM",
        dict(head_dim=8, num_local_experts=4, num_experts_per_tok=2, sliding_window=8, **SMALL),
    ),
    "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM", SMALL),
    "exaone4, sliding window": ("Exaone4Config", "Exaone4ForCausalLM", dict(sliding_window=8, **SMALL)),
}


def build(family):
    config_class, model_class, arguments = FAMILIES[family]
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(**COMMON, **arguments)
    model = getattr(transformers, model_class)(config).eval()
    model.generation_config.pad_token_id = None
    return model


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_equal_to_generate_in_every_family(family):
    model = build(family)
    ids = repetitive_prompt(25, seed=3)  # past the sliding windows of 8
    ref = model.generate(ids, do_sample=False, max_new_tokens=40, eos_token_id=None)
    gen = SpeculativeGenerator(model)  # the default policy
    assert torch.equal(gen.generate(ids, max_new_tokens=40, eos_token_id=None), ref)
    assert gen.last_stats.accepted > 0
    forced = SpeculativeGenerator(model, proposer=PartlyWrongProposer(ref[0].tolist(), VOCAB))
    assert torch.equal(forced.generate(ids, max_new_tokens=40, eos_token_id=None), ref)
    stats = forced.last_stats  # every pass rejected a draft's tail, at each of its positions in turn
    assert stats.accepted > 0 and stats.drafted - stats.accepted >= stats.passes - 1


def test_a_multimodal_model_generating_text_only():
    """Gemma 3 from 4B up loads as ``Gemma3ForConditionalGeneration``: text prompts go through it unchanged."""
    text = dict(
        COMMON,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        sliding_window=8,
    )
    vision = dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4, image_size=28, patch_size=14
    )
    torch.manual_seed(0)
    config = transformers.Gemma3Config(
        text_config=text,
        vision_config=vision,
        mm_tokens_per_image=4,
        image_token_index=VOCAB - 1,
        boi_token_index=VOCAB - 2,
        eoi_token_index=VOCAB - 3,
    )
    model = transformers.Gemma3ForConditionalGeneration(config).eval()
    model.generation_config.pad_token_id = None
    ids = repetitive_prompt(25, seed=3, vocab=VOCAB - 3)  # no image tokens
    ref = model.generate(ids, do_sample=False, max_new_tokens=40, eos_token_id=None)
    wrong = PartlyWrongProposer(ref[0].tolist(), VOCAB - 3)  # a wrong draft token is never an image token
    forced = SpeculativeGenerator(model, proposer=wrong)
    assert torch.equal(forced.generate(ids, max_new_tokens=40, eos_token_id=None), ref)
    assert torch.equal(SpeculativeGenerator(model).generate(ids, max_new_tokens=40, eos_token_id=None), ref)

"""Tiny randomly initialised causal LMs for the exactness tests, built in the test (no download)."""

import torch
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MambaConfig,
    MambaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    MptConfig,
    MptForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    RecurrentGemmaConfig,
    RecurrentGemmaForCausalLM,
)

VOCAB = 96
SLIDING_WINDOW = 8


def tiny_model(kind, seed=0, vocab=VOCAB):
    """A small fp32 model of ``kind`` (llama, gemma3, qwen2, gpt2; mistral and qwen3 with sliding windows for the
    lean layers; mpt, mamba and recurrent_gemma for the cache checks) whose EOS (id 1) is left reachable only
    when a test asks for it: pass ``eos_token_id=None`` to generate to run to the end."""
    torch.manual_seed(seed)
    common = dict(vocab_size=vocab, bos_token_id=0, eos_token_id=1, pad_token_id=None)
    if kind == "llama":
        config = LlamaConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
            **common,
        )
        model = LlamaForCausalLM(config)
    elif kind == "gemma3":
        config = Gemma3TextConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=8,
            max_position_embeddings=512,
            sliding_window=SLIDING_WINDOW,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            **common,
        )
        model = Gemma3ForCausalLM(config)
    elif kind == "qwen2":
        config = Qwen2Config(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
            **common,
        )
        model = Qwen2ForCausalLM(config)
    elif kind == "mistral":
        config = MistralConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
            sliding_window=SLIDING_WINDOW,
            **common,
        )
        model = MistralForCausalLM(config)
    elif kind == "qwen3":  # biases on no projection, norms over each query and key head; one sliding layer
        config = Qwen3Config(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=8,
            max_position_embeddings=512,
            use_sliding_window=True,
            sliding_window=SLIDING_WINDOW,
            layer_types=["sliding_attention", "full_attention"],
            **common,
        )
        model = Qwen3ForCausalLM(config)
    elif kind == "gpt2":
        config = GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=512, **common)
        model = GPT2LMHeadModel(config)
    elif kind == "mpt":  # its config turns the KV cache off by default
        model = MptForCausalLM(MptConfig(d_model=32, n_layers=2, n_heads=4, **common))
    elif kind == "mamba":  # a recurrent state, which no rejected draft can be cropped out of
        model = MambaForCausalLM(MambaConfig(hidden_size=32, num_hidden_layers=2, state_size=4, **common))
    elif kind == "recurrent_gemma":
        model = RecurrentGemmaForCausalLM(
            RecurrentGemmaConfig(
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=3,
                num_attention_heads=4,
                num_key_value_heads=2,
                head_dim=8,
                lru_width=32,
                attention_window_size=8,
                **common,
            )
        )
    else:
        raise ValueError(kind)
    model.generation_config.pad_token_id = None
    return model.eval()


def repetitive_prompt(length, seed=0, vocab=VOCAB):
    """A prompt that repeats itself, so that drafts are found (ids >= 2: never BOS or EOS)."""
    g = torch.Generator().manual_seed(seed)
    block = torch.randint(2, vocab, (max(1, length // 3),), generator=g)
    return block.repeat(4)[:length].view(1, -1)


def tiny_tokenizer(vocab=320):
    """A byte-level BPE tokenizer trained here on a little English and code (multi-character tokens, so stop
    strings can span and overhang token boundaries)."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    texts = [
        "the quick brown fox jumps over the lazy dog. " * 3,
        "def add(x, y):\n    return x + y\n" * 3,
        "Hello world! The end. Stop here; then go on and on and on.",
    ]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(texts, vocab_size=vocab, min_frequency=1, show_progress=False)
    return PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer)

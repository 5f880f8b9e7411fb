"""The check of which verification pass lengths are exact (``pass_check``), with faults injected on the CPU: a
pass over exactly 33 tokens giving wrong logits, as one did on a GPU."""

import logging

import pytest
import torch
from proposers import OracleProposer
from tiny_models import repetitive_prompt, tiny_model

from draftless.integration import SpeculativeGenerator, calibration, pass_check, proposing, speculative, store
from draftless.lookup import AdaptiveConfig, DraftConfig
from draftless.lookup.cost_model import FLAT

BROKEN = 33  # the pass length that gave wrong logits on the GPU


def break_passes_of(model, length, fault="roll"):
    """Make every pass over exactly ``length`` tokens (or any length in a set) return wrong logits (argmax
    moved, or NaN)."""
    lengths = {length} if isinstance(length, int) else set(length)

    def hook(module, inputs, output):
        if output.shape[-2] not in lengths:
            return None
        return torch.roll(output, 1, dims=-1) if fault == "roll" else torch.full_like(output, float("nan"))

    return model.lm_head.register_forward_hook(hook)


@pytest.mark.parametrize("kind", ["llama", "gemma3", "qwen2", "gpt2"])  # gemma3: contexts past its window
def test_every_length_of_a_sound_model_is_exact(kind):
    model = tiny_model(kind)
    errors = pass_check.pass_errors(model, context=20, max_draft=40)
    assert sorted(errors) == list(range(2, 42))
    assert max(errors.values()) <= pass_check.tolerance(torch.float32)
    assert pass_check.measure_inexact_drafts(model, 40, contexts=(5, 20)) == ()


@pytest.mark.parametrize("fault", ["roll", "nan"])
def test_a_broken_length_is_found_and_logged(fault, caplog):
    model = tiny_model("gemma3")
    break_passes_of(model, BROKEN, fault)
    errors = pass_check.pass_errors(model, context=20, max_draft=40)
    assert [q for q, e in errors.items() if not e <= 1e-3] == [BROKEN]
    with caplog.at_level(logging.WARNING, logger="draftless.integration.pass_check"):
        assert pass_check.measure_inexact_drafts(model, 40, contexts=(20,)) == (BROKEN - 1,)
    assert f"passes over [{BROKEN}] tokens" in caplog.text


def test_every_broken_length_is_found_on_any_context():
    model = tiny_model("llama")
    break_passes_of(model, 2)
    break_passes_of(model, 10)
    assert pass_check.measure_inexact_drafts(model, 8, contexts=(10, 3)) == (1,)  # 10 tokens: past max_draft 8
    assert pass_check.measure_inexact_drafts(model, 9, contexts=(10,)) == (1, 9)


def test_contexts_stay_within_the_model_positions():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)  # 60 learned absolute positions: a position past them fails inside the model
    model = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=60, vocab_size=96)).eval()
    assert pass_check.measure_inexact_drafts(model, 8, contexts=(97, 300)) == ()
    with pytest.raises(IndexError):
        pass_check.pass_errors(model, 97, 8)


def test_exact_length_steps_down_past_inexact_lengths_and_stops_at_the_checked_ones():
    assert [pass_check.exact_length(n, (3, 4, 7), 64) for n in range(9)] == [0, 1, 2, 2, 2, 5, 6, 6, 8]
    assert pass_check.exact_length(1, (1,), 64) == 0
    assert pass_check.exact_length(90, (), 64) == 64 and pass_check.exact_length(90, (64,), 64) == 63


def test_tolerance_is_looser_for_16_bit_types_and_reduced_fp32_products(cache_dir):
    assert pass_check.tolerance(torch.float32) < pass_check.tolerance(torch.bfloat16)
    assert pass_check.tolerance(torch.float16) == pass_check.tolerance(torch.bfloat16)
    model = tiny_model("llama")
    key = calibration.calibration_key(model)
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")  # TF32 where the device has it
        assert pass_check.tolerance(torch.float32) == pass_check.tolerance(torch.bfloat16)
        assert calibration.calibration_key(model) != key  # checked and calibrated apart
    finally:
        torch.set_float32_matmul_precision(before)
    assert calibration.calibration_key(model) == key


@pytest.mark.parametrize(
    "kwargs, word",
    [({"context": 0}, "context"), ({"context": True}, "context"), ({"context": 5, "max_draft": 0}, "max_draft")],
)
def test_bad_arguments_raise_clearly(kwargs, word):
    with pytest.raises(ValueError, match=word):
        pass_check.pass_errors(tiny_model("llama"), **kwargs)


def test_no_check_on_the_cpu(cache_dir):
    assert calibration.cached_inexact_drafts(tiny_model("llama")) == ()
    assert not list(cache_dir.glob("calibration/*inexact*"))


def test_checked_lengths_are_cached_per_model(cache_dir, monkeypatch):
    monkeypatch.setattr(calibration, "checks_pass_lengths", lambda model: True)
    calls = []
    real = pass_check.measure_inexact_drafts

    def counting(model, max_draft=pass_check.MAX_DRAFT, contexts=None, plans=None, progress=None):
        calls.append(1)
        return real(model, max_draft, contexts=(12,), plans=plans, progress=progress)

    monkeypatch.setattr(pass_check, "measure_inexact_drafts", counting)
    model = tiny_model("llama")
    break_passes_of(model, BROKEN)
    assert calibration.cached_inexact_drafts(model) == (BROKEN - 1,)
    store.forget_read_files()
    assert calibration.cached_inexact_drafts(model) == (BROKEN - 1,) and len(calls) == 1  # read back from disk
    for bad in ('{"inexact": "many"}', '{"inexact": [0]}', '{"inexact": [true]}'):
        (path,) = cache_dir.glob("calibration/*inexact*")
        path.write_text(bad)  # an unreadable entry is checked again, not trusted
        store.forget_read_files()
        assert calibration.cached_inexact_drafts(model) == (BROKEN - 1,)
    assert len(calls) == 4


def force_the_check(monkeypatch):
    """Check pass lengths on the CPU, as on any other device, on one short context."""
    monkeypatch.setattr(calibration, "checks_pass_lengths", lambda model: True)
    monkeypatch.setattr(speculative, "checks_pass_lengths", lambda model: True)
    monkeypatch.setattr(pass_check, "CONTEXTS", (20,))


def test_a_config_longer_than_the_default_is_checked_to_its_length(cache_dir, monkeypatch):
    model = tiny_model("llama")
    break_passes_of(model, 71)
    force_the_check(monkeypatch)
    gen = SpeculativeGenerator(model, config=AdaptiveConfig(max_draft=80))
    assert gen.checked_drafts == 80 and gen.inexact_drafts == (70,)
    assert SpeculativeGenerator(model).checked_drafts == pass_check.MAX_DRAFT  # the default: 64
    assert SpeculativeGenerator(model, config=DraftConfig(max_draft=8)).checked_drafts == pass_check.MAX_DRAFT


@pytest.mark.parametrize("adaptive", [False, True])
def test_outputs_stay_exact_where_pass_lengths_are_broken(adaptive, cache_dir, monkeypatch):
    model = tiny_model("gemma3")
    prompt = repetitive_prompt(24)
    reference = model.generate(prompt, max_new_tokens=80, do_sample=False, eos_token_id=None)
    # the oracle drafts 32 tokens a time; the adaptive policy drafts what the index holds, so there every
    # length but 1, 3, 7, 11, ... is broken (generate itself never runs such a pass here: its prefill keeps 1)
    broken = {BROKEN} if not adaptive else {q for q in range(2, 66) if q % 4}
    break_passes_of(model, broken)
    monkeypatch.setattr(proposing, "cached_cost_curve", lambda model: FLAT)  # as on a GPU: long drafts pay

    def run():
        store.forget_read_files()
        oracle = None if adaptive else OracleProposer(reference[0], length=BROKEN - 1)
        gen = SpeculativeGenerator(model, proposer=oracle)
        out = gen.generate(prompt, max_new_tokens=80, do_sample=False, eos_token_id=None)
        return gen, out, {k for k, _ in gen.last_stats.draft_trace}

    gen, out, lengths = run()  # unchecked (the CPU): broken lengths are drafted and the output goes wrong
    assert gen.inexact_drafts == () and lengths & {q - 1 for q in broken} and not torch.equal(out, reference)
    force_the_check(monkeypatch)
    gen, out, lengths = run()
    assert gen.inexact_drafts == tuple(sorted(q - 1 for q in broken))
    assert torch.equal(out, reference) and not lengths & set(gen.inexact_drafts)
    if adaptive:
        assert max(lengths) >= 7  # long drafts are still made, at the exact lengths
    else:
        assert max(lengths) == BROKEN - 2  # every 32-token draft cut to 31


def test_coarse_rounding_is_warned_once_per_device_and_dtype(caplog, monkeypatch):
    monkeypatch.setattr(pass_check, "_WARNED_ROUNDING", set())
    with caplog.at_level(logging.WARNING, logger="draftless"):
        SpeculativeGenerator(tiny_model("llama"), config=DraftConfig())
        assert "rounds a multi-token pass" not in caplog.text  # fp32: token for token
        for _ in range(2):
            SpeculativeGenerator(tiny_model("llama").to(torch.bfloat16), config=DraftConfig())
    assert caplog.text.count("torch.bfloat16 on cpu rounds a multi-token pass") == 1
    assert pass_check.full_precision(torch.float32) and not pass_check.full_precision(torch.float16)

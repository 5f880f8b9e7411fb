"""Where the loop screens its output layer in bfloat16 and where not: generation token for token equal to
``model.generate`` under the screen in each product form, the models, settings and weights it leaves alone, the
bfloat16 copy kept per model, the calibration's passes and the product form's race (the screen's own choices:
``test_screened_head.py``)."""

import gc
import weakref

import pytest
import torch
from proposers import OracleProposer, PartlyWrongProposer, WrongProposer
from screen_forms import forced_screen, form  # noqa: F401 (fixtures)
from tiny_models import repetitive_prompt, tiny_model

from draftless.integration import SpeculativeGenerator, calibration, pass_timing, store
from draftless.integration.fastpass import FastPassOptions, screened_head
from draftless.integration.fastpass.screen_product import FORMS, WEIGHT_MAJOR
from draftless.integration.fastpass.screened_head import ScreenedHead
from draftless.lookup import NullProposer
from draftless.lookup.cost_model import CostCurve


@pytest.mark.parametrize("kind", ["llama", "gemma3", "qwen2", "gpt2"])
def test_screened_generation_equals_generate(kind, forced_screen):
    model = tiny_model(kind)
    ids = repetitive_prompt(30, seed=3)
    ref = model.generate(ids, do_sample=False, max_new_tokens=40, eos_token_id=None)
    gen = SpeculativeGenerator(model)
    assert torch.equal(gen.generate(ids, max_new_tokens=40, eos_token_id=None), ref)
    # forced long drafts, all accepted: passes over many rows
    oracle = SpeculativeGenerator(model, proposer=OracleProposer(ref[0].tolist(), length=25))
    assert torch.equal(oracle.generate(ids, max_new_tokens=40, eos_token_id=None), ref)
    assert oracle.last_stats.passes < 10
    # drafts of 12 rejected at a position that moves every pass (rows after it left unscored), and all rejected
    vocab = model.config.vocab_size
    partly = SpeculativeGenerator(model, proposer=PartlyWrongProposer(ref[0].tolist(), vocab, length=12))
    assert torch.equal(partly.generate(ids, max_new_tokens=40, eos_token_id=None), ref)
    wrong = SpeculativeGenerator(model, proposer=WrongProposer(ref[0].tolist(), vocab, length=12))
    assert torch.equal(wrong.generate(ids, max_new_tokens=40, eos_token_id=None), ref)
    assert wrong.last_stats.passes == 40 - 1  # every pass keeps the target's token alone (the prefill wrote one)
    plain = SpeculativeGenerator(model, proposer=NullProposer())  # 1-row passes: screened too
    assert torch.equal(plain.generate(ids, max_new_tokens=40, eos_token_id=None), ref)
    runs = (gen, oracle, partly, wrong, plain)
    assert sum(s.calls for s in forced_screen) == sum(run.last_stats.passes for run in runs)  # plain steps too


@pytest.mark.parametrize(
    "settings",
    [
        dict(do_sample=True, top_k=0),
        dict(repetition_penalty=1.3),
        dict(output_scores=True, return_dict_in_generate=True),
    ],
)
def test_not_screened_where_the_logits_matter(settings, forced_screen):
    model = tiny_model("llama")
    ids = repetitive_prompt(30, seed=3)
    SpeculativeGenerator(model).generate(ids, max_new_tokens=24, eos_token_id=None, **settings)
    assert all(s.calls == 0 for s in forced_screen)


def test_the_config_turns_it_off(forced_screen):
    model = tiny_model("llama")
    ids = repetitive_prompt(30, seed=3)
    gen = SpeculativeGenerator(model, fast_pass=FastPassOptions(screened_head=False))
    gen.generate(ids, max_new_tokens=24, eos_token_id=None)
    # (the calibration, shared by every config, times screened passes; the loop never screens one)
    assert all(s.calls == 0 for s in forced_screen) and gen.last_stats.passes > 0
    with pytest.raises(TypeError, match="screened_head"):
        FastPassOptions(screened_head="yes")


def test_only_fp32_bias_free_large_output_layers_with_native_bfloat16(monkeypatch):
    monkeypatch.setattr(screened_head, "native_bf16", lambda: True)
    model = tiny_model("llama")
    assert ScreenedHead.for_model(model) is None  # under MIN_WEIGHTS
    assert ScreenedHead.for_model(model.to(torch.float64), min_weights=0) is None
    model.to(torch.float32)
    monkeypatch.setattr(screened_head, "native_bf16", lambda: False)
    assert ScreenedHead.for_model(model, min_weights=0) is None
    monkeypatch.setattr(screened_head, "native_bf16", lambda: True)
    model.lm_head.bias = torch.nn.Parameter(torch.zeros(model.lm_head.out_features))
    assert ScreenedHead.for_model(model, min_weights=0) is None


def test_the_calibration_times_the_passes_a_greedy_run_screens(monkeypatch):
    timed, built = [], []

    def for_model(cls, model, min_weights=None):
        built.append(ScreenedHead(model.get_output_embeddings()))
        built[-1].from_rows = 5
        return built[-1]

    monkeypatch.setattr(ScreenedHead, "for_model", classmethod(for_model))

    def time_pass(model, cache, ids, context, screen=None):
        timed.append((ids.shape[1], screen is not None))
        return 0.01 * ids.shape[1]

    monkeypatch.setattr(pass_timing, "time_pass", time_pass)
    curve = calibration.measure_cost_curve(tiny_model("llama"), ks=(0, 3, 4, 8), context=8)
    assert built[-1].supported and curve.head == ()  # the output layer's times are the screen's: none kept
    assert {rows for rows, screened in timed if screened} == {5, 9}
    assert {rows for rows, screened in timed if not screened} == {1, 4}


def test_the_kept_bfloat16_copy_goes_with_its_model(monkeypatch):
    monkeypatch.setattr(screened_head, "native_bf16", lambda: True)
    monkeypatch.setattr(screened_head, "onednn_supported", lambda weight: True)  # on any host
    model = tiny_model("llama")
    screen = ScreenedHead.for_model(model, min_weights=0)
    assert screen is ScreenedHead.for_model(model, min_weights=0) and screen.head is model.lm_head
    with torch.no_grad():
        model.lm_head.weight.mul_(2)  # changed in place: built anew
    assert ScreenedHead.for_model(model, min_weights=0) is not screen
    head = weakref.ref(model.lm_head)
    del model, screen
    gc.collect()
    assert head() is None  # the cache of screens did not keep the model's output layer alive


def test_not_screened_where_the_model_changes_the_layers_output_in_place():
    from draftless.integration.fastpass.staged_head import returned_as_logits

    output = torch.randn((1, 2, 5))
    seen = (output, output._version)
    assert returned_as_logits(seen, output) == (True, None)
    output.mul_(2)  # a scale applied in place after the layer: its argmax meaning could change (a soft cap)
    assert returned_as_logits(seen, output) == (False, None)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_not_screened_where_a_weight_is_not_finite(monkeypatch, bad):
    monkeypatch.setattr(screened_head, "native_bf16", lambda: True)
    model = tiny_model("llama")
    with torch.no_grad():
        model.lm_head.weight[5, 3] = bad
    assert ScreenedHead.for_model(model, min_weights=0) is None


def test_the_product_form_is_raced_once_and_cached(monkeypatch, cache_dir):
    raced = []
    monkeypatch.setattr(screened_head, "faster_form", lambda low: raced.append(low.shape) or WEIGHT_MAJOR)
    model = tiny_model("llama")
    low = screened_head.bfloat16_copy(model.lm_head.weight.detach())[0]
    assert screened_head.product_form(model, low) == WEIGHT_MAJOR
    store.forget_read_files()  # a new process: read from disk, not raced again
    assert screened_head.product_form(model, low) == WEIGHT_MAJOR and raced == [tuple(low.shape)]
    with pytest.raises(ValueError, match="form"):
        ScreenedHead(model.lm_head, form="columns")


def test_the_race_chooses_a_form_the_screen_takes():
    from draftless.integration.fastpass.screen_product import faster_form

    assert faster_form(torch.randn((300, 32)).bfloat16()) in FORMS


def test_the_race_multiplies_the_probes_first_rows_only(monkeypatch):
    from draftless.integration.fastpass import screen_product

    seen = []
    monkeypatch.setattr(
        screen_product,
        "screen_scores",
        lambda low, rows16, form, onednn=True: seen.append((low.data_ptr(), tuple(low.shape), form, rows16.shape[0])),
    )
    low = torch.randn((300, 32)).bfloat16()
    screen_product.faster_form(low, nbytes=100 * 32 * 2)  # 100 rows' bytes
    assert {s[:2] for s in seen} == {(low.data_ptr(), (100, 32))}
    assert sorted(seen, key=lambda s: (s[3], s[2])) == sorted(
        [(low.data_ptr(), (100, 32), f, r) for f in FORMS for r in screen_product.RACE_ROWS] * 3,
        key=lambda s: (s[3], s[2]),
    )  # both forms at each row count, a warm-up and two rounds
    seen.clear()
    screen_product.faster_form(low, nbytes=1 << 20)  # more bytes than the weight holds: all of it
    assert {s[1] for s in seen} == {(300, 32)}


def test_recalibrating_races_the_form_again_for_a_screen_already_built(monkeypatch, cache_dir):
    monkeypatch.setattr(screened_head, "native_bf16", lambda: True)
    monkeypatch.setattr(screened_head, "onednn_supported", lambda weight: True)  # on any host
    monkeypatch.setattr(screened_head, "MIN_WEIGHTS", 0)
    monkeypatch.setattr(
        calibration,
        "measure_cost_curve",
        lambda model, ks, progress=None: CostCurve(tuple(ks), tuple(0.01 + 0.001 * k for k in ks)),
    )  # no passes timed: the form's file is the point
    raced = []
    monkeypatch.setattr(screened_head, "faster_form", lambda low: raced.append(1) or WEIGHT_MAJOR)
    model = tiny_model("llama")
    calibration.calibrate(model)
    screen = ScreenedHead.for_model(model)
    assert calibration.calibrated(model) and screen.form == WEIGHT_MAJOR and raced == [1]
    calibration.recalibrate(model)  # every file removed and measured again; the screen (the same weight) kept
    assert ScreenedHead.for_model(model) is screen and raced == [1, 1] and calibration.calibrated(model)

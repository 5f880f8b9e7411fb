"""The output layer's linear plan, kept apart where a screen may serve the model (``calibration.OUTPUT_PLAN_KIND``):
measured only for a run that multiplies by the output layer in fp32, never for a greedy run that screens every
pass nor for a sampled one whose top-k cut the screen serves. Tiny models are under
``screened_head.MIN_WEIGHTS``, so the screen is forced here as a host with native bfloat16 would serve Gemma 3 270M."""

import pytest
import torch
from tiny_models import repetitive_prompt, tiny_model

from draftless.integration import SpeculativeGenerator, calibration
from draftless.integration.fastpass import screened_head
from draftless.integration.fastpass.screened_head import ScreenedHead


@pytest.fixture
def screening_host(monkeypatch, cache_dir):
    """Every model's output layer screened (torch's bfloat16 product where oneDNN has none); the shapes each plans
    measurement timed are listed."""
    timed = []
    measure = calibration.measure_linear_plans

    def measuring(model, progress=None, shapes=None, **kw):
        plans = measure(model, progress=progress, shapes=shapes, max_rows=3, wide_rows=(), repeats=1)
        timed.append(
            sorted(
                s
                for s in {tuple(m.weight.shape) for m in model.modules() if type(m) is torch.nn.Linear}
                if shapes is None or shapes(s)
            )
        )
        return plans

    monkeypatch.setattr(calibration, "measure_linear_plans", measuring)
    monkeypatch.setattr(ScreenedHead, "may_serve", staticmethod(lambda model, min_weights=None: True))

    def for_model(cls, model, min_weights=None):
        screen = ScreenedHead(model.get_output_embeddings())
        screen.form = screened_head.product_form(model, screen.low)  # raced and cached as on such a host
        return screen

    monkeypatch.setattr(ScreenedHead, "for_model", classmethod(for_model))
    return timed


def output_shape(model):
    return tuple(model.get_output_embeddings().weight.shape)


def test_a_greedy_run_never_measures_the_output_layers_plan(screening_host, cache_dir):
    model = tiny_model("llama")
    head = output_shape(model)
    calibration.calibrate(model)
    assert len(screening_host) == 1 and head not in screening_host[0] and screening_host[0]  # the other shapes
    assert calibration.calibrated(model) and not calibration.calibrated(model, output_layer=True)
    ids = repetitive_prompt(30, seed=3)
    ref = model.generate(ids, do_sample=False, max_new_tokens=24, eos_token_id=None)
    gen = SpeculativeGenerator(model)
    assert torch.equal(gen.generate(ids, max_new_tokens=24, eos_token_id=None), ref)
    assert len(screening_host) == 1  # every pass screened: nothing more measured
    assert not calibration.cache_file(model, calibration.OUTPUT_PLAN_KIND).exists()


def test_a_sampled_run_with_a_top_k_cut_never_measures_it(screening_host, cache_dir):
    model = tiny_model("llama")
    calibration.calibrate(model)
    ids = repetitive_prompt(30, seed=3)
    SpeculativeGenerator(model).generate(ids, max_new_tokens=16, eos_token_id=None, do_sample=True, seed=7, top_k=20)
    assert len(screening_host) == 1  # every pass screened to the cut (``screened_sampling``)
    assert not calibration.cache_file(model, calibration.OUTPUT_PLAN_KIND).exists()


def test_a_sampled_run_measures_it_once_on_first_use(screening_host, cache_dir):
    model = tiny_model("llama")
    calibration.calibrate(model)
    gen = SpeculativeGenerator(model)
    ids = repetitive_prompt(30, seed=3)  # no top-k cut: every token may be drawn, the layer multiplied in fp32
    first = gen.generate(ids, max_new_tokens=16, eos_token_id=None, do_sample=True, seed=7, top_k=0)
    assert screening_host[1:] == [[output_shape(model)]]  # the output layer's shape alone
    assert calibration.cache_file(model, calibration.OUTPUT_PLAN_KIND).exists()
    assert calibration.calibrated(model, output_layer=True)
    again = gen.generate(ids, max_new_tokens=16, eos_token_id=None, do_sample=True, seed=7, top_k=0)
    assert torch.equal(first, again) and len(screening_host) == 2  # read from the cache, the same text
    plans = calibration.cached_linear_plans(model)
    body = calibration.cached_linear_plans(model, output_layer=False)
    assert {s for s, _ in body.by_shape} <= {s for s, _ in plans.by_shape} and output_shape(model) not in dict(
        body.by_shape
    )


def test_calibrate_measures_it_when_asked(screening_host, cache_dir):
    model = tiny_model("qwen2")
    with pytest.raises(TypeError, match="output_layer"):
        calibration.calibrate(model, output_layer="yes")
    with pytest.raises(TypeError, match="output_layer"):
        calibration.calibrated(model, output_layer=1)
    calibration.calibrate(model, output_layer=True)
    assert [output_shape(model)] in screening_host and calibration.calibrated(model, output_layer=True)
    calibration.recalibrate(model)  # ``draftless calibrate``: everything again, the output layer's plan included
    assert screening_host.count([output_shape(model)]) == 2


def test_where_no_screen_may_serve_one_plans_file_holds_every_shape(cache_dir):
    model = tiny_model("llama")  # under MIN_WEIGHTS
    assert not ScreenedHead.may_serve(model) and calibration.output_layer_apart(model) is None
    calibration.calibrate(model)
    assert calibration.calibrated(model, output_layer=True)  # nothing kept apart, nothing missing
    assert not calibration.cache_file(model, calibration.OUTPUT_PLAN_KIND).exists()

"""The output layer screened in bfloat16: each row's token is the fp32 argmax, whatever bfloat16 rounds."""

import gc
import math
import weakref

import pytest
import torch

from draftless.integration import SpeculativeGenerator, calibration, pass_timing, screened_head
from draftless.integration.acceptance import accept_choices
from draftless.integration.screen_product import FORMS, WEIGHT_MAJOR, screen_scores
from draftless.integration.screened_head import MAX_CANDIDATES, ScreenedHead, error_bound
from draftless.lookup import AdaptiveConfig, NullProposer
from draftless.lookup.cost_model import CostCurve
from draftless.lookup.occurrence import agreement

from proposers import OracleProposer, PartlyWrongProposer, WrongProposer
from tiny_models import repetitive_prompt, tiny_model


@pytest.fixture(params=FORMS)
def form(request):
    """The screen's bfloat16 product in each of its forms (``screen_product``): oneDNN's over the rows (torch's own
    where oneDNN has none) and torch's weight-major one, whose scores lie tokens by rows."""
    return request.param


def linear(weight):
    head = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    with torch.no_grad():
        head.weight.copy_(weight)
    return head


def fp32_argmax(rows, weight):
    return (rows.double() @ weight.double().T).argmax(dim=1)  # no fp32 near-tie in these rows: the same choice


def twinned(seed, n_rows):
    """``(weight, rows)``: every row's best token given a twin of a lower id whose logit is 1e-3 below: rounded to
    bfloat16 (2^-8 relative) the two weight rows are one, the logits tie, and bfloat16's argmax takes the twin."""
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn((3000, 48), generator=g) * 0.05
    rows = torch.randn((n_rows, 48), generator=g) * 30
    best = fp32_argmax(rows, weight)
    for i, tok in enumerate(best.tolist()):
        weight[(tok - 1 - i) % weight.shape[0]] = weight[tok] - 1e-3 * rows[i] / rows[i].norm() ** 2
    return weight, rows


@pytest.mark.parametrize("seed", range(5))
def test_choices_are_the_fp32_argmax_where_bfloat16_alone_picks_wrong(seed, form):
    weight, rows = twinned(seed, 40)
    screen = ScreenedHead(linear(weight), form=form)
    want = fp32_argmax(rows, weight)
    low = torch.nn.functional.linear(rows.bfloat16(), weight.bfloat16()).float().argmax(dim=1)
    assert not torch.equal(low, want)  # bfloat16's own choice is wrong somewhere
    assert torch.equal(screen.argmax(rows), want)


def test_ties_go_to_the_lowest_token_id_and_flat_rows_to_the_whole_product(form):
    weight = torch.randn((2 * MAX_CANDIDATES + 7, 16), generator=torch.Generator().manual_seed(0)) * 0.1
    weight[200] = weight[9] = torch.full((16,), 2.0)  # the best for row 0, twice: the lower id wins, as in argmax
    rows = torch.stack([torch.full((16,), 3.0), torch.zeros(16), torch.full((16,), 1e-30)])
    screen = ScreenedHead(linear(weight), form=form)
    got = screen.argmax(rows)
    assert got[0] == 9 and got[1] == 0  # a zero row: every logit 0, more candidates than MAX_CANDIDATES
    assert torch.equal(got, torch.nn.functional.linear(rows, weight).argmax(dim=1))


def test_hesitant_rows_are_scored_by_their_candidates_in_blocks_not_by_the_whole_product(monkeypatch, form):
    # 1,500 near-twin tokens, a few thousandths apart: within every row's bound, so hundreds of candidates per row
    # (more than the old cap of 256, fewer than MAX_CANDIDATES), scored 64 at a time
    g = torch.Generator().manual_seed(3)
    base = torch.randn(32, generator=g)
    weight = torch.cat([base + 1e-3 * torch.randn((1500, 32), generator=g), torch.randn((500, 32), generator=g)])
    rows = base[None, :] * torch.linspace(1.0, 4.0, 6)[:, None] + 0.01 * torch.randn((6, 32), generator=g)
    screen = ScreenedHead(linear(weight), form=form)
    whole = []
    product = torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear",
                        lambda x, w, b=None: whole.append(w is screen.weight) or product(x, w, b))
    monkeypatch.setattr(screened_head, "CANDIDATE_BLOCK", 64)
    got = screen.argmax(rows)
    assert not any(whole)  # never the fp32 product over every token
    assert torch.equal(got, fp32_argmax(rows, weight))


@pytest.mark.parametrize("seed", range(6))
def test_a_draft_leaves_greedy_acceptance_exact_whatever_it_holds(seed, form):
    # drafts that hold for a while then fail, on rows built with near-tie twins (bfloat16 alone picks wrong):
    # the tokens greedy acceptance keeps from the screened choices are those it keeps from the fp32 argmax
    weight, rows = twinned(seed, 12)
    g = torch.Generator().manual_seed(100 + seed)
    want = fp32_argmax(rows, weight)
    screen = ScreenedHead(linear(weight), form=form)
    for held in range(12):
        draft = want[:11].clone()
        if held < 11:
            draft[held] = int(torch.randint(0, 3000, (1,), generator=g))  # a wrong token there (or the right one)
        got = screen.argmax(rows, draft=draft)
        n, tokens, _ = accept_choices(got, draft)
        want_n, want_tokens, _ = accept_choices(want, draft)
        assert (n, tokens.tolist()) == (want_n, want_tokens.tolist()) and n == agreement(draft.numpy(), want.numpy())
        assert torch.equal(got[: n + 1], want[: n + 1])  # exact up to the row where the draft fails


def test_rows_after_a_certainly_rejected_draft_token_are_not_scored(monkeypatch, form):
    # the zero rows are flat (every logit 0, more candidates than the cap): a flat row scored takes the fp32
    # product whole, so the rows that product is taken over are the flat rows scored. Row 2's one candidate is
    # token 9 and its draft token 4: certainly rejected, so rows 3 to 5 (flat) are never scored
    weight = torch.randn((40, 16), generator=torch.Generator().manual_seed(0)) * 0.1
    weight[9] = torch.full((16,), 2.0)
    rows = torch.zeros((6, 16))
    rows[2] = 3.0
    screen = ScreenedHead(linear(weight), form=form)
    scored = []
    product = torch.nn.functional.linear

    def counted(x, w, b=None):
        if w is screen.weight:
            scored.append(x.shape[0])
        return product(x, w, b)

    monkeypatch.setattr(torch.nn.functional, "linear", counted)
    monkeypatch.setattr(screened_head, "MAX_CANDIDATES", 8)  # the zero rows' 40 candidates: flat
    got = screen.argmax(rows, draft=torch.tensor([0, 0, 4, 0, 0]))
    assert scored == [2] and got[:3].tolist() == [0, 0, 9]  # rows 0 and 1 whole (flat), row 2 by its candidate
    n, tokens, _ = accept_choices(got, torch.tensor([0, 0, 4, 0, 0]))
    assert n == 2 and tokens.tolist() == [0, 0, 9]
    scored.clear()
    assert torch.equal(screen.argmax(rows), product(rows, weight).argmax(dim=1)) and scored == [5]  # no draft: all


def test_non_finite_rows_take_the_whole_product(form):
    weight = torch.randn((50, 8))
    rows = torch.randn((2, 8))
    rows[1, 3] = float("inf")
    want = torch.nn.functional.linear(rows, weight).argmax(dim=1)
    assert torch.equal(ScreenedHead(linear(weight), form=form).argmax(rows), want)


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3])
def test_the_error_bound_holds_on_every_logit(scale, form):
    g = torch.Generator().manual_seed(1)
    weight = torch.randn((4000, 640), generator=g) * scale
    rows = torch.randn((8, 640), generator=g) * torch.logspace(-2, 2, 8)[:, None]
    screen = ScreenedHead(linear(weight), form=form)
    exact = rows.double() @ weight.double().T
    bound = error_bound(rows, screen.norms, 640)  # E0: then u |t_j|, t_j the fp32 sum rounded to the score
    for some in (rows, rows[:1]):  # the weight-major form takes one row by torch.mv
        low = screen_scores(screen.low, some.bfloat16(), form, screen.onednn).double()
        allowed = bound[: len(some), None] + 2.0 ** -8 * low.abs() / (1 - 2.0 ** -8)
        assert bool(((low - exact[: len(some)]).abs() <= allowed).all())
    # 3-5 times tighter than session 37's bound, the operands' rounding at its worst: 6u S, doubled
    old = 2 * 6 * 2.0 ** -8 * (rows.double().abs() @ weight.double().abs().T).amax(dim=1)
    assert bool((bound <= old / 3).all())


def test_accept_choices_matches_greedy_acceptance():
    choices = torch.tensor([5, 6, 9, 2])
    n, tokens, _ = accept_choices(choices, torch.tensor([5, 6, 7]))
    assert n == 2 and tokens.tolist() == [5, 6, 9]  # the target's token where the draft failed
    n, tokens, scores = accept_choices(choices, torch.tensor([5, 6, 9]))
    assert n == 3 and torch.equal(tokens, choices) and scores is None
    n, tokens, _ = accept_choices(choices[:1], torch.empty(0, dtype=torch.long))
    assert n == 0 and tokens.tolist() == [5]


@pytest.fixture
def forced_screen(monkeypatch, cache_dir, form):
    """Every model screened, on any host (torch's bfloat16 product where oneDNN has none), from the default
    ``SCREEN_FROM_ROWS`` (one row: every pass); the screens built are listed. The curves timed so stay in this
    test's own cache (``cache_dir``): another test's tiny model of the same shape would read them, and find no
    output-layer times in them."""
    built = []

    def for_model(cls, model, min_weights=None):
        screen = ScreenedHead(model.get_output_embeddings(), form=form)
        calls = screen.argmax
        screen.calls = 0

        def counted(rows, timing=False, draft=None):
            screen.calls += not timing  # the loop's choices, not the calibration's timed passes
            return calls(rows, timing, draft)

        screen.argmax = counted
        built.append(screen)
        return screen

    monkeypatch.setattr(ScreenedHead, "for_model", classmethod(for_model))
    return built


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


@pytest.mark.parametrize("settings", [dict(do_sample=True, top_k=0), dict(repetition_penalty=1.3),
                                      dict(output_scores=True, return_dict_in_generate=True)])
def test_not_screened_where_the_logits_matter(settings, forced_screen):
    model = tiny_model("llama")
    ids = repetitive_prompt(30, seed=3)
    SpeculativeGenerator(model).generate(ids, max_new_tokens=24, eos_token_id=None, **settings)
    assert all(s.calls == 0 for s in forced_screen)


def test_the_config_turns_it_off(forced_screen):
    model = tiny_model("llama")
    ids = repetitive_prompt(30, seed=3)
    gen = SpeculativeGenerator(model, config=AdaptiveConfig(screened_head=False))
    gen.generate(ids, max_new_tokens=24, eos_token_id=None)
    # (the calibration, shared by every config, times screened passes; the loop never screens one)
    assert all(s.calls == 0 for s in forced_screen) and gen.last_stats.passes > 0
    with pytest.raises(TypeError, match="screened_head"):
        AdaptiveConfig(screened_head="yes")


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


def test_a_screened_pass_timed_chooses_from_each_rows_maximum_only(form):
    weight = torch.randn((600, 16))
    rows = torch.zeros((3, 16))  # every logit 0: all tie at the maximum
    screen = ScreenedHead(linear(weight), form=form)
    assert screen.argmax(rows, timing=True).tolist() == [0, 0, 0]


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
    from draftless.integration.staged_head import returned_as_logits
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
    calibration._MEMO.clear()  # a new process: read from disk, not raced again
    assert screened_head.product_form(model, low) == WEIGHT_MAJOR and raced == [tuple(low.shape)]
    with pytest.raises(ValueError, match="form"):
        ScreenedHead(model.lm_head, form="columns")


def test_the_race_chooses_a_form_the_screen_takes():
    from draftless.integration.screen_product import faster_form
    assert faster_form(torch.randn((300, 32)).bfloat16()) in FORMS


def test_the_race_multiplies_the_probes_first_rows_only(monkeypatch):
    from draftless.integration import screen_product
    seen = []
    monkeypatch.setattr(screen_product, "screen_scores", lambda low, rows16, form, onednn=True: seen.append(
        (low.data_ptr(), tuple(low.shape), form, rows16.shape[0])))
    low = torch.randn((300, 32)).bfloat16()
    screen_product.faster_form(low, nbytes=100 * 32 * 2)  # 100 rows' bytes
    assert {s[:2] for s in seen} == {(low.data_ptr(), (100, 32))}
    assert sorted(seen, key=lambda s: (s[3], s[2])) == sorted(
        [(low.data_ptr(), (100, 32), f, r) for f in FORMS for r in screen_product.RACE_ROWS] * 3,
        key=lambda s: (s[3], s[2]))  # both forms at each row count, a warm-up and two rounds
    seen.clear()
    screen_product.faster_form(low, nbytes=1 << 20)  # more bytes than the weight holds: all of it
    assert {s[1] for s in seen} == {(300, 32)}


def test_recalibrating_races_the_form_again_for_a_screen_already_built(monkeypatch, cache_dir):
    monkeypatch.setattr(screened_head, "native_bf16", lambda: True)
    monkeypatch.setattr(screened_head, "onednn_supported", lambda weight: True)  # on any host
    monkeypatch.setattr(screened_head, "MIN_WEIGHTS", 0)
    monkeypatch.setattr(calibration, "measure_cost_curve", lambda model, ks, progress=None: CostCurve(
        tuple(ks), tuple(0.01 + 0.001 * k for k in ks)))  # no passes timed: the form's file is the point
    raced = []
    monkeypatch.setattr(screened_head, "faster_form", lambda low: raced.append(1) or WEIGHT_MAJOR)
    model = tiny_model("llama")
    calibration.calibrate(model)
    screen = ScreenedHead.for_model(model)
    assert calibration.calibrated(model) and screen.form == WEIGHT_MAJOR and raced == [1]
    calibration.recalibrate(model)  # every file removed and measured again; the screen (the same weight) kept
    assert ScreenedHead.for_model(model) is screen and raced == [1, 1] and calibration.calibrated(model)

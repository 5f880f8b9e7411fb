"""The linear layers' plans (``linear_plan``): their tables, the race that chooses them, and the layers they
install."""

import pytest
import torch
from tiny_models import tiny_model

from draftless.integration.fastpass import linear_plan


def test_linear_plan_rejects_a_malformed_table():
    with pytest.raises(ValueError, match="pad_to"):
        linear_plan.LinearPlan((0, 3, 2), (False,) * 3)
    with pytest.raises(ValueError, match="equally long"):
        linear_plan.LinearPlan((0, 1), (False,))
    with pytest.raises(ValueError, match="wide"):
        linear_plan.LinearPlan((0, 1, 2), (False,) * 3, ((2, True),))
    with pytest.raises(ValueError, match="one per shape"):
        linear_plan.LinearPlans((((4, 2), linear_plan.LinearPlan.identity(2)),) * 2)


def test_linear_plan_choice_pads_small_counts_and_orders_wide_ones():
    plan = linear_plan.LinearPlan((0, 2, 2, 4, 4), (False, True, True, False, True), ((16, True), (32, False)))
    assert [plan.choice(m) for m in (1, 3, 4)] == [(2, True), (4, False), (4, True)]
    assert [plan.choice(m) for m in (5, 16, 17, 40)] == [(5, True), (16, True), (17, False), (40, False)]
    assert linear_plan.LinearPlan.identity(4).is_identity and not plan.is_identity


def test_joined_plans_take_the_others_plan_for_a_shape_both_hold():
    # a plans file cached before the output layer's plan was kept apart holds that layer's shape too
    old, new = linear_plan.LinearPlan.identity(2), linear_plan.LinearPlan((0, 2, 2), (False, True, True))
    body = linear_plan.LinearPlans((((4, 2), old), ((9, 2), old)))
    joined = body.joined(linear_plan.LinearPlans((((9, 2), new),)))
    assert joined.get((9, 2)) == new and joined.get((4, 2)) == old and len(joined.by_shape) == 2


EVERY_FORM = linear_plan.LinearPlan(
    (0, 4, 4, 4, 4, 8, 8, 8, 8), (False, True, True, False, True, True, False, True, True), ((16, True),)
)


def every_form(model):
    """The same plan for every linear shape of ``model``: padded + transposed, plain, and both wide orders."""
    return linear_plan.LinearPlans(tuple(sorted((shape, EVERY_FORM) for shape in linear_plan.plain_linears(model))))


@pytest.mark.parametrize("kind", ["llama", "gemma3", "qwen2", "gpt2"])
def test_planned_linears_change_no_logit_and_leave_nothing_behind(kind):
    model = tiny_model(kind)
    ids = torch.arange(3, 23)[None]
    plain = [model(input_ids=ids[:, :n]).logits for n in (1, 3, 6, 12, 20)]
    with linear_plan.planned_linears(model, every_form(model)):
        assert linear_plan.plain_linears(model) == {}  # every plain layer runs its plan now
        planned = [model(input_ids=ids[:, :n]).logits for n in (1, 3, 6, 12, 20)]
    for a, b in zip(plain, planned):
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-5)
        assert torch.equal(a.argmax(-1), b.argmax(-1))
    for m in model.modules():
        assert "forward" not in m.__dict__ and not m._forward_hooks and not m._forward_pre_hooks


def test_planned_linears_install_on_every_planned_layer_and_add_biases():
    model = tiny_model("qwen2")  # its q/k/v projections have biases
    head = model.get_output_embeddings()
    head.bias = torch.nn.Parameter(torch.randn(head.out_features))
    ids = torch.arange(3, 9)[None]
    plain = model(input_ids=ids).logits
    plans = every_form(model)
    with linear_plan.planned_linears(model, plans):
        planned = [m for m in model.modules() if "forward" in m.__dict__]
        assert len(planned) == sum(type(m) is torch.nn.Linear for m in model.modules())
        assert any(m.bias is not None for m in planned if m is not head)
        assert torch.allclose(model(input_ids=ids).logits, plain, atol=1e-5)
    only_head = linear_plan.LinearPlans(((tuple(head.weight.shape), EVERY_FORM),))
    with linear_plan.planned_linears(model, only_head):
        assert [m for m in model.modules() if "forward" in m.__dict__] == [head]


def test_a_plain_unpadded_choice_is_nn_linears_own_call(monkeypatch):
    # a shape planned at some row counts pays nothing at the others: nn.Linear's call, bit for bit, no product form
    layer = torch.nn.Linear(24, 40)
    plan = linear_plan.LinearPlan((0, 1, 4, 3, 4), (False, False, True, False, False), ((8, True), (16, False)))
    calls = []
    real = linear_plan.form_product
    monkeypatch.setattr(linear_plan, "form_product", lambda *a: calls.append(a[3]) or real(*a))
    plans = linear_plan.LinearPlans(((tuple(layer.weight.shape), plan),))
    with torch.no_grad():
        for rows, departs in ((1, False), (2, True), (3, False), (4, False), (6, True), (12, False), (20, False)):
            x = torch.randn(1, rows, 24)
            expected = layer(x)
            calls.clear()
            with linear_plan.planned_linears(layer, plans):
                out = layer(x)
            assert out.shape == expected.shape
            assert bool(calls) == departs, rows
            if not departs:
                assert torch.equal(out, expected), rows


def test_planned_linears_are_restored_on_error_and_skip_a_replaced_forward():
    model = tiny_model("llama")
    head = model.get_output_embeddings()
    plans = every_form(model)
    with pytest.raises(RuntimeError):
        with linear_plan.planned_linears(model, plans):
            raise RuntimeError("boom")
    assert not any("forward" in m.__dict__ for m in model.modules())
    custom = head.forward
    head.forward = custom  # as accelerate's offload hooks do: the plan must leave such a layer alone
    with linear_plan.planned_linears(model, plans):
        assert head.__dict__["forward"] is custom
    assert head.__dict__["forward"] is custom
    assert tuple(head.weight.shape) not in linear_plan.plain_linears(model)


def test_forms_far_behind_after_one_round_leave_the_race(monkeypatch):
    monkeypatch.setattr(linear_plan, "OUT_OF_RACE", 2.0)
    # 1..3 rows padded (max_rows 3), then 8 rows wide: seconds after one timed round
    seconds = {
        (1, False): 1.0,
        (1, True): 5.0,  # 1 row: the plain form; the other order is far behind
        (2, False): 4.0,
        (2, True): 1.1,  # 2 rows: transposed; plain is the baseline, far behind
        (3, False): 6.0,
        (3, True): 1.9,  # 3 rows transposed is within 2x of 1-row plain's 1.0
        (8, False): 3.0,
        (8, True): 2.0,
    }  # wide: both orders within 2x of each other
    racing = linear_plan.in_the_race(seconds, max_rows=3)
    assert set(racing) == {(1, False), (2, True), (3, True), (8, False), (8, True)}
    assert racing == [form for form in seconds if form in racing]  # in the order they were timed
    seconds[(8, False)] = 4.5  # past twice the other order: decided after one round
    assert (8, False) not in linear_plan.in_the_race(seconds, max_rows=3)
    near = {form: 1.0 for form in seconds}  # nothing clear: every form keeps being timed
    assert linear_plan.in_the_race(near, max_rows=3) == list(near)
    monkeypatch.setattr(linear_plan, "OUT_OF_RACE", 1.25)  # the default: within a quarter of the fastest
    seconds[(8, False)] = 3.0  # a half past the other order now
    # 3 rows transposed: out as a 2-row form (1.9 against 1.1), in as the 3-row one (the fastest there)
    assert set(linear_plan.in_the_race(seconds, max_rows=3)) == {(1, False), (2, True), (3, True), (8, True)}
    seconds[(1, True)] = 1.2  # within a quarter of 1-row plain's 1.0
    assert (1, True) in linear_plan.in_the_race(seconds, max_rows=3)


def test_a_plan_times_forms_out_of_the_race_once_and_still_counts_their_rounds(monkeypatch):
    groups = linear_plan.plain_linears(tiny_model("llama"))
    calls = []
    real = linear_plan.form_product

    def product(weight, bias, flat, target, transposed):
        calls.append((target, transposed))
        return real(weight, bias, flat, target, transposed)

    monkeypatch.setattr(linear_plan, "form_product", product)
    monkeypatch.setattr(linear_plan, "RETIME_DEPARTURES", False)  # the rounds alone (``test_plan_departures``)
    modules = groups[next(iter(groups))]
    kept = []
    real_race = linear_plan.in_the_race
    monkeypatch.setattr(linear_plan, "in_the_race", lambda s, m: kept.extend(real_race(s, m)) or kept[:2])
    ticks = []
    orders = (linear_plan.PLAIN, linear_plan.TRANSPOSED)
    linear_plan.measure_plan(
        modules, max_rows=3, wide_rows=(8,), repeats=3, tick=lambda: ticks.append(1), forms=orders, parts=(1, 1)
    )  # every timing over the whole probe
    forms = 2 * 5  # 1..3 rows, then 4 and 8 (both edges of the wide range 4-8), both orders
    # each form's first product once untimed (a first product runs slow), a round of all, two more of two
    assert len(calls) == len(modules) * (2 + forms + 2 * 2) and calls[: len(modules) + 1] == [(1, 0)] * len(modules) + [
        (1, 1)
    ]
    assert len(ticks) == forms * 3  # the progress still ends at the total it announced
    with pytest.raises(ValueError, match="repeats"):  # the first timed round is the one that decides the race
        linear_plan.measure_plan(modules, max_rows=3, wide_rows=(8,), repeats=0)


def test_a_wide_form_is_chosen_over_both_edges_of_the_rows_it_serves(monkeypatch):
    """A wide row count serves every row count down to one past the row count below it: its form is the one
    fastest summed over both edges, not at its own count alone (a BLAS fast at exactly 16 rows and slow at 9-15
    must not serve 9-15)."""
    assert linear_plan.wide_edges(8, (16, 32, 64)) == [(9, 16), (17, 32), (33, 64)]
    assert linear_plan.wide_edges(3, (8,)) == [(4, 8)] and linear_plan.wide_edges(8, (4, 16)) == [(9, 16)]
    assert linear_plan.row_counts(2, (4, 8)) == [1, 2, 3, 4, 5, 8]
    plain, transposed = linear_plan.PLAIN, linear_plan.TRANSPOSED
    fake = {
        (9, plain): 3.0,
        (9, transposed): 1.2,
        (16, plain): 1.0,
        (16, transposed): 1.05,  # plain fast at 16 only
        (17, plain): 1.0,
        (17, transposed): 1.5,
        (32, plain): 2.0,
        (32, transposed): 2.1,
    }  # plain at both

    def seconds(probed, x, rows, form):
        return fake.get((rows, form), 1.0 if form == plain else 2.0)

    monkeypatch.setattr(linear_plan, "time_products", seconds)
    groups = linear_plan.plain_linears(tiny_model("llama"))
    plan = linear_plan.measure_plan(groups[next(iter(groups))], wide_rows=(16, 32), forms=(plain, transposed))
    assert plan.wide == ((16, transposed), (32, plain))
    assert plan.choice(9) == (9, transposed) and plan.choice(16) == (16, transposed) and plan.choice(20) == (20, plain)
    fake[(9, transposed)] = 2.9  # summed, 3.95 against 4.0: not a twentieth faster, so plain stays
    plan = linear_plan.measure_plan(groups[next(iter(groups))], wide_rows=(16, 32), forms=(plain, transposed))
    assert plan.wide == ((16, plain), (32, plain))

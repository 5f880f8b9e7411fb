"""``linear_plan.measure_plan`` times once more the forms behind each choice that departs from the plain product,
so that a form slowed by chance in every round does not pad a row count for good (: plans a noisy
calibration cached padded SmolLM2-135M's 4-7-row products to 8)."""

import pytest
import torch

from draftless.integration.fastpass import linear_plan
from draftless.integration.fastpass.linear_plan import PLAIN, TRANSPOSED, LinearPlan

FORMS = (PLAIN, TRANSPOSED)


def fake_products(monkeypatch, slow, slow_calls):
    """Products that take 1 + rows / 100 (plain) or 5 (the other order) units, the first ``slow_calls`` of the
    plain 4-row product ``slow`` units; returns the log of ``(rows, form)`` timed."""
    calls = []

    def time_products(probed, x, rows, form):
        calls.append((rows, form))
        if form != PLAIN:
            return 5.0
        if rows == 4 and calls.count((4, PLAIN)) <= slow_calls:
            return slow
        return 1.0 + rows / 100

    monkeypatch.setattr(linear_plan, "time_products", time_products)
    return calls


@pytest.mark.parametrize("retime", [True, False])
@pytest.mark.parametrize("slow, timed", [(1.2, 2), (3.0, 1)])  # slowed in both rounds; out of the race after one
def test_a_row_count_slowed_where_it_was_timed_is_timed_again_before_it_is_padded(monkeypatch, retime, slow, timed):
    monkeypatch.setattr(linear_plan, "RETIME_DEPARTURES", retime)
    calls = fake_products(monkeypatch, slow, slow_calls=timed)
    plan = linear_plan.measure_plan([torch.nn.Linear(16, 16)], forms=FORMS, nbytes=1 << 12)
    assert plan.pad_to[4] == (4 if retime else 5)  # 4 rows padded to 5 (1.05 against 1.2 or 3) unless timed again
    assert plan.pad_to[:4] == (0, 1, 2, 3) and plan.pad_to[5:] == (5, 6, 7, 8)
    assert calls.count((4, PLAIN)) == timed + retime


def test_a_plan_that_departs_nowhere_times_nothing_again(monkeypatch):
    calls = fake_products(monkeypatch, 1.0, slow_calls=0)
    plan = linear_plan.measure_plan([torch.nn.Linear(16, 16)], forms=FORMS, nbytes=1 << 12)
    assert plan.is_identity and calls.count((4, PLAIN)) == 2


def test_departures_name_the_chosen_and_the_plain_timings_each_once():
    plan = LinearPlan(
        (0, 2, 2, 3, 8, 8, 8, 8, 8),
        (PLAIN, PLAIN, TRANSPOSED, PLAIN, PLAIN, PLAIN, PLAIN, PLAIN, PLAIN),
        ((16, PLAIN), (32, TRANSPOSED), (64, PLAIN)),
    )
    assert linear_plan.plan_departures(plan, 8, (16, 32, 64)) == [
        (1, PLAIN),
        (2, PLAIN),
        (2, TRANSPOSED),
        (4, PLAIN),
        (8, PLAIN),
        (5, PLAIN),
        (6, PLAIN),
        (7, PLAIN),
        (17, PLAIN),
        (32, PLAIN),
        (17, TRANSPOSED),
        (32, TRANSPOSED),
    ]
    assert linear_plan.plan_departures(LinearPlan(tuple(range(9)), (PLAIN,) * 9, ((16, PLAIN),)), 8, (16,)) == []

"""The output layer screened in bfloat16: each row's token is the fp32 argmax, whatever bfloat16 rounds (the
screen's own choices, bounds and acceptance; where the loop screens, ``test_screen_in_the_loop.py``)."""

import pytest
import torch
from screen_forms import form  # noqa: F401 (a fixture)

from draftless.integration.acceptance import accept_choices
from draftless.integration.fastpass import screened_head
from draftless.integration.fastpass.screen_product import screen_scores
from draftless.integration.fastpass.screened_head import MAX_CANDIDATES, ScreenedHead, error_bound
from draftless.lookup.occurrence import agreement


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
    monkeypatch.setattr(
        torch.nn.functional, "linear", lambda x, w, b=None: whole.append(w is screen.weight) or product(x, w, b)
    )
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
        allowed = bound[: len(some), None] + 2.0**-8 * low.abs() / (1 - 2.0**-8)
        assert bool(((low - exact[: len(some)]).abs() <= allowed).all())
    # 3-5 times tighter than the earlier bound, the operands' rounding at its worst: 6u S, doubled
    old = 2 * 6 * 2.0**-8 * (rows.double().abs() @ weight.double().abs().T).amax(dim=1)
    assert bool((bound <= old / 3).all())


def test_accept_choices_matches_greedy_acceptance():
    choices = torch.tensor([5, 6, 9, 2])
    n, tokens, _ = accept_choices(choices, torch.tensor([5, 6, 7]))
    assert n == 2 and tokens.tolist() == [5, 6, 9]  # the target's token where the draft failed
    n, tokens, scores = accept_choices(choices, torch.tensor([5, 6, 9]))
    assert n == 3 and torch.equal(tokens, choices) and scores is None
    n, tokens, _ = accept_choices(choices[:1], torch.empty(0, dtype=torch.long))
    assert n == 0 and tokens.tolist() == [5]


def test_a_screened_pass_timed_chooses_from_each_rows_maximum_only(form):
    weight = torch.randn((600, 16))
    rows = torch.zeros((3, 16))  # every logit 0: all tie at the maximum
    screen = ScreenedHead(linear(weight), form=form)
    assert screen.argmax(rows, timing=True).tolist() == [0, 0, 0]

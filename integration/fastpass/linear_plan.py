"""Every linear layer's fastest form on this device: its input rows padded to a row count the BLAS handles
faster, and its product taken in the operand order the BLAS handles faster, or through oneDNN's matmul.

A pass scores ``1 + k`` positions, so every linear layer multiplies ``1 + k`` rows, and CPU BLAS libraries choose
their kernel badly for few rows (MKL runs ``x @ W.T`` for one row single-threaded and for 2-3 rows as separate
matrix-vector products). ``measure_linear_plans`` races, per weight shape, both operand orders at 1..8 rows, the
form only at both edges of the ranges 9-16, 17-32 and 33-64, and oneDNN's matmul from ``ONEDNN_FROM_ROWS`` rows,
over layers of that shape in turn as a pass streams them (``weight_probe``), best of two rounds after one untimed
product. ``planned_linears`` then pads each call's rows with zeros up to the cheapest row count at or above it,
multiplies in the cheaper form and drops the extra rows: the real rows' outputs equal ``nn.Linear``'s up to float
rounding (the sum runs in another order), as any multi-row pass's do. Where nothing is gained (a GPU, another
BLAS, a layer that is not a plain ``nn.Linear``) a shape's plan is the identity and nothing is installed. The
measurements behind each rule below are in docs/fast-pass.md and docs/evidence.md.
"""

import contextlib
import functools
import itertools
import time

import torch

from draftless.index.validation import check_positive_int

from .blocked_product import transposed_product
from .onednn_product import onednn_product, onednn_supported
from .plan_tables import (  # noqa: F401 (names kept importable from here)
    FORMS,
    MAX_PADDED_ROWS,
    ONEDNN,
    PLAIN,
    TRANSPOSED,
    LinearPlan,
    LinearPlans,
)
from .timing_rounds import fastest_of_rounds, step_counter
from .weight_probe import part_bytes, probe_bytes, probe_parts

# oneDNN is raced for, and serves, row counts from this many: below, its products raced faster alone but made whole
# passes slower
ONEDNN_FROM_ROWS = 5
# row counts above MAX_PADDED_ROWS: each serves the rows from the one below it, exclusive, up to itself (the last
# also any more), in the form fastest summed over both edges of that range (``wide_edges``): a BLAS can be fast at
# exactly 16 rows and several times slower at 9-15
WIDE_ROWS = (16, 32, 64)
CLEAR_GAIN = 0.9  # change the plain product only for a tenth of its time, so timing noise changes nothing
WIDE_CLEAR_GAIN = 0.95  # above MAX_PADDED_ROWS, where products are long and their timings steadier, a twentieth
# the probe is cut into this many parts for the first timed round and the rounds after it (``probe_parts``): whole
# in both, since a shorter timing is a noisier one and chose slower plans for good
PROBE_PARTS = (1, 1)
# after the first timed round, a form that takes more than this many times the fastest form for every row count it
# could serve is not timed again: a second round's noise would not make it the choice
OUT_OF_RACE = 1.25
# the timings behind each departure from the plain product taken once more after the rounds (``plan_departures``),
# so that a form slowed by chance in every round does not pad a row count for good
RETIME_DEPARTURES = True


def plain_linears(model):
    """The model's plain ``nn.Linear`` modules whose ``forward`` nobody replaced (accelerate's offload hooks
    do), grouped by weight shape: ``{(out, in): [module, ...]}``."""
    groups = {}
    for module in model.modules():
        if type(module) is torch.nn.Linear and "forward" not in module.__dict__:
            groups.setdefault(tuple(module.weight.shape), []).append(module)
    return groups


def form_product(weight, bias, flat, target, form):
    """``flat @ weight.T + bias`` for the rows of ``flat``, computed on ``target`` rows in the given form."""
    rows = flat.shape[0]
    if target > rows:
        flat = torch.cat([flat, flat.new_zeros(target - rows, flat.shape[1])])
    if form == ONEDNN:
        return onednn_product(weight, bias, flat)[:rows].contiguous()
    if form:
        out = transposed_product(weight, flat, rows)
    else:
        out = torch.nn.functional.linear(flat, weight)[:rows]
    if bias is not None:
        out = out + bias
    return out.contiguous()


def wide_edges(max_rows, wide_rows):
    """``[(lowest, highest)]``: the rows each wide row count above ``max_rows`` serves, from one past the row
    count below it."""
    uppers = [r for r in wide_rows if r > max_rows]
    return [(low + 1, high) for low, high in zip([max_rows] + uppers, uppers)]


def row_counts(max_rows, wide_rows):
    """The row counts a shape's forms are timed at: 1 to ``max_rows``, then both edges of each wide range."""
    wide = sorted({r for edges in wide_edges(max_rows, wide_rows) for r in edges})
    return list(range(1, max_rows + 1)) + wide


def _raced(forms, max_rows, wide_rows):
    """The ``(rows, form)`` pairs ``measure_plan`` times in each round: every row count in each of ``forms``
    that ``serves`` it."""
    return [(r, f) for r in row_counts(max_rows, wide_rows) for f in forms if serves((r, f), r)]


def forms_for(weight):
    """The forms a product with ``weight`` is raced in here: ``PLAIN`` and ``TRANSPOSED`` everywhere, ``ONEDNN``
    where ``onednn_supported``."""
    return (PLAIN, TRANSPOSED, ONEDNN) if onednn_supported(weight) else (PLAIN, TRANSPOSED)


def row_inputs(weight, counts):
    """``{rows: input}``: random rows (seeded, so every race multiplies the same) shaped, typed and placed for a
    product with ``weight``, one input per row count of ``counts``."""
    g = torch.Generator().manual_seed(0)
    return {
        r: torch.randn((r, weight.shape[1]), generator=g).to(device=weight.device, dtype=weight.dtype) for r in counts
    }


def time_products(probed, x, rows, form):
    """Seconds to multiply ``x`` by each ``(weight, bias)`` of ``probed`` in turn, in ``form`` on ``rows`` rows."""
    t0 = time.perf_counter()
    for w, b in probed:
        form_product(w, b, x, rows, form)
    if probed and probed[0][0].device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


@torch.no_grad()
def measure_plan(
    modules,
    max_rows=MAX_PADDED_ROWS,
    wide_rows=WIDE_ROWS,
    repeats=2,
    tick=None,
    nbytes=None,
    forms=None,
    parts=None,
    deadline=None,
):
    """The ``LinearPlan`` fastest for ``modules`` (linear layers of one weight shape), each timing over the
    next part of ``probe_parts(modules, nbytes, n)`` in turn, ``n`` the first of ``parts`` (by default
    ``PROBE_PARTS``) in the first round and the second in the ``repeats - 1`` rounds after it (``nbytes`` by
    default ``probe_bytes`` of their device and weights; ``tick`` as ``fastest_of_rounds`` takes it), in each of
    ``forms`` (by default ``forms_for`` their weight). Where the parts differ, a form's time is its best over the later
    rounds: the first, over smaller parts, only decided whether it races on. Past ``deadline`` (a
    ``time.monotonic()`` value) after the first round, the plan is chosen from that round alone."""
    repeats = check_positive_int(repeats, "repeats")  # the first timed round decides which forms race on
    weight = modules[0].weight
    forms = forms_for(weight) if forms is None else tuple(forms)
    if not forms or forms[0] != PLAIN or not set(forms) <= set(FORMS):
        raise ValueError(f"forms must start with PLAIN ({PLAIN}) and be among {FORMS}, got {forms}")
    if nbytes is None:
        nbytes = probe_bytes(weight.device, part_bytes([(m.weight, m.bias) for m in modules]))
    parts = PROBE_PARTS if parts is None else tuple(parts)
    if len(parts) != 2:
        raise ValueError(f"parts must be (first round's, later rounds'), got {parts}")
    first_cut = probe_parts(modules, nbytes, parts[0])
    later_cut = first_cut if parts[1] == parts[0] else probe_parts(modules, nbytes, parts[1])
    turn = itertools.count()
    sizes = row_counts(max_rows, wide_rows)
    inputs = row_inputs(weight, sizes)

    def timed(rows, form, cut):  # seconds per byte of weights: the parts of two cuts differ in bytes
        probed = cut[next(turn) % len(cut)]
        return time_products(probed, inputs[rows], rows, form) / part_bytes(probed)

    runs = {form: functools.partial(timed, *form, first_cut) for form in _raced(forms, max_rows, wide_rows)}
    race = runs if later_cut is first_cut else {form: functools.partial(timed, *form, later_cut) for form in runs}
    firsts = {}
    for rows, form in runs:
        firsts.setdefault(form, (rows, form))
    for first in firsts.values():  # a shape's first product in a form runs up to 2.7x slow, the others within 5 %
        runs[first]()  # once, untimed
    seconds = dict(zip(runs, fastest_of_rounds(list(runs.values()), 1, tick, warm_up=False)))
    racing = in_the_race(seconds, max_rows)
    if deadline is not None and time.monotonic() > deadline:  # a busy machine: no more rounds
        racing, repeats = [], 1
    later = fastest_of_rounds([race[form] for form in racing], repeats - 1, tick, warm_up=False)
    for form, elapsed in zip(racing, later):
        seconds[form] = min(seconds[form], elapsed) if race is runs else elapsed
    for _ in range((len(runs) - len(racing)) * (repeats - 1) if tick is not None else 0):
        tick()  # the rounds a form out of the race skips: the caller's progress still ends at its total
    plan = choose_plan(seconds, forms, max_rows, wide_rows)
    again = plan_departures(plan, max_rows, wide_rows) if RETIME_DEPARTURES and repeats > 1 else []
    if again:  # a form slowed by chance in every round it ran (or out of the race) would pad a row count for good
        for form, elapsed in zip(again, fastest_of_rounds([race[form] for form in again], 1, warm_up=False)):
            seconds[form] = min(seconds[form], elapsed)
        plan = choose_plan(seconds, forms, max_rows, wide_rows)
    return plan


def choose_plan(seconds, forms, max_rows, wide_rows):
    """The ``LinearPlan`` that ``seconds`` (``{(rows, form): seconds per byte}``) says is fastest: at each row count
    up to ``max_rows`` the fastest form that serves it where it takes less than ``CLEAR_GAIN`` of the plain
    product's time, above it the form fastest over both edges of each wide range where under ``WIDE_CLEAR_GAIN``."""
    pad_to, chosen = [0], [PLAIN]
    for rows in range(1, max_rows + 1):
        best = min((form for form in seconds if rows <= form[0] <= max_rows and serves(form, rows)), key=seconds.get)
        if seconds[best] >= CLEAR_GAIN * seconds[(rows, PLAIN)]:
            best = (rows, PLAIN)
        pad_to.append(best[0])
        chosen.append(best[1])
    wide = []
    for low, high in wide_edges(max_rows, wide_rows):  # the form fastest over both edges of the range it serves

        def summed(f, low=low, high=high):
            return seconds[(low, f)] + seconds[(high, f)]

        best = min((f for f in forms if serves((low, f), low)), key=summed)
        wide.append((high, best if summed(best) < WIDE_CLEAR_GAIN * summed(PLAIN) else PLAIN))
    return LinearPlan(tuple(pad_to), tuple(chosen), tuple(wide))


def plan_departures(plan, max_rows, wide_rows):
    """The ``(rows, form)`` timings behind ``plan``'s departures from the plain product, each once: a row count
    padded or in another form (that form and the plain one), a wide range in another form (both, at both edges)."""
    out = []
    for rows in range(1, max_rows + 1):
        if (plan.pad_to[rows], plan.forms[rows]) != (rows, PLAIN):
            out += [(rows, PLAIN), (plan.pad_to[rows], plan.forms[rows])]
    for (low, high), (_, form) in zip(wide_edges(max_rows, wide_rows), plan.wide):
        if form != PLAIN:
            out += [(low, PLAIN), (high, PLAIN), (low, form), (high, form)]
    return list(dict.fromkeys(out))


def serves(form, rows):
    """Whether ``form`` (``(padded rows, form)``) may compute a product of ``rows`` rows: oneDNN's only from
    ``ONEDNN_FROM_ROWS`` rows, never padded up to from fewer."""
    return form[1] != ONEDNN or rows >= ONEDNN_FROM_ROWS


def in_the_race(seconds, max_rows):
    """The forms of ``seconds`` (``{(rows, form): seconds}`` after one timed round) still worth timing: up to
    ``max_rows``, each form within ``OUT_OF_RACE`` times the fastest form for some row count it could serve (a
    form of ``r`` rows serves every row count up to ``r``; the plain form of ``r`` rows is also the
    ``CLEAR_GAIN`` baseline there); above ``max_rows``, each form within ``OUT_OF_RACE`` times the fastest at
    its row count. A form out of the race is slower than a kept one by more than one round's noise wherever it
    could be chosen, so its first timing stands."""
    racing = set()
    for rows in range(1, max_rows + 1):
        serving = [form for form in seconds if rows <= form[0] <= max_rows and serves(form, rows)]
        fastest = min(seconds[form] for form in serving)
        racing.update(form for form in serving if seconds[form] <= OUT_OF_RACE * fastest)
    for rows in sorted({r for r, _ in seconds if r > max_rows}):
        at_rows = [(r, f) for (r, f) in seconds if r == rows]
        fastest = min(seconds[form] for form in at_rows)
        racing.update(form for form in at_rows if seconds[form] <= OUT_OF_RACE * fastest)
    return [form for form in seconds if form in racing]


def measure_linear_plans(
    model, max_rows=MAX_PADDED_ROWS, wide_rows=WIDE_ROWS, repeats=2, progress=None, shapes=None, deadline=None
):
    """The ``LinearPlans`` fastest for this model's linear layers on its device and dtype (identity plans left
    out), of the weight shapes ``shapes(shape)`` is true of (every shape where None). ``progress(done, total)``,
    if given, after each timed product (``step_counter``). Past ``deadline`` (a ``time.monotonic()`` value) the
    shapes not yet raced keep the plain product and the ones racing stop after their first round."""
    groups = [
        (shape, modules, forms_for(modules[0].weight))
        for shape, modules in plain_linears(model).items()
        if shapes is None or shapes(shape)
    ]
    tick = step_counter(progress, sum(len(_raced(forms, max_rows, wide_rows)) for _, _, forms in groups) * repeats)
    plans = (
        (shape, measure_plan(modules, max_rows, wide_rows, repeats, tick, forms=forms, deadline=deadline))
        for shape, modules, forms in groups
        if deadline is None or time.monotonic() <= deadline
    )
    return LinearPlans(tuple(sorted((s, p) for s, p in plans if not p.is_identity)))


@contextlib.contextmanager
def planned_linears(model, plans):
    """Within the block, each plain linear layer computes its product as its shape's plan says (see the module
    doc)."""
    installed = []
    try:
        for shape, modules in ({} if plans.is_identity else plain_linears(model)).items():
            plan = plans.get(shape)
            if plan is None or plan.is_identity:
                continue
            for module in modules:
                module.forward = functools.partial(_planned_forward, module.weight, module.bias, plan)
                installed.append(module)  # an instance attribute: nn.Module.__call__ runs it, hooks included
        yield
    finally:
        for module in installed:
            del module.forward


def _planned_forward(weight, bias, plan, x):
    rows = x.numel() // x.shape[-1]
    target, form = plan.choice(rows)
    if target == rows and form == PLAIN:  # nn.Linear's own call, no reshaping around it: a shape planned at other
        return torch.nn.functional.linear(x, weight, bias)  # row counts pays its plan nothing at this one
    flat = x.reshape(rows, x.shape[-1])
    return form_product(weight, bias, flat, target, form).reshape(*x.shape[:-1], weight.shape[0])

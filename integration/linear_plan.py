"""Every linear layer's fastest form on this device: its input rows padded to a row count the BLAS handles
faster, and its product taken in the operand order the BLAS handles faster.

A pass scores ``1 + k`` positions, so every linear layer of the model multiplies ``1 + k`` rows. CPU BLAS
libraries pick their kernel by the shape, and the choice is far from the fastest for few rows: on a 2-core
CPU with MKL, ``x @ W.T`` (``nn.Linear``) runs 1 row single-threaded and 2 or 3 rows as separate
matrix-vector products. Gemma 3 270M's output layer (262k x 640) takes 63 ms for 1 row, 138 ms for 2 and
206 ms for 3, while the same product taken as ``(W @ x.T).T`` takes 32 ms for 2 rows and 29 ms for 4; a
1536 x 576 MLP projection of SmolLM2-135M takes 72, 140 and 205 us for 1, 2 and 3 rows that way, against
94 us for 2 rows and 114 us for 4 the other way. A whole pass at 0, 1, 2 and 4 draft tokens takes 65, 89,
107 and 107 ms on Gemma with the output layer planned alone, 48, 49, 62 and 76 ms with every layer planned
(SmolLM2: 55, 78, 86, 86 -> 33, 35, 44, 50 ms).

``measure_linear_plans`` times, per weight shape, both orders at 1..8 rows (and at 16, 32 and 64 rows,
order only) over layers of that shape in turn, as a pass streams them, until twice the last-level cache has
streamed (``probe_bytes``; a layer larger than that, an output layer, over a slice of its rows), so that no
weight sits warm in cache; best of two rounds after the shape's first product (a first product runs up to 2.7x
slow, the rest within 5 %), a form far behind after the first (``OUT_OF_RACE``) timed
once. Timing every layer instead (Gemma 3 270M's 262k-row output layer whole) chose plans whose passes are no
faster and took 12-17 s against 3.3 s for Gemma 3 270M on a 2-core CPU with a 32 MiB cache ("A calibration
of a few seconds" in ``benchmarks/recorded/README.md``); two rounds after one product rather than three after a
warm-up round, 1.6 s, the passes under them as fast ("... again").

``planned_linears`` then pads each call's rows with zeros up to the cheapest row count at or above it,
multiplies in the cheaper order, and drops the extra rows: the real rows' outputs are those rows' products,
only faster (equal to ``nn.Linear``'s up to float rounding: the sum runs in another order); a wide product in
the second order is taken in blocks of output features (``transposed_product``). Where nothing is
gained (a GPU, another BLAS, a layer that is not a plain ``nn.Linear``) a shape's plan is the identity and
nothing is installed.
"""

import contextlib
import dataclasses
import functools
import time

import torch

from draftless.index.validation import check_positive_int

from .blocked_product import transposed_product
from .weight_probe import probe_bytes, probe_weights

MAX_PADDED_ROWS = 8
WIDE_ROWS = (16, 32, 64)  # row counts above MAX_PADDED_ROWS: the order measured at the next one up is used
CLEAR_GAIN = 0.9  # change the plain product only for a tenth of its time, so timing noise changes nothing
# after the first timed round, a form that takes more than this many times the fastest form for every row count
# it could serve is not timed again: no later round's noise could make it the choice, and the slow forms are the
# dear ones (Gemma 3 270M's output layer: 2 to 8 rows as ``x @ W.T`` take 2 to 7 times ``W @ x.T``)
OUT_OF_RACE = 2.0


@dataclasses.dataclass(frozen=True)
class LinearPlan:
    """``pad_to[m]`` rows (``m <= pad_to[m] <= len(pad_to) - 1``) and ``transposed[m]`` (``W @ x.T`` rather
    than ``x @ W.T``) for ``m`` rows (index 0 unused); above that, ``wide`` holds ``(rows, transposed)`` for
    row counts up to ``rows`` (the last entry also for any more)."""

    pad_to: tuple
    transposed: tuple
    wide: tuple = ()

    def __post_init__(self):
        if len(self.pad_to) < 1 or len(self.transposed) != len(self.pad_to):
            raise ValueError("pad_to and transposed must be equally long, index 0 unused")
        top = len(self.pad_to) - 1
        if any(not m <= p <= top for m, p in enumerate(self.pad_to) if m):
            raise ValueError(f"pad_to[m] must lie in [m, {top}], got {self.pad_to}")
        if any(not rows > top for rows, _ in self.wide) or list(self.wide) != sorted(self.wide):
            raise ValueError(f"wide rows must rise and exceed {top}, got {self.wide}")

    @classmethod
    def identity(cls, max_rows=MAX_PADDED_ROWS):
        return cls(tuple(range(max_rows + 1)), (False,) * (max_rows + 1))

    def choice(self, rows):
        """``(padded rows, transposed)`` for a call with ``rows`` rows."""
        if rows < len(self.pad_to):
            return self.pad_to[rows], self.transposed[rows]
        for upper, transposed in self.wide:
            if rows <= upper:
                return rows, transposed
        return rows, (self.wide[-1][1] if self.wide else False)

    @property
    def is_identity(self):
        return (all(p == m for m, p in enumerate(self.pad_to)) and not any(self.transposed)
                and not any(t for _, t in self.wide))

    def to_json(self):
        return {"pad_to": list(self.pad_to), "transposed": list(self.transposed),
                "wide": [[r, t] for r, t in self.wide]}

    @classmethod
    def from_json(cls, data):
        return cls(tuple(int(p) for p in data["pad_to"]), tuple(bool(t) for t in data["transposed"]),
                   tuple((int(r), bool(t)) for r, t in data["wide"]))


@dataclasses.dataclass(frozen=True)
class LinearPlans:
    """A ``LinearPlan`` per weight shape ``(out_features, in_features)``; shapes absent keep ``nn.Linear``."""

    by_shape: tuple = ()  # ((out, in), LinearPlan) pairs, sorted by shape

    def __post_init__(self):
        shapes = [shape for shape, _ in self.by_shape]
        if shapes != sorted(set(shapes)) or any(not isinstance(p, LinearPlan) for _, p in self.by_shape):
            raise ValueError("by_shape must hold ((out, in), LinearPlan) pairs, one per shape, sorted")

    def get(self, shape):
        return dict(self.by_shape).get(tuple(shape))

    @property
    def is_identity(self):
        return all(plan.is_identity for _, plan in self.by_shape)

    def to_json(self):
        return [{"shape": list(shape), "plan": plan.to_json()} for shape, plan in self.by_shape]

    @classmethod
    def from_json(cls, data):
        return cls(tuple(sorted((tuple(int(n) for n in item["shape"]), LinearPlan.from_json(item["plan"]))
                                for item in data)))


def fastest_of_rounds(passes, repeats, tick=None, warm_up=True):
    """Fastest seconds of each zero-argument callable in ``passes`` (each returns the seconds it took): one
    round warms every shape up (unless not ``warm_up``), then ``repeats`` interleaved rounds, so that a burst
    of load from another process neither bends the measured shape nor lands on one entry only. ``tick()``, if
    given, after each of the ``len(passes) * (repeats + warm_up)`` calls."""
    best = [float("inf")] * len(passes)
    for round_ in range(repeats + bool(warm_up)):
        for i, run in enumerate(passes):
            elapsed = run()
            if round_ or not warm_up:
                best[i] = min(best[i], elapsed)
            if tick is not None:
                tick()
    return best


def step_counter(progress, total):
    """A zero-argument callable that reports one more of ``total`` steps as ``progress(done, total)``; None
    where ``progress`` is None. How a measurement that takes seconds tells a caller's progress bar."""
    if progress is None:
        return None
    done = 0

    def tick():
        nonlocal done
        done += 1
        progress(done, total)

    return tick


def plain_linears(model):
    """The model's plain ``nn.Linear`` modules whose ``forward`` nobody replaced (accelerate's offload hooks
    do), grouped by weight shape: ``{(out, in): [module, ...]}``."""
    groups = {}
    for module in model.modules():
        if type(module) is torch.nn.Linear and "forward" not in module.__dict__:
            groups.setdefault(tuple(module.weight.shape), []).append(module)
    return groups


def _product(weight, bias, flat, target, transposed):
    """``flat @ weight.T + bias`` for the rows of ``flat``, computed on ``target`` rows in the given order."""
    rows = flat.shape[0]
    if target > rows:
        flat = torch.cat([flat, flat.new_zeros(target - rows, flat.shape[1])])
    if transposed:
        out = transposed_product(weight, flat, rows)
    else:
        out = torch.nn.functional.linear(flat, weight)[:rows]
    if bias is not None:
        out = out + bias
    return out.contiguous()


def _row_counts(max_rows, wide_rows):
    return list(range(1, max_rows + 1)) + [r for r in wide_rows if r > max_rows]


@torch.no_grad()
def measure_plan(modules, max_rows=MAX_PADDED_ROWS, wide_rows=WIDE_ROWS, repeats=2, tick=None, nbytes=None):
    """The ``LinearPlan`` fastest for ``modules`` (linear layers of one weight shape), timed over
    ``probe_weights(modules, nbytes)`` in turn (``nbytes`` by default ``probe_bytes`` of their device; ``tick``
    as ``fastest_of_rounds`` takes it)."""
    repeats = check_positive_int(repeats, "repeats")  # the first timed round decides which forms race on
    weight = modules[0].weight
    probed = probe_weights(modules, probe_bytes(weight.device) if nbytes is None else nbytes)
    g = torch.Generator().manual_seed(0)
    sizes = _row_counts(max_rows, wide_rows)
    inputs = {r: torch.randn((r, weight.shape[1]), generator=g).to(device=weight.device, dtype=weight.dtype)
              for r in sizes}

    def timed(rows, transposed):
        t0 = time.perf_counter()
        for w, b in probed:
            _product(w, b, inputs[rows], rows, transposed)
        if weight.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    runs = {(r, t): functools.partial(timed, r, t) for r in sizes for t in (False, True)}
    next(iter(runs.values()))()  # the shape's first product runs up to 2.7x slow, the others within 5 %: once, untimed
    seconds = dict(zip(runs, fastest_of_rounds(list(runs.values()), 1, tick, warm_up=False)))
    racing = in_the_race(seconds, max_rows)
    later = fastest_of_rounds([runs[form] for form in racing], repeats - 1, tick, warm_up=False)
    for form, elapsed in zip(racing, later):
        seconds[form] = min(seconds[form], elapsed)
    for _ in range((len(runs) - len(racing)) * (repeats - 1) if tick is not None else 0):
        tick()  # the rounds a form out of the race skips: the caller's progress still ends at its total
    pad_to, transposed = [0], [False]
    for rows in range(1, max_rows + 1):
        best = min(((r, t) for r in range(rows, max_rows + 1) for t in (False, True)), key=seconds.get)
        if seconds[best] >= CLEAR_GAIN * seconds[(rows, False)]:
            best = (rows, False)
        pad_to.append(best[0])
        transposed.append(best[1])
    wide = tuple((r, seconds[(r, True)] < CLEAR_GAIN * seconds[(r, False)]) for r in sizes[max_rows:])
    return LinearPlan(tuple(pad_to), tuple(transposed), wide)


def in_the_race(seconds, max_rows):
    """The forms of ``seconds`` (``{(rows, transposed): seconds}`` after one timed round) still worth timing:
    up to ``max_rows``, each form within ``OUT_OF_RACE`` times the fastest form for some row count it could
    serve (a form of ``r`` rows serves every row count up to ``r``; the plain form of ``r`` rows is also the
    ``CLEAR_GAIN`` baseline there); above ``max_rows``, each order within ``OUT_OF_RACE`` times the faster
    one. A form out of the race is slower than a kept one by more than one round's noise wherever it could be
    chosen, so its first timing stands."""
    racing = set()
    for rows in range(1, max_rows + 1):
        serving = [(r, t) for (r, t) in seconds if rows <= r <= max_rows]
        fastest = min(seconds[form] for form in serving)
        racing.update(form for form in serving if seconds[form] <= OUT_OF_RACE * fastest)
    for rows in sorted({r for r, _ in seconds if r > max_rows}):
        fastest = min(seconds[(rows, False)], seconds[(rows, True)])
        racing.update((rows, t) for t in (False, True) if seconds[(rows, t)] <= OUT_OF_RACE * fastest)
    return [form for form in seconds if form in racing]


def measure_linear_plans(model, max_rows=MAX_PADDED_ROWS, wide_rows=WIDE_ROWS, repeats=2, progress=None):
    """The ``LinearPlans`` fastest for this model's linear layers on its device and dtype (identity plans left
    out). ``progress(done, total)``, if given, after each timed product (``step_counter``)."""
    groups = plain_linears(model)
    tick = step_counter(progress, len(groups) * 2 * len(_row_counts(max_rows, wide_rows)) * repeats)
    plans = ((shape, measure_plan(modules, max_rows, wide_rows, repeats, tick)) for shape, modules in groups.items())
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
    flat = x.reshape(-1, x.shape[-1])
    target, transposed = plan.choice(flat.shape[0])
    return _product(weight, bias, flat, target, transposed).reshape(*x.shape[:-1], weight.shape[0])

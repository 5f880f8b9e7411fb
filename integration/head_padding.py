"""The output layer's fastest form on this device: its input rows padded to a row count the BLAS handles
faster, and its product taken in the operand order the BLAS handles faster.

A pass scores ``1 + k`` positions, so the output layer (vocabulary x hidden, the largest matrix of a small
model: 262k x 640 for Gemma 3 270M) multiplies ``1 + k`` rows. CPU BLAS libraries pick their kernel by the
shape, and the choice is far from the fastest for few rows: on a 2-core CPU with MKL, Gemma 3 270M's
``x @ W.T`` (``nn.Linear``) takes about 63 ms for 1 row, 138 ms for 2, 206 ms for 3 and 115 ms for 4 (2 and 3
rows run as separate matrix-vector products, 1 row single-threaded), while the same product taken as
``(W @ x.T).T`` takes 32 ms for 2 rows and 29 ms for 4. ``measure_head_plan`` times both orders at 1..8 rows
(and at 16, 32 and 64 rows, order only) on the actual device and dtype; ``planned_head`` then pads each
call's rows with zeros up to the cheapest row count at or above it, multiplies in the cheaper order, and
drops the extra rows: the real rows' logits are those rows' products, only faster (equal to ``nn.Linear``'s
up to float rounding: the sum runs in another order). Where nothing is gained (a GPU, another BLAS, a head
that is not a plain ``nn.Linear``) the plan is the identity and nothing is installed.
"""

import contextlib
import dataclasses
import functools
import time

import torch

MAX_PADDED_ROWS = 8
WIDE_ROWS = (16, 32, 64)  # row counts above MAX_PADDED_ROWS: the order measured at the next one up is used
CLEAR_GAIN = 0.9  # change the plain product only for a tenth of its time, so timing noise changes nothing


@dataclasses.dataclass(frozen=True)
class HeadPlan:
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


def fastest_of_rounds(passes, repeats):
    """Fastest seconds of each zero-argument callable in ``passes`` (each returns the seconds it took): one
    round warms every shape up, then ``repeats`` interleaved rounds, so that a burst of load from another
    process neither bends the measured shape nor lands on one entry only."""
    best = [float("inf")] * len(passes)
    for round_ in range(repeats + 1):
        for i, run in enumerate(passes):
            elapsed = run()
            if round_:
                best[i] = min(best[i], elapsed)
    return best


def _plain_linear(head):
    """The head's weight and bias if it is a plain ``nn.Linear`` whose ``forward`` nobody replaced."""
    if type(head) is not torch.nn.Linear or "forward" in head.__dict__:
        return None
    return head.weight, head.bias


def _product(weight, bias, flat, target, transposed):
    """``flat @ weight.T + bias`` for the rows of ``flat``, computed on ``target`` rows in the given order."""
    rows = flat.shape[0]
    if target > rows:
        flat = torch.cat([flat, flat.new_zeros(target - rows, flat.shape[1])])
    out = torch.mm(weight, flat.t()).t() if transposed else torch.nn.functional.linear(flat, weight)
    out = out[:rows]
    if bias is not None:
        out = out + bias
    return out.contiguous()


@torch.no_grad()
def measure_head_plan(model, max_rows=MAX_PADDED_ROWS, wide_rows=WIDE_ROWS, repeats=3):
    """The ``HeadPlan`` that is fastest for this model's output layer on its device and dtype."""
    linear = _plain_linear(model.get_output_embeddings())
    if linear is None:
        return HeadPlan.identity(max_rows)
    weight, bias = linear
    g = torch.Generator().manual_seed(0)
    sizes = list(range(1, max_rows + 1)) + [r for r in wide_rows if r > max_rows]
    inputs = {r: torch.randn((r, weight.shape[1]), generator=g).to(device=weight.device, dtype=weight.dtype)
              for r in sizes}

    def timed(rows, transposed):
        t0 = time.perf_counter()
        _product(weight, bias, inputs[rows], rows, transposed)
        if weight.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    shapes = [(r, t) for r in sizes for t in (False, True)]
    seconds = dict(zip(shapes, fastest_of_rounds([functools.partial(timed, r, t) for r, t in shapes], repeats)))
    pad_to, transposed = [0], [False]
    for rows in range(1, max_rows + 1):
        best = min(((r, t) for r in range(rows, max_rows + 1) for t in (False, True)), key=seconds.get)
        if seconds[best] >= CLEAR_GAIN * seconds[(rows, False)]:
            best = (rows, False)
        pad_to.append(best[0])
        transposed.append(best[1])
    wide = tuple((r, seconds[(r, True)] < CLEAR_GAIN * seconds[(r, False)]) for r in sizes[max_rows:])
    return HeadPlan(tuple(pad_to), tuple(transposed), wide)


@contextlib.contextmanager
def planned_head(model, plan):
    """Within the block, the output layer computes its product as ``plan`` says (see the module doc)."""
    head = model.get_output_embeddings()
    linear = _plain_linear(head)  # None for a missing head too
    if linear is None or plan.is_identity:
        yield
        return
    weight, bias = linear

    def forward(x):
        flat = x.reshape(-1, x.shape[-1])
        target, transposed = plan.choice(flat.shape[0])
        return _product(weight, bias, flat, target, transposed).reshape(*x.shape[:-1], weight.shape[0])

    head.forward = forward  # an instance attribute: nn.Module.__call__ runs it, hooks included
    try:
        yield
    finally:
        del head.forward

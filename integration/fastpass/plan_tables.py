"""The tables ``linear_plan`` keeps per weight shape: which form each product takes, on how many rows, and the
forms themselves (cached as JSON by ``calibration``)."""

import dataclasses

# the forms a product is raced in: ``x @ W.T`` (``nn.Linear``'s), ``W @ x.T`` copied back to rows
# (``transposed_product``), and oneDNN's matmul over the same weight (``onednn_product``), where it runs
PLAIN, TRANSPOSED, ONEDNN = 0, 1, 2
FORMS = (PLAIN, TRANSPOSED, ONEDNN)
MAX_PADDED_ROWS = 8


@dataclasses.dataclass(frozen=True)
class LinearPlan:
    """``pad_to[m]`` rows (``m <= pad_to[m] <= len(pad_to) - 1``) and ``forms[m]`` (one of ``FORMS``; False and
    True read as ``PLAIN`` and ``TRANSPOSED``) for ``m`` rows (index 0 unused); above that, ``wide`` holds
    ``(rows, form)`` for row counts up to ``rows`` (the last entry also for any more)."""

    pad_to: tuple
    forms: tuple
    wide: tuple = ()

    def __post_init__(self):
        if len(self.pad_to) < 1 or len(self.forms) != len(self.pad_to):
            raise ValueError("pad_to and forms must be equally long, index 0 unused")
        if any(f not in FORMS for f in self.forms) or any(f not in FORMS for _, f in self.wide):
            raise ValueError(f"forms must be among {FORMS}, got {self.forms} and wide {self.wide}")
        object.__setattr__(self, "forms", tuple(int(f) for f in self.forms))
        object.__setattr__(self, "wide", tuple((int(r), int(f)) for r, f in self.wide))
        top = len(self.pad_to) - 1
        if any(not m <= p <= top for m, p in enumerate(self.pad_to) if m):
            raise ValueError(f"pad_to[m] must lie in [m, {top}], got {self.pad_to}")
        if any(not rows > top for rows, _ in self.wide) or list(self.wide) != sorted(self.wide):
            raise ValueError(f"wide rows must rise and exceed {top}, got {self.wide}")

    @classmethod
    def identity(cls, max_rows=MAX_PADDED_ROWS):
        return cls(tuple(range(max_rows + 1)), (PLAIN,) * (max_rows + 1))

    def choice(self, rows):
        """``(padded rows, form)`` for a call with ``rows`` rows."""
        if rows < len(self.pad_to):
            return self.pad_to[rows], self.forms[rows]
        for upper, form in self.wide:
            if rows <= upper:
                return rows, form
        return rows, (self.wide[-1][1] if self.wide else PLAIN)

    @property
    def is_identity(self):
        return (
            all(p == m for m, p in enumerate(self.pad_to)) and not any(self.forms) and not any(f for _, f in self.wide)
        )

    def to_json(self):
        return {"pad_to": list(self.pad_to), "forms": list(self.forms), "wide": [[r, f] for r, f in self.wide]}

    @classmethod
    def from_json(cls, data):
        return cls(
            tuple(int(p) for p in data["pad_to"]),
            tuple(int(f) for f in data["forms"]),
            tuple((int(r), int(f)) for r, f in data["wide"]),
        )


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

    def joined(self, other):
        """These plans and ``other``'s as one ``LinearPlans``, ``other``'s taken for a shape both hold (a plans file
        cached before the output layer's was kept apart holds that layer's too)."""
        merged = dict(self.by_shape)
        merged.update(other.by_shape)
        return LinearPlans(tuple(sorted(merged.items(), key=lambda pair: pair[0])))

    @property
    def is_identity(self):
        return all(plan.is_identity for _, plan in self.by_shape)

    def to_json(self):
        return [{"shape": list(shape), "plan": plan.to_json()} for shape, plan in self.by_shape]

    @classmethod
    def from_json(cls, data):
        return cls(
            tuple(sorted((tuple(int(n) for n in item["shape"]), LinearPlan.from_json(item["plan"])) for item in data))
        )

"""The fast pass: the verification pass computed faster on CPUs, with the same tokens.

Each part keeps the target's output exact and is active only where it pays (see docs/fast-pass.md):

- linear plans (``linear_plan``): each linear layer's product in the form raced fastest for its shape and row
  count (plain, transposed, oneDNN, padded rows), measured once per machine by the calibration;
- lean decoder layers (``lean_layers``): transformers' own operations in the same order without its per-call
  plumbing, installed only after a prefill gave bit-identical hidden states, grouped key/value heads attended as
  they are (``attention``);
- the screened output layer (``screened_head``, ``screened_sampling``): a greedy pass, or a sampled pass with a
  top-k cut, scores the vocabulary in bfloat16 and only the candidates that can win in fp32;
- the staged output layer (``staged_head``, off by default): the rows after a first stage computed only where the
  draft held through it.

The loop calls ``FastPass.for_run`` once per request and runs its passes inside ``installed``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .lean_layers import lean_layers as lean_decoder_layers
from .lean_layers import verified as lean_verified
from .linear_plan import LinearPlans, planned_linears
from .screened_head import screen_for_run, timed_like_calibration
from .staged_head import StagedHead


@dataclass(frozen=True, slots=True)
class FastPassOptions:
    """Which parts of the fast pass a generator may use. ``enabled=False`` turns every part off: each pass is then
    transformers' own forward. ``screened_head`` lets greedy and top-k sampled passes choose tokens through the
    screened output layer; ``staged_head`` lets the adaptive policy ask for the output layer in two stages."""

    enabled: bool = True
    screened_head: bool = True
    staged_head: bool = False

    def __post_init__(self) -> None:
        for name in ("enabled", "screened_head", "staged_head"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {type(getattr(self, name)).__name__}")

    @classmethod
    def of(cls, value: bool | FastPassOptions | None) -> FastPassOptions:
        """``value`` as options: True or None the defaults, False everything off; anything else refused."""
        if value is None or value is True:
            return cls()
        if value is False:
            return cls(enabled=False, screened_head=False, staged_head=False)
        if not isinstance(value, cls):
            raise TypeError(f"fast_pass must be a bool or a FastPassOptions, got {type(value).__name__}")
        return value


class FastPass:
    """One request's fast pass: the staged and screened output layers chosen for its plan, and the rest installed
    on the model by ``installed`` for the duration of its loop."""

    def __init__(self, model: Any, options: FastPassOptions, staging: StagedHead | None, screen, top_k) -> None:
        self.model = model
        self.options = options
        self.staging = staging  # a ``StagedHead`` (hooks installed by ``installed``), or None: never staged
        self.screen = screen  # a ``ScreenedHead`` for this run, or None: never screened
        self.top_k = top_k  # a sampled run's top-k cut that the screen serves; greedy: None

    @classmethod
    def for_run(cls, model: Any, plan: Any, stages: bool, options: FastPassOptions) -> FastPass:
        """The fast pass for a run planned as ``plan`` (``generation_plan``); ``stages``: whether the proposer may
        ask for a staged output layer. The lean layers are checked here, once a model, before any hook is on it."""
        if not options.enabled:
            return cls(model, options, None, None, None)
        lean_verified(model)
        staging = StagedHead(model) if stages else None
        screen, top_k = screen_for_run(model, plan, staging, options.screened_head)
        return cls(model, options, staging, screen, top_k)

    def screens(self, rows: int) -> bool:
        """Whether a pass over ``rows`` rows chooses its tokens through the screen rather than returning logits."""
        return self.screen is not None and self.screen.screens(rows)

    @property
    def stages(self) -> bool:
        """Whether a pass can compute the output layer in two stages on this model."""
        return self.staging is not None and self.staging.supported

    def timed_like_calibration(self, plan: Any) -> bool:
        """Whether this run's passes are the kind the cost curve is timed over (greedy, screened wherever the
        model's output layer may be): only such runs teach the cost model beyond themselves."""
        return self.options.enabled and timed_like_calibration(self.model, plan, self.screen)

    def output_layer_hooks(self) -> contextlib.AbstractContextManager:
        """The staged output layer's hooks on ``model`` for the whole request, prefill included (it checks them)."""
        return self.staging.installed() if self.staging is not None else contextlib.nullcontext()

    @contextlib.contextmanager
    def installed(self, plans: LinearPlans | None) -> Iterator[FastPass]:
        """Within the block, the decode passes' parts are on ``model``: the linear layers' ``plans`` (None: none)
        and the lean layers. All are taken off when it ends, an error or not."""
        if not self.options.enabled:
            yield self
            return
        with contextlib.ExitStack() as stack:
            if plans is not None:
                stack.enter_context(planned_linears(self.model, plans))
            stack.enter_context(lean_decoder_layers(self.model))
            yield self


__all__ = ["FastPass", "FastPassOptions"]

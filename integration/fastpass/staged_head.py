"""The output layer of a verification pass computed in two stages: first over the rows that check the draft's
first tokens, then over the rest only where those tokens were all accepted.

Gemma 3 270M's output layer (262,144 x 640) is 40-60 % of a pass on a 2-core CPU (the body 166 ms of a 64-token
pass, the output layer 261 ms), and every row after the draft's first rejected token is computed for nothing. The
adaptive policy says, per pass, how many rows to compute first (``AdaptiveProposer.first_rows``, by the expected
cost under its acceptance model: an extra product where the draft holds, the rows after the first stage saved
where it fails early); the loop then computes the rest only where needed.

``StagedHead`` does it without knowing the architecture: a hook on the model's output embedding module keeps the
hidden states of the rows past the first stage and lets the module compute the first stage's rows only. That is
exact where the model returns the module's output as its logits, as it is (or cast to another dtype): a model
that changes them afterwards (a soft cap, a scale) is found at the prefill, where the hook sees the output once,
and is never staged.
"""

import contextlib
import logging
import time

import torch

logger = logging.getLogger(__name__)


class _OutputLayerHooks:
    """A pre-hook (``_before``) and a hook (``_after``) on ``model``'s output embedding module, installed for a
    block by ``installed`` (nothing where the model has no such module)."""

    def __init__(self, model):
        head = model.get_output_embeddings() if callable(getattr(model, "get_output_embeddings", None)) else None
        self.head = head if isinstance(head, torch.nn.Module) else None

    @contextlib.contextmanager
    def installed(self):
        if self.head is None:
            yield self
            return
        handles = [self.head.register_forward_pre_hook(self._before), self.head.register_forward_hook(self._after)]
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()
            self._removed()

    def _removed(self):
        """What to forget once the hooks are gone."""


class StagedHead(_OutputLayerHooks):
    """Hooks on ``model``'s output embedding module (none where it has none: nothing is ever staged), installed
    for a generation by ``installed``."""

    def __init__(self, model):
        super().__init__(model)
        self.supported = False  # known at the prefill: the model returns the module's output as its logits
        self._first_rows = None  # set for one pass: the rows the module computes now
        self._rest = None  # the hidden states of the rows after them
        self._output = None  # the module's latest output and its version (an in-place change bumps it)
        self._inside = False  # the second stage's own call, which the hooks leave alone
        self._dtype = None  # the dtype the model casts the module's output to, if any

    def _removed(self):
        self._first_rows = self._rest = self._output = None

    def _before(self, module, args):
        if self._inside or self._first_rows is None or not args:
            return None
        hidden = args[0]
        self._rest = hidden[..., self._first_rows :, :]
        return (hidden[..., : self._first_rows, :],) + tuple(args[1:])

    def _after(self, module, args, output):
        if not self._inside:
            self._output = (output, output._version) if isinstance(output, torch.Tensor) else None

    def check_prefill(self, logits):
        """After the prefill's model call, with the logits it returned: whether they are the module's output
        (or that cast to their dtype), so that rows the module computes later are the model's logits too."""
        seen, self._output = self._output, None
        self.supported, self._dtype = returned_as_logits(seen, logits)
        if not self.supported:
            logger.debug(
                "draftless: the model changes its output layer's products before returning them as "
                "logits; every pass computes the output layer whole"
            )
        return self.supported

    @contextlib.contextmanager
    def first_stage(self, rows):
        """Within the block, the model's call computes the output layer over its first ``rows`` rows only."""
        self._first_rows, self._rest = rows, None
        try:
            yield
        finally:
            self._first_rows = None

    def rest(self):
        """The logits of the rows after the first stage (the last pass's), computed now."""
        if self._rest is None:
            raise RuntimeError("no first stage was computed")  # pragma: no cover - the loop's own order
        hidden, self._rest = self._rest, None
        self._inside = True
        try:
            out = self.head(hidden)
        finally:
            self._inside = False
        return out if self._dtype is None else out.to(self._dtype)


def returned_as_logits(seen, logits):
    """``(returned, dtype)``: whether ``logits`` (what a model call returned) are its output layer's output
    ``seen`` (``(output, its version then)``, None if unseen) unchanged, and the dtype the model cast it to (None
    for none). An output changed in place since (its version moved) is not."""
    if seen is None:
        return False, None
    output, version = seen
    if output._version != version or output.shape != logits.shape:
        return False, None
    if output is logits or (output.dtype == logits.dtype and output.data_ptr() == logits.data_ptr()):
        return True, None
    if output.dtype != logits.dtype and torch.equal(output.to(logits.dtype), logits):
        return True, logits.dtype
    return False, None


def accept_in_stages(accept, first, rest, draft, prefix_ids, processors):
    """``accept``'s ``(n, tokens, scores)`` and the logits used, for a pass whose logits come in two stages:
    ``first`` (rows 0 .. f - 1, checking ``draft[:f]``) and ``rest()`` (the rows after them, computed only where
    the first stage accepted all of ``draft[:f]``). The first stage's last row is taken as the pass's bonus row,
    and its token compared with ``draft[f - 1]``: the token a plain step there would choose (greedy) or draw
    (sampling, by the position's uniform), as ``accept`` at a draft position decides. ``head_rows`` (the row
    counts of the output layer's products) is returned last."""
    f = first.shape[0]
    n, tokens, scores = accept(first, draft[: f - 1], prefix_ids, processors)
    if n < f - 1 or int(tokens[-1]) != int(draft[f - 1]):
        return n, tokens, scores, first, (f,)
    more = rest()
    later = torch.cat([prefix_ids, draft[:f].view(1, -1).to(prefix_ids.dtype)], dim=1)
    n2, tokens2, scores2 = accept(more, draft[f:], later, processors)
    logits = torch.cat([first, more])
    return (
        f + n2,
        torch.cat([draft[:f], tokens2.to(draft.dtype)]),
        torch.cat([scores, scores2]),
        logits,
        (f, more.shape[0]),
    )


class HeadClock(_OutputLayerHooks):
    """Times ``model``'s output embedding module within each pass (hooks, installed for a block by
    ``installed``; on a GPU synchronised at both ends): ``last`` holds the seconds of its latest call, None where
    it was not called (no such module)."""

    def __init__(self, model):
        super().__init__(model)
        self.last = None
        self._start = None

    def _sync(self):
        if self.head.weight.device.type == "cuda":
            torch.cuda.synchronize(self.head.weight.device)

    def _before(self, module, args):
        self._sync()
        self._start = time.perf_counter()

    def _after(self, module, args, output):
        self._sync()
        self.last = time.perf_counter() - self._start

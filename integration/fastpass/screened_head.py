"""The greedy loop's output layer screened in bfloat16: each row's token chosen exactly as the fp32 argmax, from a
bfloat16 product over every vocabulary row and fp32 products over the few rows that could win.

A greedy pass without logits processors, scores or logits to return needs one thing from the output layer: the
argmax of each row. Gemma 3 270M's output layer (262,144 x 640) is 40-60 % of a pass on a 2-core CPU, and a
processor with bfloat16 dot products (AVX-512 BF16, AMX) multiplies in bfloat16 at twice fp32's rate. So for a
pass over ``rows >= SCREEN_FROM_ROWS`` rows, ``ScreenedHead`` replaces the output layer's product by

1. ``s = bf16(x) @ bf16(W).T`` (bfloat16 operands, fp32 sums, a bfloat16 result), through oneDNN or torch's
   weight-major product, whichever is faster on this host (``screen_product``);
2. a bound ``B`` per row on ``|s_j - x . W_j|`` for every token j (``screen_bound``: the rounding of both operands
   known, as both are; 3-5 times tighter than their worst case );
3. the candidates ``s_j >= max(s) - 2B``, found in one pass over each row (``screen_candidates``), each scored in
   fp32, the highest taken (the lowest id on a tie).

Told the pass's draft, it scores no row after the first whose draft token is not among its candidates: that row's
draft token is certainly rejected, so greedy acceptance reads no row after it (``acceptance.accept_choices``), and
those rows' choices are their bfloat16 best, not exact. A safeguard: conditioned on a rejected token the model may
hesitate, and a flat row would take the whole fp32 product; on Gemma 3 270M's code_edit, qa and repetitive none
did, and the cut left 9-27 % of the candidates unscored, about a millisecond a suite .

Every token j left out has ``x . W_j <= s_j + B < max(s) - B <= x . W_a`` (a: the bfloat16 argmax), so it
cannot be the fp32 argmax: the choice is the fp32 argmax, only the rounding of its fp32 sum taken in another
order (as the planned forms' are, ``linear_plan``). Replacing the module's forward, the model's call returns the
hidden rows in place of logits; the loop reads ``choices``. Served only where the model returns its output
layer's product unchanged as the logits (checked at the prefill) and keeps a bfloat16 copy of the weight
(Gemma 3 270M: 335 MB beside the 1.07 GB model). A sampled run whose processors cut each row to its top k
tokens is screened too: its rows are then fp32 logits over the tokens that can survive the cut
(``screened_sampling``); ``screen_for_run`` says which runs are screened.
"""

import contextlib
import math
import weakref

import torch

from ..store import cached, cpuinfo_field
from .onednn_product import onednn_supported
from .screen_bound import (
    SLACK_RATE,
    error_bound,  # noqa: F401 (importable from here)
    slack_base,
    weight_norms,
)
from .screen_candidates import candidates
from .screen_product import FORMS, ROWS_MAJOR, faster_form, screen_scores
from .screened_sampling import FIRST_SLACK, ScreenedRows, screened_top_k
from .staged_head import returned_as_logits

# a greedy pass over this many rows or more is screened: every pass. 9 on a host (2-core AMD EPYC with
# AVX-512 BF16), before the top-16 search; 3 from where Gemma 3 270M's passes at 3-10 rows took
# 0.69-0.99 of the plain ones' time and at 1 and 2 rows the same (0.966-1.001; median of 15 interleaved rounds, two
# contexts). On a 2-core Xeon with AMX and a 480 MiB cache, screened 1-row passes took 0.94-0.96 of the
# plain ones', and a loop that never reads the fp32 weight keeps the bfloat16 copy and the layers (735 MB) apart
# from it (1.07 GB): from 1 row, Gemma's six suites decoded 0.7-4.8 % faster side by side (code_edit, qa, math,
# rag, summarization, translation; from 2 rows, no faster). See "Hesitant rows, and the screen from 3 rows" and
# "The screen from 1 row" in docs/evidence.md
SCREEN_FROM_ROWS = 1
# a row with more candidates than this (a flat distribution: the calibration's random tokens) takes the fp32 product
# whole. Real text's rows have 1 to 93 candidates within 2^-6-wide bounds, median 4, but where the model hesitates
# (an edit's first token, a rejected draft's next rows) 276 to 999 (Gemma 3 270M's code_edit): their
# fp32 scores gathered cost 0.5 ms at 1,024 candidates and 3.4 ms at 4,096, the whole row's product 55 ms (and
# 123 ms for two rows), so these rows cost a rejected draft's pass 50-150 ms more at a cap of 256
MAX_CANDIDATES = 4096
# candidates are scored in fp32 this many at a time, their gathered rows (2 x 4096 x 640 fp32 for Gemma: 21 MB) the
# only temporary the size of the candidates, whatever the pass's rows
CANDIDATE_BLOCK = 4096
# output layers with fewer weights are never screened. 64M before: under the bound that took both
# operands' rounding at its worst, SmolLM2-135M's (49,152 x 576, 28M) decoded its code_edit 9 % (EPYC) and 21 %
# (Xeon) slower screened, most of its rows having thousands of candidates; under ``screen_bound`` (2.2 candidates a
# row against 6,406 on real rows) 1.074x faster on code_edit and 1.046-1.077x on qa, math, rag and translation
# ('s Xeon). Smaller layers are not measured: this admits SmolLM2's and no smaller
MIN_WEIGHTS = 24 << 20
_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
# the calibration cache's name for the bfloat16 product's form raced on this host (``screen_product``)
SCREEN_FORM_KIND = "screen-form-v1"
_SCREENS = weakref.WeakKeyDictionary()  # output layer -> its ScreenedHead: one bfloat16 copy per weight


def native_bf16():
    """Whether this CPU multiplies bfloat16 natively (AVX-512 BF16 or AMX; read from ``/proc/cpuinfo``): without,
    oneDNN's bfloat16 products run slower than fp32's and screening would cost time."""
    return any(flag in (cpuinfo_field("flags") or "").split() for flag in _BF16_FLAGS)


@torch.no_grad()
def bfloat16_copy(weight):
    """``(weight in bfloat16, norms)``: norms the nine largest row norms ``error_bound`` takes (``weight_norms``:
    L2, L1 and max of the weight, of its bfloat16 rounding and of the copy), all nan where a weight is nan, not
    all finite where a weight or its copy is infinite."""
    low = weight.to(torch.bfloat16).contiguous()
    return low, weight_norms(weight, low)


def product_form(model, low):
    """The faster form of the screen's product by ``low`` (the bfloat16 copy of ``model``'s output layer) on this
    host, raced once (``screen_product.faster_form``) and cached with the calibration."""
    return cached(model, SCREEN_FORM_KIND, lambda: faster_form(low), lambda form: {"form": form}, decode_form)


def decode_form(data):
    """The product form cached as ``SCREEN_FORM_KIND`` (``{"form": ...}``), or None where it is none of ``FORMS``."""
    return data["form"] if data["form"] in FORMS else None


class ScreenedHead:
    """A model's output layer screened in bfloat16 for greedy passes (see the module doc); ``for_model`` builds it
    where it can serve."""

    def __init__(self, head, onednn=None, copy=None, form=ROWS_MAJOR):
        if form not in FORMS:
            raise ValueError(f"form must be one of {FORMS}, got {form!r}")
        self._head = weakref.ref(head)  # not the module itself: the cache of screens is keyed by it
        weight = head.weight.detach()
        self.weight = weight
        self.low, self.norms = bfloat16_copy(weight) if copy is None else copy  # copy: ``bfloat16_copy``'s
        # through oneDNN where it multiplies bfloat16 (None: try it), else torch's own product (slower; tests anywhere)
        self.onednn = onednn_supported(self.low[:64]) if onednn is None else onednn
        self.form = form  # the bfloat16 product's form (``screen_product``): ``for_model`` races for it
        self.from_rows = SCREEN_FROM_ROWS  # passes over fewer rows take the layer's own product
        self.supported = False  # known at the prefill: the model returns the layer's output as its logits
        self.choices = None  # the latest screened pass's token per row (up to a certain rejection: ``argmax``)
        self._seen = None
        self._timing = False
        self._top_k = None
        self._rows = None
        self.sampling_slack = FIRST_SLACK  # where the last sampled pass's rows found their top k (``ScreenedRows``)
        self._version = (weight.data_ptr(), weight._version)

    @classmethod
    def for_model(cls, model, min_weights=None):
        """The ``ScreenedHead`` of ``model`` (one per output layer and weight, kept while the model lives), or None
        where it cannot pay or serve: where not ``may_serve`` (off the CPU, not fp32, an output layer that is not a
        plain bias-free ``nn.Linear`` or has fewer than ``min_weights`` weights, no native bfloat16), a weight not
        finite, or no oneDNN bfloat16 product."""
        if not cls.may_serve(model, min_weights):
            return None
        head = model.get_output_embeddings()
        screen = _SCREENS.get(head)
        if screen is not None and screen._version == (head.weight.data_ptr(), head.weight._version):
            return screen
        copy = bfloat16_copy(head.weight.detach())
        if not all(math.isfinite(n) for n in copy[1]):
            return None  # a weight not finite: no bound holds
        if not onednn_supported(copy[0][:64]):
            return None  # no fast bfloat16 product: screening would cost time
        _SCREENS[head] = screen = cls(head, onednn=True, copy=copy, form=product_form(model, copy[0]))
        return screen

    @staticmethod
    def may_serve(model, min_weights=None):
        """Whether ``for_model`` may build a screen for ``model``, by what it checks without copying the weight:
        a plain bias-free fp32 ``nn.Linear`` output layer on the CPU of at least ``min_weights`` (by default
        ``MIN_WEIGHTS``) weights, and native bfloat16 (a weight not finite or no oneDNN product still refuse)."""
        head = model.get_output_embeddings() if callable(getattr(model, "get_output_embeddings", None)) else None
        if type(head) is not torch.nn.Linear or head.bias is not None or head.weight.device.type != "cpu":
            return False
        least = MIN_WEIGHTS if min_weights is None else min_weights
        return head.weight.dtype == torch.float32 and head.weight.numel() >= least and native_bf16()

    def screens(self, rows):
        """Whether a greedy pass over ``rows`` rows is screened: the model's logits are the layer's output (checked
        at the prefill) and ``rows`` reaches ``from_rows``."""
        return self.supported and rows >= self.from_rows

    @property
    def head(self):
        """The output layer screened."""
        return self._head()

    @contextlib.contextmanager
    def checking_prefill(self):
        """Within the block (the prefill's model call), note the output layer's output, for ``check_prefill``."""
        handle = self.head.register_forward_hook(self._note)
        try:
            yield
        finally:
            handle.remove()

    def _note(self, module, args, output):
        self._seen = (output, output._version) if isinstance(output, torch.Tensor) else None

    def check_prefill(self, logits):
        """Whether the model returned its output layer's output unchanged as ``logits`` (or only cast; a soft cap
        or a scale after it, in place or not, would change the argmax's meaning): only then are passes screened."""
        seen, self._seen = self._seen, None
        self.supported = returned_as_logits(seen, logits)[0]
        return self.supported

    @contextlib.contextmanager
    def choosing(self, timing=False, draft=None, top_k=None, rows=None):
        """Within the block, the output layer returns its input (the hidden rows) and leaves each row's token in
        ``choices`` (``argmax``, ``timing`` and ``draft`` as it takes them); with ``top_k`` (a sampled pass whose
        processors cut each row to its top k: ``screened_sampling``), the rows as ``ScreenedRows`` instead. With
        ``rows`` (1-D long, indices into the pass's rows flattened), only those rows are chosen for, in that order:
        a batch's pass leaves its padding out. Its own forward (a planned product, or none) is restored after."""
        before = self.head.__dict__.get("forward")
        self.head.forward = self._forward
        self._timing, self._draft, self._top_k, self._rows = timing, draft, top_k, rows
        try:
            yield
        finally:
            self._timing, self._draft, self._top_k, self._rows = False, None, None, None
            if before is None:
                del self.head.forward
            else:
                self.head.forward = before

    def _forward(self, hidden):
        rows = hidden.reshape(-1, hidden.shape[-1])
        if self._rows is not None:
            rows = rows[self._rows]
        if self._top_k is not None:
            self.choices = ScreenedRows(self, rows, self._top_k)
        else:
            self.choices = self.argmax(rows, self._timing, self._draft)
        return hidden

    def argmax(self, rows, timing=False, draft=None):
        """The fp32 argmax of ``rows @ W.T`` per row (the lowest token id on a tie), through the screen. A row with
        more than ``MAX_CANDIDATES`` candidates (a flat distribution) takes the fp32 product whole. With ``timing``
        (the calibration's passes over random tokens and keys, whose rows are all flat), only the tokens at each
        row's bfloat16 maximum are candidates, as few as a row of real text has: the cost of a real pass, but
        not an exact choice. With ``draft`` (1-D, the token each of the first rows is checked against: row i
        scores the token after draft token i - 1), exact up to the first row whose draft token is no candidate,
        the rows after it their bfloat16 best (``cut_after_certain_rejection``)."""
        if not bool(torch.isfinite(rows).all()):  # no bound holds: the fp32 product whole
            return torch.nn.functional.linear(rows, self.weight).argmax(dim=-1)
        low = screen_scores(self.low, rows.to(torch.bfloat16), self.form, self.onednn)
        if timing:  # each row's maximum its only candidate
            listed, counts, low_best = candidates(low, torch.zeros(rows.shape[0], dtype=torch.float64), MAX_CANDIDATES)
        else:  # within twice ``screen_bound``'s bound of it
            listed, counts, low_best = candidates(
                low, slack_base(rows, self.norms, rows.shape[1]), MAX_CANDIDATES, SLACK_RATE
            )
        flat = counts > MAX_CANDIDATES
        counts[flat] = 0  # a flat row's candidates are not listed: it takes the fp32 product whole
        q = rows.shape[0]
        at = torch.repeat_interleave(torch.arange(q), counts)
        token = listed[torch.arange(listed.shape[1])[None, :] < counts[:, None]]
        choices = torch.full((q,), self.weight.shape[0], dtype=torch.long)
        if draft is not None:
            at, token = cut_after_certain_rejection(at, token, draft, low_best, choices, flat)
        if bool(flat.any()):
            wide = flat.nonzero().flatten()
            choices[wide] = torch.nn.functional.linear(rows[wide], self.weight).argmax(dim=-1)
        exact = torch.cat(
            [
                (rows[a] * self.weight[t]).sum(dim=1)  # split yields one empty block where at is empty
                for a, t in zip(at.split(CANDIDATE_BLOCK), token.split(CANDIDATE_BLOCK))
            ]
        )
        best = torch.full((q,), -float("inf")).scatter_reduce(0, at, exact, "amax")
        won = exact == best[at]
        return choices.scatter_reduce(0, at[won], token[won], "amin")


def screen_for_run(model, plan, staging, enabled=True):
    """``(screen, top_k)`` for a run planned as ``plan`` (``generation_plan``): ``model``'s ``ScreenedHead`` where
    the run needs only each row's argmax (greedy, no logits processors) or, sampled, only each row's top k tokens
    (``screened_top_k``), returns no scores or logits, does not stage the output layer (``staging`` None) and
    ``enabled`` (``AdaptiveConfig.screened_head``); else ``(None, None)``. ``top_k`` is a sampled run's cut, None
    for a greedy run."""
    top_k = screened_top_k(plan.processors) if plan.do_sample else None
    whole_rows = top_k is None if plan.do_sample else len(plan.processors) > 0  # processors read every logit
    if whole_rows or plan.output_scores or plan.output_logits or staging is not None or not enabled:
        return None, None
    screen = ScreenedHead.for_model(model)
    return screen, (top_k if screen is not None else None)


def timed_like_calibration(model, plan, screen):
    """Whether a run planned as ``plan`` (``generation_plan``) makes the passes the cost curve is timed over
    (``calibration.measure_cost_curve``): greedy, its output layer screened (``screen``, from ``screen_for_run``)
    wherever the model's may be. A sampled pass also scores the rows it reads and its drafts are short, and an
    unscreened output layer on such a model costs a third to a half of a pass more: learned into the curve's shape
    kept across runs, such passes made Gemma 3 270M's greedy code_edit draft shorter (0.70 of the oracle against
    0.77 with no shape kept; "Sampled runs taught the kept shape to price short drafts low" in
    ``docs/evidence.md``)."""
    return not plan.do_sample and (screen is not None or not ScreenedHead.may_serve(model))


def cut_after_certain_rejection(at, token, draft, best, choices, flat):
    """The candidates ``(at, token)`` (row, token pairs) of the rows up to the first row i < len(draft) whose
    draft token ``draft[i]`` is none of its candidates; ``choices`` of the rows after it set to ``best`` (their
    bfloat16 best) and ``flat`` (rows whose candidates are not listed, so never so cut) cleared after it, in
    place. Row i's fp32 argmax is one of its candidates, so it differs from ``draft[i]``: greedy acceptance
    stops at row i at the latest and never reads a later row's choice."""
    k = min(int(draft.shape[0]), choices.shape[0])
    if k == 0:
        return at, token
    checked = at < k
    row, candidate = at[checked], token[checked]
    held = flat[:k].clone()  # a flat row's draft token may be among its candidates
    held[row[candidate == draft[row]]] = True  # rows whose draft token is a candidate
    if bool(held.all()):
        return at, token
    first = int((~held).nonzero()[0])
    choices[first + 1 :] = best[first + 1 :]
    flat[first + 1 :] = False
    keep = at <= first
    return at[keep], token[keep]

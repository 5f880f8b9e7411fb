"""Sampled passes through the screen (``ScreenedHead``): where a sampled run's logits processors keep no more than
each row's top k tokens, only tokens that can be among them are scored in fp32.

A sampled pass reads, for each row the speculative-sampling rule reaches (``acceptance.sample_accept``), the
processed distribution: transformers' default for ``do_sample=True`` is a top-k cut (k = 50), then top-p or min-p
where set, after a temperature. Behind a top-k cut every token below the row's k-th highest logit ``v_k`` has
probability 0, so the distribution is the processors' output over the tokens that reach ``v_k``. The bfloat16
screen finds them: with ``e(s) = E0 + u |s| / (1 - u)`` the bound on ``|s_j - r_j|`` for a token scored ``s_j``
(``screen_bound``: ``|s_j - r_j| <= E0 + u |t_j|`` and ``|t_j| <= |s_j| / (1 - u)``), and ``S_k`` the row's k-th
highest bfloat16 score, the k tokens scored at or above ``S_k`` have logits at least ``L = S_k - e(S_k)``
(``s - e(s)`` rises with ``s``), so ``v_k >= L``; a token can reach ``v_k`` only where ``s_j + e(s_j) >= L``
(``s + e(s)`` rises too). Those candidates, scored in fp32 and laid out in increasing token id, are the row: the
processors cut it as they cut the whole row (the same k-th value, the same survivors, the same softmax over them),
and a uniform falls in the same token's interval of the cumulative distribution, as tokens of probability 0 hold
no interval (``acceptance.draw_token``). Only the fp32 rounding of each candidate's sum differs, as in the greedy
screen and the planned linear layers.

Served only where every processor is one of ``TemperatureLogitsWarper`` (before the top-k cut),
``TopKLogitsWarper`` and, after it, ``TopPLogitsWarper`` or ``MinPLogitsWarper``, each cutting to -inf: a
repetition penalty, a bad-words list, a minimum length or any other processor may lift or drop a token the
candidates leave out, and then the run multiplies by the whole output layer as before.
"""

import math

import numpy as np
import torch
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from .screen_bound import U, error_bound
from .screen_candidates import candidates
from .screen_product import screen_scores

# a top-k cut keeping more tokens than this is not screened: the candidates would cost more than the product saves
MAX_TOP_K = 1024
# a row with more candidates than this (a flat distribution) is scored whole, as the greedy screen does
MAX_ROW_CANDIDATES = 4096
# the first slack (in logits) within which a row's best tokens are listed to find its k-th highest score
# (``ScreenedRows._top_listed``); later rows start from the slack the last row found its top k in
FIRST_SLACK = 1.0
_AFTER_CUT = (TopPLogitsWarper, MinPLogitsWarper)


def screened_top_k(processors):
    """The k of ``processors``' top-k cut where a screened pass can serve them exactly (see the module doc), else
    None: a ``TopKLogitsWarper`` of at most ``MAX_TOP_K`` tokens, only ``TemperatureLogitsWarper`` before it and
    only ``TopPLogitsWarper`` and ``MinPLogitsWarper`` after it, every cut to -inf."""
    top_k = None
    for processor in processors:
        kind = type(processor)
        if kind is TemperatureLogitsWarper and top_k is None:
            continue
        if kind is TopKLogitsWarper and top_k is None and _cuts_to_minus_inf(processor):
            top_k = int(processor.top_k)
            continue
        if kind in _AFTER_CUT and top_k is not None and _cuts_to_minus_inf(processor):
            continue
        return None
    return top_k if top_k is not None and 0 < top_k <= MAX_TOP_K else None


def _cuts_to_minus_inf(processor):
    value = getattr(processor, "filter_value", None)
    return isinstance(value, float) and value == -float("inf")


class ScreenedRows:
    """A sampled pass's rows through the screen: ``row(i)`` is row i's fp32 logits over its candidates and their
    token ids (see the module doc), computed on first read; ``len`` the pass's rows. The bfloat16 product over
    every row is taken when built (in the pass, as the greedy screen's)."""

    def __init__(self, screen, hidden, top_k):
        if type(top_k) is not int or not 0 < top_k <= MAX_TOP_K:
            raise ValueError(f"top_k must be an int in [1, {MAX_TOP_K}], got {top_k!r}")
        self.screen = screen  # ``screen.sampling_slack``: where the last row read found its top k
        self.weight = screen.weight
        self.hidden = hidden  # (rows, features) fp32
        self.top_k = top_k
        self.finite = bool(torch.isfinite(hidden).all())  # no bound holds otherwise: every row scored whole
        if self.finite:
            self.low = screen_scores(screen.low, hidden.to(torch.bfloat16), screen.form, screen.onednn)
            self.e0 = error_bound(hidden, screen.norms, hidden.shape[1]).tolist()
        self.whole = 0  # rows scored whole (not finite, a flat distribution, a cut wider than the vocabulary)

    def __len__(self):
        return self.hidden.shape[0]

    def __getitem__(self, index):  # the loop slices the pass's logits for what it returns: none kept here
        return self

    def row(self, i):
        """``(scores, ids)``: row i's fp32 logits, ``(1, n)``, over its candidates ``ids`` (increasing token ids),
        or ``(logits, None)`` over the whole vocabulary where the row is scored whole."""
        x = self.hidden[i : i + 1]
        if self.finite and self.top_k < self.weight.shape[0]:
            ids = self.candidates(i)
            if ids is not None:
                return torch.nn.functional.linear(x, self.weight[ids]), ids
        self.whole += 1
        return torch.nn.functional.linear(x, self.weight), None

    def candidates(self, i):
        """Row i's candidate token ids (increasing), or None where they are more than ``MAX_ROW_CANDIDATES`` or
        the bound is not finite. Passes of ``screen_candidates.candidates`` over the row: the tokens within a slack
        of its best score that hold ``top_k`` of them (``_top_listed``) give its k-th highest score ``S_k``; the
        candidates are then every token scored at or above the lowest score whose bound reaches
        ``L`` (see the module doc), which the tokens found already hold or a last pass finds."""
        row = self.low[i : i + 1].contiguous()  # once: a row of the weight-major product's scores lies strided
        listed = self._top_listed(row)
        if listed is None:
            return None  # a flat row: thousands of tokens as high as its k-th
        slack = self.screen.sampling_slack  # the one the row's top k were found within
        scores = row[0, listed].double()
        kth = float(torch.topk(scores, self.top_k, sorted=False).values.min())
        best = float(scores.max())
        e0, rate = self.e0[i], U / (1 - U)
        least = kth - (e0 + rate * abs(kth))  # every logit of the k tokens scored at or above kth reaches it
        # the lowest score whose bound reaches ``least``: s + e0 + rate |s| rises with s; lowered by a margin far
        # above float64's rounding (and the kernel's threshold rounds down again)
        lowest = (least - e0) / (1 + rate) if least >= e0 else (least - e0) / (1 - rate)
        lowest -= 1e-6 * (abs(lowest) + e0) + 1e-30
        if not math.isfinite(lowest):
            return None
        if best - lowest <= slack:  # the tokens found hold them all
            return listed[scores >= lowest]
        listed, count = _within(row, best - lowest)
        return listed if count <= MAX_ROW_CANDIDATES else None

    def _top_listed(self, row):
        """The tokens of ``row`` within a slack of its best score that are ``top_k`` or more and at most
        ``MAX_ROW_CANDIDATES`` (the slack kept on the screen, ``ScreenedHead.sampling_slack``, for the rows after
        it), or None where no slack finds them (a flat row, or scores not finite). The slack starts where the last
        row's ended, fourfold wider or narrower until bracketed, then halfway (geometrically) between."""
        slack, low, high = self.screen.sampling_slack, 0.0, math.inf
        for _ in range(64):
            listed, count = _within(row, slack)
            if count > MAX_ROW_CANDIDATES:
                high = slack
            elif count < self.top_k:
                low = slack
            else:
                self.screen.sampling_slack = slack
                return listed
            if high < 1.01 * low or not math.isfinite(slack):
                return None
            slack = slack * 4 if high == math.inf else slack / 4 if low == 0 else math.sqrt(low * high)
        return None


def _within(row, slack):
    """``(ids, count)``: the tokens of ``row`` (``(1, vocab)`` bfloat16 scores) scored within ``slack`` of its best
    (``screen_candidates.candidates``), ids in increasing order; count above ``MAX_ROW_CANDIDATES`` where more."""
    listed, counts, _ = candidates(row, np.array([slack]), MAX_ROW_CANDIDATES)
    count = int(counts[0])
    return (listed[0, :count] if count <= MAX_ROW_CANDIDATES else None), count

"""The screen's bfloat16 product (``ScreenedHead``) in the faster of two forms on this host: oneDNN's over the
pass's rows (``onednn_product``, scores laid out rows by tokens) or torch's weight-major one, the bfloat16 weight
times the rows' transpose (``torch.mv`` for one row; scores laid out tokens by rows, which ``screen_candidates``
reads as they lie).

Both multiply bfloat16 operands with fp32 sums and round each score to bfloat16 once, so ``error_bound`` holds for
either (on Gemma 3 270M's output layer their scores differ in 1 to 6 of 100,000, a rounding apart, and their
largest error is the same 3-7 % of the bound). On a 2-core Xeon with AMX, Gemma 3 270M's 262,144 x 640
product took oneDNN 19 ms at 1 row, 20-21 ms at 2-16 and 22-29 ms at 17-33, the weight-major form 12 ms, 12 ms and
14-15 ms. Which is faster is a property of the host and its BLAS, so it is raced, not assumed.

The race multiplies the first rows of the weight, as many as the linear layers' plans are timed over
(``weight_probe.probe_bytes``: twice the last-level cache, so that they stream from memory as the whole weight
does): per row of the weight both forms run at the whole weight's rate ('s EPYC, Gemma 3 270M's 52,428
first rows and the next 52,428: 17.7-17.9 against 18.6 ms, 29.1-29.9 against 29.3, 29.0 against 29.4 and
29.1-29.4 against 29.2 per 262,144 rows, oneDNN and weight-major at 1 and 16 rows), and the race takes 0.07 s
against 0.32-0.34 s over the whole weight (Gemma's first calibration 3.92 s against 4.06 s on average, seven pairs
of runs interleaved).
"""

import time

import torch

from .onednn_product import onednn_product
from .weight_probe import probe_bytes

ROWS_MAJOR, WEIGHT_MAJOR = "rows-major", "weight-major"
FORMS = (ROWS_MAJOR, WEIGHT_MAJOR)
# the race's row counts: a plain step's and a typical draft's pass, the forms' times summed over both
RACE_ROWS = (1, 16)
# the weight-major form is taken where it takes less than this fraction of oneDNN's time: the race's noise (two
# timings each) changes nothing
CLEAR_GAIN = 0.9


def screen_scores(low, rows16, form, onednn=True):
    """``rows16 @ low.T`` (bfloat16 rows by a bfloat16 weight), ``(rows, tokens)``: in the weight-major ``form``
    the transpose of a contiguous tokens-by-rows product; else oneDNN's (or, without ``onednn``, torch's own
    rows-major product)."""
    if form == WEIGHT_MAJOR:
        return torch.mv(low, rows16[0])[None] if rows16.shape[0] == 1 else (low @ rows16.T).T
    return onednn_product(low, None, rows16) if onednn else torch.nn.functional.linear(rows16, low)


def faster_form(low, rows=RACE_ROWS, rounds=2, nbytes=None):
    """``WEIGHT_MAJOR`` where its products over random rows at each count of ``rows`` take, best of ``rounds``
    interleaved after the first (a warm-up), less than ``CLEAR_GAIN`` of oneDNN's summed over them; else
    ``ROWS_MAJOR``. Both multiply the first rows of ``low`` that hold ``nbytes`` (by default ``probe_bytes`` of its
    device; all of them where they hold less)."""
    nbytes = probe_bytes(low.device) if nbytes is None else nbytes
    low = low[: max(1, nbytes // (low.shape[1] * low.element_size()))]
    g = torch.Generator().manual_seed(0)
    inputs = [torch.randn((r, low.shape[1]), generator=g).to(torch.bfloat16) for r in rows]
    best = {form: [float("inf")] * len(rows) for form in FORMS}
    with torch.no_grad():
        for round_ in range(rounds + 1):
            for i, x in enumerate(inputs):
                for form in FORMS:
                    start = time.perf_counter()
                    screen_scores(low, x, form)
                    elapsed = time.perf_counter() - start
                    if round_:
                        best[form][i] = min(best[form][i], elapsed)
    return WEIGHT_MAJOR if sum(best[WEIGHT_MAJOR]) < CLEAR_GAIN * sum(best[ROWS_MAJOR]) else ROWS_MAJOR

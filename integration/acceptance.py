"""Greedy acceptance: keep the longest draft prefix that equals the target's own greedy choices."""

import torch


def greedy_accept(logits, draft, prefix_ids, processors):
    """Return ``(n, tokens, scores)``: ``n`` draft tokens accepted, ``tokens`` = ``draft[:n]`` + the target's
    token after them (1-D long), and the processed scores (one row per returned token) that chose them.

    ``logits[i]`` scores the position after ``prefix_ids + draft[:i]``; the logits processors see exactly that
    prefix, as in ``generate``. Without processors the choices are one vectorised argmax.
    """
    k = draft.shape[0]
    if len(processors) == 0:
        choices = logits.argmax(dim=-1)
        matches = (choices[:k] == draft).long()
        n = int(matches.cumprod(0).sum()) if k else 0
        return n, choices[: n + 1], logits[: n + 1]
    rows = []
    for i in range(k + 1):  # returns at the first mismatch, at the latest at i == k (the bonus)
        seq = torch.cat([prefix_ids, draft[:i].view(1, -1)], dim=1) if i else prefix_ids
        scores = processors(seq, logits[i: i + 1].clone())
        rows.append(scores[0])
        choice = scores[0].argmax()
        if i == k or choice != draft[i]:
            tokens = torch.cat([draft[:i], choice.view(1)])
            return i, tokens, torch.stack(rows)

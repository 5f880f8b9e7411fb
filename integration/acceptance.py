"""Acceptance of a draft against the target's logits: greedy (longest prefix equal to the target's choices)
and sampling (the speculative-sampling rule, which keeps the target's distribution exactly)."""

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


def sample_accept(logits, draft, prefix_ids, processors, generator):
    """Speculative sampling with a deterministic draft; returns ``(n, tokens, scores)`` like ``greedy_accept``.

    At draft position i, with p_i the processed next-token distribution given the accepted prefix: accept
    ``draft[i]`` with probability p_i(draft[i]); on rejection sample the replacement from p_i with
    ``draft[i]`` removed and renormalised, and stop; after a fully accepted draft sample the bonus token from
    p_{k+1}. The tokens are then distributed exactly as plain sampling from the target.
    """
    k = draft.shape[0]
    rows = []
    for i in range(k + 1):
        seq = torch.cat([prefix_ids, draft[:i].view(1, -1)], dim=1) if i else prefix_ids
        scores = processors(seq, logits[i: i + 1].clone()) if len(processors) else logits[i: i + 1]
        rows.append(scores[0])
        probs = torch.softmax(scores[0], dim=-1)
        if i < k:
            d = int(draft[i])
            p_d = float(probs[d])
            if float(torch.rand((), generator=generator, device=probs.device)) < p_d:
                continue
            probs = probs.clone()
            probs[d] = 0.0  # the residual max(0, p - q) with q the point mass on d
            if float(probs.sum()) <= 0.0:  # p_d was 1 up to rounding: nothing else can be drawn
                continue
        choice = torch.multinomial(probs, 1, generator=generator)
        return i, torch.cat([draft[:i], choice]), torch.stack(rows)
    raise RuntimeError("unreachable: the loop returns at i == k")  # pragma: no cover

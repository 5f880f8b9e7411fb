"""Acceptance of a draft against the target's logits: greedy (longest prefix equal to the target's choices)
and sampling (the speculative-sampling rule, which keeps the target's distribution exactly, with each
position's token drawn from a uniform fixed by the run's key and the position: ``TokenDraws``)."""

import math

import torch

_MASK = (1 << 64) - 1


def greedy_accept(logits, draft, prefix_ids, processors):
    """Return ``(n, tokens, scores)``: ``n`` draft tokens accepted, ``tokens`` = ``draft[:n]`` + the target's
    token after them (1-D long), and the processed scores (one row per returned token) that chose them.

    ``logits[i]`` scores the position after ``prefix_ids + draft[:i]``; the logits processors see exactly that
    prefix, as in ``generate``. Without processors the choices are one vectorised argmax.
    """
    k = draft.shape[0]
    if len(processors) == 0:
        n, tokens, _ = accept_choices(logits.argmax(dim=-1), draft)
        return n, tokens, logits[: n + 1]
    rows = []
    for i in range(k + 1):  # returns at the first mismatch, at the latest at i == k (the bonus)
        seq = torch.cat([prefix_ids, draft[:i].view(1, -1)], dim=1) if i else prefix_ids
        scores = processors(seq, logits[i : i + 1].clone())
        rows.append(scores[0])
        choice = scores[0].argmax()
        if i == k or choice != draft[i]:
            tokens = torch.cat([draft[:i], choice.view(1)])
            return i, tokens, torch.stack(rows)


def accept_choices(choices, draft):
    """Greedy acceptance given the target's token per row (``choices``, 1 + len(draft)): ``(n, tokens, None)``,
    ``n`` the draft tokens equal to the target's choices before the first that is not, ``tokens`` those and the
    target's token after them; no scores (a screened output layer computes none: ``screened_head``)."""
    k = draft.shape[0]
    n = int((choices[:k] == draft).long().cumprod(0).sum()) if k else 0
    return n, choices[: n + 1], None


def _mix(x):
    """splitmix64's finaliser: a 64-bit integer scrambled into one whose bits look independent of ``x``'s."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


class TokenDraws:
    """The uniform behind the sampled token at each position of a sequence: a function of the run's ``key`` and
    the position alone (counter-based, splitmix64), not of how many draws came before. A sampled run's text
    then depends on its key and the target's distributions only: the same seed gives the same text whatever the
    drafts were, how long the policy made them, and how many were accepted (up to the float rounding that a
    longer pass changes, ~1e-6 in fp32, where a uniform falls that close to a boundary between two tokens)."""

    def __init__(self, key):
        if isinstance(key, bool) or not isinstance(key, int):
            raise TypeError(f"key must be an int, got {type(key).__name__}")
        self.key = key & _MASK

    @classmethod
    def from_seed(cls, seed=None, generator=None):
        """Draws keyed by ``seed``, or by a key taken from ``generator`` (a ``torch.Generator``), or with
        neither from torch's global RNG (so that ``torch.manual_seed`` makes runs repeatable)."""
        if generator is not None:
            if not isinstance(generator, torch.Generator):
                raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
            if seed is not None:
                raise ValueError("pass either seed or generator, not both")
            return cls(int(torch.randint(0, 2**62, (), generator=generator, device=generator.device)))
        if seed is None:
            return cls(int(torch.randint(0, 2**62, ())))
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        if not -(2**63) <= seed < 2**64:  # what torch's manual_seed takes
            raise ValueError(f"seed must lie in [-2**63, 2**64), got {seed}")
        return cls(seed)

    def uniform(self, position):
        """A float in [0, 1) for the token at ``position`` (its index in the sequence)."""
        return (_mix(self.key ^ _mix(int(position))) >> 11) * 2.0**-53


def draw_token(probs, u):
    """The token whose interval of the cumulative distribution ``probs`` (1-D, summing to about 1) holds ``u``
    (in [0, 1)): a token of probability p is drawn for a share p of the uniforms, a token of probability 0
    never."""
    cdf = torch.cumsum(probs, 0, dtype=torch.float64)
    total = cdf[-1:]
    first_above = torch.searchsorted(cdf, total * u, right=True)  # the first cdf entry above u * total
    token, total = torch.cat([first_above.double(), total]).tolist()  # one read back from the device for both
    if not (total > 0 and math.isfinite(total)):
        raise ValueError(f"the processed scores leave no token to sample (probabilities sum to {total})")
    token = int(token)
    if token >= probs.shape[0]:  # u * total rounded up to the total: the last token that can be drawn
        token = int(torch.nonzero(probs > 0)[-1])
    return token


def is_drawn(probs, token, u):
    """Whether ``draw_token(probs, u)`` is ``token``, from two sums rather than the whole cumulative
    distribution, which costs several times as much over a large vocabulary (the two can disagree only where
    ``u`` falls within float64 rounding of an edge of the token's interval)."""
    sums = torch.stack(
        [torch.sum(probs, dtype=torch.float64), torch.sum(probs[:token], dtype=torch.float64), probs[token].double()]
    )
    total, below, p = sums.tolist()  # one read back from the device for the three
    return below <= u * total < below + p


def sample_accept(logits, draft, prefix_ids, processors, draws):
    """Speculative sampling with a deterministic draft; returns ``(n, tokens, scores)`` like ``greedy_accept``.

    At draft position i, with p_i the processed next-token distribution given the accepted prefix, the token
    at that position is drawn from p_i with the uniform ``draws`` holds for the position (``draw_token``).
    ``draft[i]`` is accepted when the drawn token is it, with probability p_i(draft[i]); otherwise the drawn
    token, distributed as p_i with ``draft[i]`` removed and renormalised, replaces it and the pass stops.
    After a fully accepted draft the bonus token is drawn from p_{k+1} alike. The tokens are then distributed
    exactly as plain sampling from the target, and each one is the token a plain step at its position would
    have drawn. ``logits`` may be a screened pass's rows (``screened_sampling.ScreenedRows``): each row then
    over its candidates alone, every other token of probability 0, and no scores returned.
    """
    k = draft.shape[0]
    start = prefix_ids.shape[1]
    rows = []
    screened = hasattr(logits, "row")  # ``screened_sampling.ScreenedRows``: rows over their candidates alone
    for i in range(k + 1):
        seq = torch.cat([prefix_ids, draft[:i].view(1, -1)], dim=1) if i else prefix_ids
        row, ids = logits.row(i) if screened else (logits[i : i + 1], None)
        scores = processors(seq, row.clone()) if len(processors) else row
        rows.append(scores[0])
        probs, u = torch.softmax(scores[0], dim=-1), draws.uniform(start + i)
        if i < k:
            at = int(draft[i]) if ids is None else _index_of(ids, draft[i])  # None: left out, probability 0
            if at is not None and is_drawn(probs, at, u):
                continue
        token = draw_token(probs, u)  # at a rejected draft token, the token drawn instead
        token = token if ids is None else int(ids[token])
        return i, torch.cat([draft[:i], draft.new_tensor([token])]), None if screened else torch.stack(rows)
    raise RuntimeError("unreachable: the loop returns at i == k")  # pragma: no cover


def _index_of(ids, token):
    """The position of ``token`` in ``ids`` (increasing token ids), or None where it is not there: a token the
    screen left out has probability 0."""
    at = int(torch.searchsorted(ids, token.view(1).to(ids.dtype)))
    return at if at < ids.shape[0] and int(ids[at]) == int(token) else None

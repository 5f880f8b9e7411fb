"""Stub proposers that force the verification loop's extremes."""

import numpy as np


class OracleProposer:
    """Drafts the true continuation (known from a reference run), ``length`` tokens each time, ignoring the
    budget it is given, so the loop must clip it."""

    def __init__(self, reference, length=50):
        self.reference = [int(t) for t in reference]
        self.length = length
        self.seen = 0
        self.requests = []

    def reset(self, tokens):
        self.seen = len(tokens)

    def update(self, tokens):
        self.seen += len(tokens)

    def propose(self, max_tokens):
        self.requests.append(max_tokens)
        return np.array(self.reference[self.seen : self.seen + self.length], dtype=np.int64)


class WrongProposer(OracleProposer):
    """Drafts tokens that are never the true ones."""

    def __init__(self, reference, vocab, length=6):
        super().__init__(reference, length)
        self.vocab = vocab

    def propose(self, max_tokens):
        true = super().propose(max_tokens)
        if true.size == 0:
            true = np.zeros(self.length, dtype=np.int64)
        return (true + 1) % self.vocab


class PartlyWrongProposer(OracleProposer):
    """Drafts the true continuation with one token made wrong, at position 0, 1, 2, ... of successive drafts
    in turn: each pass accepts a prefix and rejects the rest, at a different point every time."""

    def __init__(self, reference, vocab, length=6):
        super().__init__(reference, length)
        self.vocab = vocab

    def propose(self, max_tokens):
        draft = super().propose(max_tokens).copy()
        wrong = (len(self.requests) - 1) % self.length
        if wrong < draft.size:
            draft[wrong] = (draft[wrong] + 1) % self.vocab
        return draft


class GreedyDraftProposer:
    """Drafts the target's own greedy continuation of the current stream (cached per prefix): the most
    likely tokens, so under sampling they are often accepted and often rejected."""

    def __init__(self, model, length=2):
        self.model = model
        self.length = length
        self.stream = []
        self.cache = {}

    def reset(self, tokens):
        self.stream = [int(t) for t in tokens]

    def update(self, tokens):
        self.stream += [int(t) for t in tokens]

    def propose(self, max_tokens):
        import torch

        k = min(self.length, max_tokens)
        key = (tuple(self.stream), k)
        if k > 0 and key not in self.cache:
            ids = torch.tensor([self.stream])
            out = self.model.generate(ids, do_sample=False, max_new_tokens=k, eos_token_id=None)
            self.cache[key] = out[0, len(self.stream) :].numpy()
        return self.cache.get(key, np.empty(0, dtype=np.int64))


def drive(proposer, truth, prompt_len):
    """Replay ``truth`` through the proposer as the verification loop would; returns chosen k per step."""
    return [draft.size for _, draft in drive_drafts(proposer, truth, prompt_len)]


def drive_drafts(proposer, truth, prompt_len):
    """``drive``, returning ``(stream position, draft)`` per pass; every draft is checked to fit the budget the
    proposer was given."""
    truth = np.asarray(truth)
    proposer.reset(truth[: prompt_len + 1])
    pos, passes = prompt_len + 1, []
    while pos < truth.size:
        budget = truth.size - pos - 1
        draft = np.asarray(proposer.propose(budget))
        assert draft.size <= budget, f"a draft of {draft.size} tokens for a budget of {budget}"
        passes.append((pos, draft))
        n = 0
        while n < draft.size and draft[n] == truth[pos + n]:
            n += 1
        proposer.update(truth[pos : pos + n + 1])
        pos += n + 1
    return passes

"""A batch's rows: each request's state in the batch loop (``batch``), the proposers, seeded draws and reference
documents each row drafts and samples from on its own."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch

from draftless.lookup import ReferenceCorpus

from .acceptance import TokenDraws
from .generation_stats import StatsRecorder


@dataclass
class Row:
    """One request of the batch: its sequence as ``generate`` holds it (left padding included), its proposer and
    tallies."""

    ids: torch.Tensor  # (1, length) long
    real: int  # tokens that are not padding: the next token's position
    proposer: object
    draws: TokenDraws | None
    recorder: StatsRecorder = field(default_factory=StatsRecorder)
    scores: list = field(default_factory=list)
    raw: list = field(default_factory=list)
    done: bool = False  # decoded no further
    limit: int = 0  # the length it is decoded to at most
    # where it met a stop while ``generate`` goes on decoding it (no EOS token: generate pads no finished row and
    # decodes every row until all have met one), else None
    stopped: int | None = None
    draft: torch.Tensor | None = None


def row_draws(draws: TokenDraws | None, rows: int) -> list:
    """One ``TokenDraws`` per row, keyed by the run's key and the row: a row's text depends on the seed and its own
    distributions, not on what the rows beside it drafted."""
    if draws is None:
        return [None] * rows
    return [TokenDraws(draws.key ^ (0x9E3779B97F4A7C15 * (r + 1))) for r in range(rows)]


def row_proposers(template, rows: int) -> list:
    """``rows`` proposers like ``template``, one per row, each with its own index and acceptance evidence; an
    adaptive one shares the template's cost model, corpus and request starts (read, not learned from, in a batch).
    Any other proposer is copied whole."""
    shared = [getattr(template, name, None) for name in ("cost", "corpus", "start", "request_start")]
    memo = {id(x): x for x in shared if x is not None}
    for name in ("index", "view"):  # replaced by ``reset``: not worth copying
        if getattr(template, name, None) is not None:
            memo[id(getattr(template, name))] = None
    return [copy.deepcopy(template, dict(memo)) for _ in range(rows)]


def reference_corpora(references, rows: int, tokenizer, vocab_size) -> list:
    """``references`` (one list of documents per row, each a text or token ids) as one ``ReferenceCorpus`` per
    row, or None where none are given."""
    if references is None:
        return [None] * rows
    if isinstance(references, (str, bytes)) or not hasattr(references, "__len__") or len(references) != rows:
        raise ValueError(f"references must hold one list of documents per row ({rows}), got {references!r:.80}")
    corpora = []
    for r, docs in enumerate(references):
        if isinstance(docs, (str, bytes)) or not hasattr(docs, "__iter__"):
            raise TypeError(
                f"references[{r}] must be a list of documents (texts or token ids), got {type(docs).__name__}"
            )
        tokens = []
        for doc in docs:
            if isinstance(doc, str):
                if tokenizer is None:
                    raise ValueError("references given as texts need a tokenizer (pass tokenizer=)")
                doc = tokenizer(doc, add_special_tokens=False)["input_ids"]
            tokens.append(doc)
        corpora.append(ReferenceCorpus(tokens, vocab_size=vocab_size))
    return corpora

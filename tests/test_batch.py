"""Batches: every row equal to ``model.generate`` on the same batch (greedy, fp32), whatever each row drafted."""

import numpy as np
import pytest
import torch
from proposers import OracleProposer
from screen_forms import forced_screen, form  # noqa: F401 (fixtures)
from tiny_models import SLIDING_WINDOW, VOCAB, repetitive_prompt, tiny_model
from transformers import StoppingCriteria, StoppingCriteriaList

from draftless.integration import SpeculativeGenerator, disable, enable
from draftless.lookup import DraftConfig

KINDS = ["llama", "gemma3", "qwen2", "gpt2"]
PAD = 0


def left_padded(prompts):
    """``input_ids`` and ``attention_mask`` of 1-D prompts padded on the left, as a tokenizer pads for generate."""
    width = max(p.numel() for p in prompts)
    ids = torch.full((len(prompts), width), PAD, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, p in enumerate(prompts):
        ids[r, width - p.numel() :] = p
        mask[r, width - p.numel() :] = 1
    return ids, mask


def batch_of(lengths, seed=0):
    return left_padded([repetitive_prompt(n, seed=seed + i)[0] for i, n in enumerate(lengths)])


class RowProposer:
    """Per row (found by the prompt it is reset with): the true continuation (an oracle), or a wrong one, or
    nothing, so that rows beside each other accept everything, nothing, or never draft."""

    def __init__(self, plans):
        self.plans = plans  # [(real prompt tokens, reference continuation, "oracle" | "wrong" | "none")]
        self.inner = None
        self.kind = "none"

    def reset(self, tokens):
        tokens = [int(t) for t in tokens]
        for prompt, reference, kind in self.plans:
            if tokens[: len(prompt)] == prompt:
                self.inner = OracleProposer(prompt + reference, length=9)
                self.kind = kind
        self.inner.reset(tokens)

    def update(self, tokens):
        self.inner.update(tokens)

    def propose(self, max_tokens):
        draft = self.inner.propose(max_tokens)
        if self.kind == "wrong":
            return (np.concatenate([draft, [2, 3, 4]]) + 1) % VOCAB
        return draft if self.kind == "oracle" else draft[:0]


def rows_of(ids, mask, out):
    """Each row's real prompt tokens and its continuation in ``out``."""
    width = ids.shape[1]
    return [(ids[r][mask[r] == 1].tolist(), out[r, width:].tolist()) for r in range(ids.shape[0])]


@pytest.mark.parametrize("kind", KINDS)
def test_rows_of_different_lengths_equal_generate_on_the_batch(kind):
    model = tiny_model(kind)
    ids, mask = batch_of([5, 3 * SLIDING_WINDOW + 2, 11, 17])
    kwargs = dict(max_new_tokens=40, eos_token_id=None, pad_token_id=PAD)
    ref = model.generate(ids, attention_mask=mask, do_sample=False, **kwargs)
    gen = SpeculativeGenerator(model)
    out = gen.generate(ids, attention_mask=mask, **kwargs)
    assert torch.equal(out, ref)
    stats = gen.last_stats
    assert len(stats.rows) == 4 and stats.new_tokens == 4 * 40
    assert stats.batch_passes >= 1 and stats.tokens_per_pass > 1


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
def test_all_accepted_beside_all_rejected_beside_none(kind):
    model = tiny_model(kind)
    ids, mask = batch_of([6, 3 * SLIDING_WINDOW + 1, 9])
    kwargs = dict(max_new_tokens=30, eos_token_id=None, pad_token_id=PAD)
    ref = model.generate(ids, attention_mask=mask, do_sample=False, **kwargs)
    plans = [(p, c, kind) for (p, c), kind in zip(rows_of(ids, mask, ref), ["oracle", "wrong", "none"])]
    gen = SpeculativeGenerator(model, proposer=RowProposer(plans))
    out = gen.generate(ids, attention_mask=mask, **kwargs)
    assert torch.equal(out, ref)
    oracle, wrong, none = gen.last_stats.rows
    assert oracle.accepted == oracle.drafted > 0 and oracle.passes < 10
    assert wrong.accepted == 0 and wrong.drafted > 0
    assert none.drafted == 0 and none.passes == 29


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
def test_rows_that_end_early(kind):
    model = tiny_model(kind, seed=3)
    ids, mask = batch_of([7, 12, 4, 20], seed=5)
    free = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=30, eos_token_id=None)
    # each row's EOS: a token its free run writes at a different step, so rows end at different times
    eos = [int(free[0, ids.shape[1] + 3]), int(free[2, ids.shape[1] + 17])]

    class StopAfter(StoppingCriteria):  # row-wise, as generate calls it: stops a row once it holds 25 tokens
        def __call__(self, input_ids, scores, **kwargs):
            return (input_ids != PAD).sum(dim=1) >= 25

    criteria = StoppingCriteriaList([StopAfter()])
    # with an EOS token generate pads a row once it stops; without one it decodes every row until all have stopped
    for extra, apart in (
        ({"eos_token_id": eos}, True),
        ({"stopping_criteria": criteria, "eos_token_id": 1}, True),
        ({"stopping_criteria": criteria, "eos_token_id": None}, False),
    ):
        kwargs = dict(max_new_tokens=30, pad_token_id=PAD, **extra)
        ref = model.generate(ids, attention_mask=mask, do_sample=False, **kwargs)
        gen = SpeculativeGenerator(model)
        out = gen.generate(ids, attention_mask=mask, **kwargs)
        assert torch.equal(out, ref)
        lengths = [row.new_tokens for row in gen.last_stats.rows]
        assert (min(lengths) < max(lengths)) == apart  # rows ended at different steps, or at one


def test_small_budget_and_batch_of_one_unchanged():
    model = tiny_model("llama")
    ids, mask = batch_of([8, 13])
    for budget in (1, 2, 3):
        ref = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=budget, eos_token_id=None)
        out = SpeculativeGenerator(model).generate(ids, attention_mask=mask, max_new_tokens=budget, eos_token_id=None)
        assert torch.equal(out, ref)
    one = repetitive_prompt(14)
    gen = SpeculativeGenerator(model)
    assert torch.equal(
        gen.generate(one, max_new_tokens=20, eos_token_id=None),
        model.generate(one, do_sample=False, max_new_tokens=20, eos_token_id=None),
    )
    assert gen.last_stats.rows == () and gen.last_stats.batch_passes == 0


def test_scores_streamer_and_enable_on_a_batch():
    model = tiny_model("qwen2")
    ids, mask = batch_of([6, 10, 15])
    kwargs = dict(max_new_tokens=16, eos_token_id=None, pad_token_id=PAD, return_dict_in_generate=True)
    ref = model.generate(ids, attention_mask=mask, do_sample=False, output_scores=True, **kwargs)
    out = SpeculativeGenerator(model).generate(ids, attention_mask=mask, output_scores=True, **kwargs)
    assert torch.equal(out.sequences, ref.sequences)
    assert len(out.scores) == len(ref.scores) == 16
    for mine, theirs in zip(out.scores, ref.scores):
        assert torch.equal(mine.argmax(-1), theirs.argmax(-1))
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)

    class Collect:
        def __init__(self):
            self.puts = []

        def put(self, value):
            self.puts.append(value.clone())

        def end(self):
            self.puts.append(None)

    mine, theirs = Collect(), Collect()
    model.generate(ids, attention_mask=mask, do_sample=False, streamer=theirs, max_new_tokens=12, eos_token_id=None)
    SpeculativeGenerator(model).generate(ids, attention_mask=mask, streamer=mine, max_new_tokens=12, eos_token_id=None)
    assert len(mine.puts) == len(theirs.puts) == 1 + 12 + 1
    for a, b in zip(mine.puts[:-1], theirs.puts[:-1]):
        assert torch.equal(a, b)
    enable(model)
    try:
        out = model.generate(ids, attention_mask=mask, max_new_tokens=16, eos_token_id=None, pad_token_id=PAD)
    finally:
        disable(model)
    assert torch.equal(out, ref.sequences)


def test_batch_sampling_same_seed_same_text_whatever_was_drafted():
    model = tiny_model("llama")
    ids, mask = batch_of([9, 14, 6])
    kwargs = dict(max_new_tokens=24, eos_token_id=None, do_sample=True, temperature=1.0, top_k=0, seed=7)
    a = SpeculativeGenerator(model).generate(ids, attention_mask=mask, **kwargs)
    b = SpeculativeGenerator(model, config=DraftConfig(max_draft=3)).generate(ids, attention_mask=mask, **kwargs)
    assert torch.equal(a, b)
    rows = [SpeculativeGenerator(model).generate(ids, attention_mask=mask, **{**kwargs, "seed": 8}) for _ in range(2)]
    assert torch.equal(rows[0], rows[1]) and not torch.equal(rows[0], a)


def test_per_row_references_are_drafted_from_by_their_row_only():
    model = tiny_model("llama")
    ids, mask = batch_of([6, 7])
    kwargs = dict(max_new_tokens=30, eos_token_id=None, pad_token_id=PAD)
    ref = model.generate(ids, attention_mask=mask, do_sample=False, **kwargs)
    (_, first), (_, second) = rows_of(ids, mask, ref)
    gen = SpeculativeGenerator(model)
    out = gen.generate(ids, attention_mask=mask, references=[[first], [[5, 6, 7]]], **kwargs)
    assert torch.equal(out, ref)
    with_doc, without = gen.last_stats.rows
    assert with_doc.accepted > without.accepted and with_doc.accepted >= 20


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"attention_mask": torch.tensor([[1, 1, 0], [1, 1, 1]])}, ValueError, "right padding"),
        ({"attention_mask": torch.tensor([[0, 0, 0], [1, 1, 1]])}, ValueError, "no prompt"),
        ({"references": [["a"]]}, ValueError, "one list of documents per row"),
        ({"references": [[[2, 3]], "ab"]}, TypeError, "references\\[1\\]"),
    ],
)
def test_batch_arguments_refused_by_name(kwargs, error, match):
    model = tiny_model("llama")
    ids = torch.tensor([[5, 6, 7], [8, 9, 10]])
    with pytest.raises(error, match=match):
        SpeculativeGenerator(model).generate(ids, max_new_tokens=4, **kwargs)


def test_static_cache_batches():
    """``cache_implementation="static"`` decodes the same rows; a caller's own cache object for a batch is refused
    (``enable`` hands such a call to transformers)."""
    from transformers import StaticCache

    from draftless.integration import UnsupportedGeneration

    model = tiny_model("gemma3")
    ids, mask = batch_of([5, 3 * SLIDING_WINDOW + 1])
    kwargs = dict(max_new_tokens=20, eos_token_id=None, pad_token_id=PAD, cache_implementation="static")
    ref = model.generate(ids, attention_mask=mask, do_sample=False, **kwargs)
    assert torch.equal(SpeculativeGenerator(model).generate(ids, attention_mask=mask, **kwargs), ref)
    cache = StaticCache(config=model.config, max_cache_len=64)
    with pytest.raises(UnsupportedGeneration, match="batch continued from a caller's cache"):
        SpeculativeGenerator(model).generate(ids, attention_mask=mask, past_key_values=cache, max_new_tokens=4)
    enable(model)
    try:
        out = model.generate(
            ids,
            attention_mask=mask,
            past_key_values=StaticCache(config=model.config, max_cache_len=64),
            max_new_tokens=20,
            eos_token_id=None,
            pad_token_id=PAD,
        )
    finally:
        disable(model)
    assert torch.equal(out, ref)


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
def test_screened_batch_passes_equal_generate_on_the_batch(kind, forced_screen):
    """A greedy batch chooses its tokens through the screened output layer, its drafts' padding left out: rows that
    accept everything, nothing or never draft, and the adaptive policy's rows, equal generate's."""
    model = tiny_model(kind)
    ids, mask = batch_of([6, 3 * SLIDING_WINDOW + 1, 9, 14])
    kwargs = dict(max_new_tokens=30, eos_token_id=None, pad_token_id=PAD)
    ref = model.generate(ids, attention_mask=mask, do_sample=False, **kwargs)
    kinds = ["oracle", "wrong", "none", "oracle"]
    plans = [(p, c, k) for (p, c), k in zip(rows_of(ids, mask, ref), kinds)]
    forced = SpeculativeGenerator(model, proposer=RowProposer(plans))
    assert torch.equal(forced.generate(ids, attention_mask=mask, **kwargs), ref)
    assert forced.last_stats.batch_passes > 0
    assert sum(s.calls for s in forced_screen) == forced.last_stats.batch_passes
    adaptive = SpeculativeGenerator(model)
    assert torch.equal(adaptive.generate(ids, attention_mask=mask, **kwargs), ref)
    calls = sum(s.calls for s in forced_screen)
    scored = adaptive.generate(ids, attention_mask=mask, output_scores=True, return_dict_in_generate=True, **kwargs)
    assert torch.equal(scored.sequences, ref)
    assert sum(s.calls for s in forced_screen) == calls  # scores read every logit: not screened

"""The output layer in two stages (``integration.staged_head``): whatever rows the proposer asks for first, the
output equals ``generate``'s token for token (greedy, scores and logits included) and, sampled, the unstaged
loop's text for the seed; rows after a failed first stage are never computed; a model that changes its output
layer's products before returning them is never staged; the calibration keeps the output layer's times."""

import numpy as np
import pytest
import torch
from proposers import OracleProposer, PartlyWrongProposer, WrongProposer
from tiny_models import VOCAB, repetitive_prompt, tiny_model
from transformers import Gemma2Config, Gemma2ForCausalLM

from draftless.integration import SpeculativeGenerator, calibration
from draftless.integration.fastpass import FastPassOptions
from draftless.integration.fastpass.staged_head import HeadClock, StagedHead

KINDS = ["llama", "gemma3", "qwen2", "gpt2"]


class Staged:
    """``inner``'s drafts, each with ``first_rows`` from ``schedule`` in turn (none for an empty draft), and every
    output-layer product the loop computes counted by a hook."""

    def __init__(self, inner, schedule):
        self.inner, self.schedule, self.first_rows, self.calls = inner, list(schedule), None, 0

    def reset(self, tokens):
        self.inner.reset(tokens)

    def update(self, tokens):
        self.inner.update(tokens)

    def propose(self, max_tokens):
        draft = self.inner.propose(max_tokens)[:max_tokens]
        rows = self.schedule[self.calls % len(self.schedule)]
        self.calls += 1
        self.first_rows = None if draft.size == 0 else rows
        return draft


def products(model):
    rows = []
    model.get_output_embeddings().register_forward_hook(lambda m, a, out: rows.append(out.shape[-2]))
    return rows


@pytest.mark.parametrize("kind", KINDS)
def test_staged_passes_equal_generate_wherever_the_draft_fails(kind):
    model = tiny_model(kind)
    ids = repetitive_prompt(16, seed=3)
    ref = model.generate(ids, do_sample=False, max_new_tokens=40, eos_token_id=None)
    proposer = Staged(PartlyWrongProposer(ref[0].tolist(), VOCAB, length=9), [1, 3, 4, 8, 2, 5, 9, None])
    gen = SpeculativeGenerator(model, proposer=proposer)
    out = gen.generate(ids, max_new_tokens=40, eos_token_id=None)
    assert torch.equal(out, ref)
    stats = gen.last_stats
    # the wrong token at position 0, 1, 2, ... in turn: first stages that fail, and ones that hold
    assert 0 < stats.staged_passes < stats.passes and stats.head_rows_skipped > 0
    assert stats.new_tokens == 40 == 1 + stats.passes + stats.accepted


def run_counting_products(new_tokens, make, schedule):
    """A tiny llama's greedy output drafted by ``make(reference tokens)``, staged by ``schedule``, checked against
    ``generate``; returns the stats and the row counts of every output-layer product (the prefill's first)."""
    model = tiny_model("llama")
    ids = repetitive_prompt(20)
    ref = model.generate(ids, do_sample=False, max_new_tokens=new_tokens, eos_token_id=None)
    rows = products(model)
    gen = SpeculativeGenerator(model, proposer=Staged(make(ref[0].tolist()), schedule))
    assert torch.equal(gen.generate(ids, max_new_tokens=new_tokens, eos_token_id=None), ref)
    return gen.last_stats, rows


def test_all_accepted_runs_both_stages_and_all_rejected_only_the_first():
    stats, rows = run_counting_products(31, lambda ref: OracleProposer(ref, length=10), [3])
    assert stats.accepted == stats.drafted and stats.staged_passes == stats.passes and stats.head_rows_skipped == 0
    # after the prefill's row: 3 rows, then the other 8 of each pass (fewer in the last, cut by the budget)
    assert rows[1:] == [r for d, _ in stats.draft_trace for r in (3, d + 1 - 3)] and rows[2] == 8
    stats, rows = run_counting_products(31, lambda ref: WrongProposer(ref, VOCAB, length=6), [1])
    # one row a pass, the draft's first token's: every other row skipped (a last pass cut to no draft is not staged)
    assert stats.accepted == 0 and rows[1:] == [1] * stats.passes and stats.head_rows_skipped == stats.drafted


def test_eos_inside_a_staged_draft_and_the_scores_and_logits_returned():
    model = tiny_model("gemma3")
    ids = repetitive_prompt(12, seed=5)
    kwargs = dict(
        do_sample=False, max_new_tokens=30, return_dict_in_generate=True, output_scores=True, output_logits=True
    )
    free = model.generate(ids, **kwargs, eos_token_id=None)
    eos = int(free.sequences[0, ids.shape[1] + 17])  # a token the output reaches mid-way, as its EOS
    ref = model.generate(ids, **kwargs, eos_token_id=eos)
    gen = SpeculativeGenerator(model, proposer=Staged(OracleProposer(free.sequences[0].tolist(), length=12), [2, 5]))
    out = gen.generate(ids, **kwargs, eos_token_id=eos)
    assert torch.equal(out.sequences, ref.sequences) and out.sequences.shape[1] <= ids.shape[1] + 30
    assert len(out.scores) == len(ref.scores) and len(out.logits) == len(ref.logits)
    for mine, theirs in zip(out.scores + out.logits, ref.scores + ref.logits):
        assert torch.allclose(mine, theirs, atol=1e-5)


def test_sampling_in_stages_draws_the_unstaged_text_for_the_seed():
    model = tiny_model("qwen2")
    ids = repetitive_prompt(16, seed=1)
    ref = model.generate(ids, do_sample=False, max_new_tokens=36, eos_token_id=None)[0].tolist()
    texts = []
    for schedule in ([None], [1, 4, 2, 7]):
        gen = SpeculativeGenerator(model, proposer=Staged(PartlyWrongProposer(ref, VOCAB, length=8), schedule))
        texts.append(gen.generate(ids, do_sample=True, seed=7, max_new_tokens=36, eos_token_id=None))
    assert torch.equal(texts[0], texts[1])
    assert gen.last_stats.staged_passes > 0


def softcapped_model():
    torch.manual_seed(0)
    config = Gemma2Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=512,
        final_logit_softcapping=5.0,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=None,
    )
    model = Gemma2ForCausalLM(config).eval()
    model.generation_config.pad_token_id = None
    return model


def test_a_model_that_changes_its_output_layers_products_is_never_staged():
    model = softcapped_model()
    ids = repetitive_prompt(16, seed=2)
    ref = model.generate(ids, do_sample=False, max_new_tokens=24, eos_token_id=None)
    gen = SpeculativeGenerator(model, proposer=Staged(PartlyWrongProposer(ref[0].tolist(), VOCAB, length=6), [2]))
    assert torch.equal(gen.generate(ids, max_new_tokens=24, eos_token_id=None), ref)
    assert gen.last_stats.staged_passes == 0
    curve = calibration.measure_cost_curve(model, ks=(0, 2, 8), context=16)
    assert curve.head == ()  # its curve keeps no output-layer times: the policy never plans a stage
    plain = calibration.measure_cost_curve(tiny_model("llama"), ks=(0, 2, 8), context=16)
    assert len(plain.head) == 3 and all(0 < h < s for h, s in zip(plain.head, plain.seconds))


def test_staging_checks_at_the_prefill_and_the_clock_times_the_output_layer():
    model = tiny_model("llama")
    staging = StagedHead(model)
    with staging.installed():
        out = model(input_ids=torch.tensor([[3, 4, 5]]), logits_to_keep=1)
        assert staging.check_prefill(out.logits)
        assert not staging.check_prefill(out.logits.clone())  # no output seen since: unknown, so not staged
    clock = HeadClock(model)
    with clock.installed():
        model(input_ids=torch.tensor([[3, 4, 5]]))
    assert clock.last is not None and clock.last > 0


@pytest.mark.parametrize("rows, error", [(0, ValueError), (-3, ValueError), ("2", TypeError), (2.0, TypeError)])
def test_a_proposers_first_rows_is_checked(rows, error):
    model = tiny_model("llama")
    ids = repetitive_prompt(16)
    ref = model.generate(ids, do_sample=False, max_new_tokens=12, eos_token_id=None)

    class Bad(Staged):
        def propose(self, max_tokens):
            draft = super().propose(max_tokens)
            self.first_rows = rows
            return draft

    gen = SpeculativeGenerator(model, proposer=Bad(OracleProposer(ref[0].tolist(), length=8), [None]))
    with pytest.raises(error, match="first_rows"):
        gen.generate(ids, max_new_tokens=12, eos_token_id=None)


def test_first_rows_past_the_draft_as_verified_mean_one_product():
    # drafts of 50 cut to the budget (19, then fewer): a first stage of 30 rows is past every one of them
    stats, rows = run_counting_products(20, lambda ref: OracleProposer(ref, length=50), [30])
    assert stats.staged_passes == 0 and rows[1:] == [d + 1 for d, _ in stats.draft_trace]


@pytest.mark.parametrize("staged_head", [False, True])
def test_the_adaptive_policy_stages_where_configured_and_stays_exact(staged_head, monkeypatch):
    import draftless.integration.fastpass as fastpass_package

    hooked = []  # generations that hooked the output layer: only those whose proposer may stage
    monkeypatch.setattr(fastpass_package, "StagedHead", lambda model: hooked.append(model) or StagedHead(model))
    model = tiny_model("gemma3")
    ids = repetitive_prompt(40, seed=4)
    ref = model.generate(ids, do_sample=False, max_new_tokens=48, eos_token_id=None)
    gen = SpeculativeGenerator(model, fast_pass=FastPassOptions(staged_head=staged_head))
    assert gen.proposer.cost.curve.head  # the calibration timed the output layer within each pass
    assert gen.proposer.cost.staged_head == staged_head
    out = gen.generate(ids, max_new_tokens=48, eos_token_id=None)
    assert torch.equal(out, ref)
    assert gen.proposer.stages_output_layer == staged_head and len(hooked) == int(staged_head)
    if not staged_head:
        assert gen.last_stats.staged_passes == 0
    assert np.isfinite(gen.proposer.cost.scale)

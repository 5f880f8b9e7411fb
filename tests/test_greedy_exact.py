"""Greedy exactness: draftless's output equals ``model.generate(do_sample=False)`` token for token."""

import pytest
import torch
from proposers import OracleProposer, WrongProposer
from tiny_models import SLIDING_WINDOW, VOCAB, repetitive_prompt, tiny_model
from transformers import StoppingCriteria, StoppingCriteriaList
from transformers.generation.utils import GenerateDecoderOnlyOutput

from draftless.integration import SpeculativeGenerator, UnsupportedGeneration, generate
from draftless.lookup import NullProposer

KINDS = ["llama", "gemma3", "qwen2", "gpt2"]


def vanilla(model, ids, **kwargs):
    return model.generate(ids, do_sample=False, **kwargs)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("prompt_len", [5, 3 * SLIDING_WINDOW + 1])  # shorter and longer than gemma3's window
def test_equal_to_generate_with_many_passes(kind, prompt_len):
    model = tiny_model(kind)
    ids = repetitive_prompt(prompt_len, seed=prompt_len)
    ref = vanilla(model, ids, max_new_tokens=48, eos_token_id=None)
    gen = SpeculativeGenerator(model)
    out = gen.generate(ids, max_new_tokens=48, eos_token_id=None)
    assert torch.equal(out, ref)
    stats = gen.last_stats
    assert stats.passes >= 2 and stats.accepted > 0  # drafts were really verified, some accepted
    assert stats.new_tokens == 48 == 1 + stats.passes + stats.accepted


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
def test_oracle_drafts_all_accepted_and_clipped_to_the_budget(kind):
    model = tiny_model(kind)
    ids = repetitive_prompt(20)
    ref = vanilla(model, ids, max_new_tokens=37, eos_token_id=None)
    oracle = OracleProposer(ref[0].tolist(), length=50)  # always longer than what is left
    gen = SpeculativeGenerator(model, proposer=oracle)
    out = gen.generate(ids, max_new_tokens=37, eos_token_id=None)
    assert torch.equal(out, ref)
    # 36 tokens after the prefill's: one pass, 35 drafted and accepted, plus the bonus token
    assert gen.last_stats.accepted == gen.last_stats.drafted == 35
    assert gen.last_stats.passes == 1 and oracle.requests == [35]
    assert gen.last_stats.mean_accepted_length == 36.0


@pytest.mark.parametrize("kind", KINDS)
def test_wrong_drafts_all_rejected(kind):
    model = tiny_model(kind)
    ids = repetitive_prompt(12)
    ref = vanilla(model, ids, max_new_tokens=30, eos_token_id=None)
    gen = SpeculativeGenerator(model, proposer=WrongProposer(ref[0].tolist(), VOCAB))
    out = gen.generate(ids, max_new_tokens=30, eos_token_id=None)
    assert torch.equal(out, ref)
    assert gen.last_stats.accepted == 0 and gen.last_stats.passes == 29
    assert gen.last_stats.mean_accepted_length == 1.0


def test_eos_inside_an_accepted_draft():
    model = tiny_model("llama")
    ids = repetitive_prompt(15)
    free = vanilla(model, ids, max_new_tokens=40, eos_token_id=None)[0, 15:].tolist()
    eos = free[17]  # a token first produced mid-way: generation must stop right there
    first = free.index(eos)
    ref = vanilla(model, ids, max_new_tokens=40, eos_token_id=eos)
    assert ref.shape[1] == 15 + first + 1
    gen = SpeculativeGenerator(model, proposer=OracleProposer(ids[0].tolist() + free, length=25))
    out = gen.generate(ids, max_new_tokens=40, eos_token_id=eos)
    assert torch.equal(out, ref)
    stats = gen.last_stats  # the draft tokens accepted after the EOS are dropped, and not counted
    assert stats.new_tokens == first + 1 == 1 + stats.passes + stats.accepted
    assert sum(a + 1 for _, a in stats.draft_trace) == first
    out_list = generate(model, ids, max_new_tokens=40, eos_token_id=[VOCAB - 1, eos])
    assert torch.equal(out_list, ref) or out_list.shape[1] <= ref.shape[1]  # an earlier id may also stop it


def test_eos_list_matches_generate():
    model = tiny_model("qwen2")
    ids = repetitive_prompt(15)
    free = vanilla(model, ids, max_new_tokens=40, eos_token_id=None)[0, 15:].tolist()
    eos = [free[25], free[9]]
    assert torch.equal(
        generate(model, ids, max_new_tokens=40, eos_token_id=eos),
        vanilla(model, ids, max_new_tokens=40, eos_token_id=eos),
    )


@pytest.mark.parametrize("new", [1, 2])
def test_tiny_budgets(new):
    model = tiny_model("gemma3")
    ids = repetitive_prompt(30)
    gen = SpeculativeGenerator(
        model, proposer=OracleProposer(vanilla(model, ids, max_new_tokens=9, eos_token_id=None)[0].tolist())
    )
    out = gen.generate(ids, max_new_tokens=new, eos_token_id=None)
    assert torch.equal(out, vanilla(model, ids, max_new_tokens=new, eos_token_id=None))
    assert out.shape[1] == 30 + new


def test_zero_new_tokens_is_handled_as_generate_handles_it():
    model = tiny_model("llama")
    ids = repetitive_prompt(10)
    with pytest.raises(ValueError) as theirs:
        vanilla(model, ids, max_new_tokens=0)
    with pytest.raises(ValueError) as ours:
        generate(model, ids, max_new_tokens=0)
    assert str(ours.value) == str(theirs.value)


def test_max_length_instead_of_max_new_tokens():
    model = tiny_model("llama")
    ids = repetitive_prompt(10)
    assert torch.equal(
        generate(model, ids, max_length=33, eos_token_id=None), vanilla(model, ids, max_length=33, eos_token_id=None)
    )


def test_no_draft_ever_is_plain_decoding():
    model = tiny_model("gpt2")
    ids = repetitive_prompt(10)
    gen = SpeculativeGenerator(model, proposer=NullProposer())
    out = gen.generate(ids, max_new_tokens=20, eos_token_id=None)
    assert torch.equal(out, vanilla(model, ids, max_new_tokens=20, eos_token_id=None))
    assert gen.last_stats.drafted == 0 and gen.last_stats.passes == 19


@pytest.mark.parametrize(
    "kwargs",
    [
        {"repetition_penalty": 1.3},
        {"no_repeat_ngram_size": 3},
        {"min_new_tokens": 10, "eos_token_id": 5},
        {"bad_words_ids": [[7], [8, 9]]},
        {"suppress_tokens": [3, 4]},
    ],
)
def test_logits_processors_see_the_right_prefix(kwargs):
    model = tiny_model("llama")
    ids = repetitive_prompt(18)
    kwargs = {"eos_token_id": None, **kwargs}
    ref = vanilla(model, ids, max_new_tokens=40, **kwargs)
    gen = SpeculativeGenerator(model)
    assert torch.equal(gen.generate(ids, max_new_tokens=40, **kwargs), ref)


def test_left_padded_prompt_and_mask():
    model = tiny_model("llama")
    ids = repetitive_prompt(16)
    padded = torch.cat([torch.zeros(1, 4, dtype=torch.long), ids], dim=1)
    mask = torch.cat([torch.zeros(1, 4, dtype=torch.long), torch.ones_like(ids)], dim=1)
    ref = vanilla(model, padded, attention_mask=mask, max_new_tokens=30, eos_token_id=None)
    assert torch.equal(generate(model, padded, attention_mask=mask, max_new_tokens=30, eos_token_id=None), ref)


def test_pad_tokens_in_the_prompt_are_masked_as_generate_masks_them():
    model = tiny_model("llama")
    model.generation_config.pad_token_id = 0
    ids = repetitive_prompt(16)
    ids[0, 5] = 0  # a pad id inside the prompt: generate infers a mask from it
    ref = vanilla(model, ids, max_new_tokens=30, eos_token_id=None)
    assert torch.equal(generate(model, ids, max_new_tokens=30, eos_token_id=None), ref)


def test_return_dict_with_scores_and_logits():
    model = tiny_model("qwen2")
    ids = repetitive_prompt(14)
    kwargs = dict(
        max_new_tokens=25,
        eos_token_id=None,
        return_dict_in_generate=True,
        output_scores=True,
        output_logits=True,
        repetition_penalty=1.2,
    )
    ref = vanilla(model, ids, **kwargs)
    out = generate(model, ids, **kwargs)
    assert isinstance(out, GenerateDecoderOnlyOutput)
    assert torch.equal(out.sequences, ref.sequences)
    assert len(out.scores) == len(ref.scores) == 25
    for mine, theirs in zip(out.scores, ref.scores):
        assert mine.argmax() == theirs.argmax() and torch.allclose(mine, theirs, atol=1e-4)
    for mine, theirs in zip(out.logits, ref.logits):
        assert torch.allclose(mine, theirs, atol=1e-4)


def test_streamer_receives_prompt_then_tokens_in_order():
    class Collect:
        def __init__(self):
            self.chunks, self.ended = [], False

        def put(self, value):
            self.chunks.append(value.view(-1).tolist())

        def end(self):
            self.ended = True

    model = tiny_model("gemma3")
    ids = repetitive_prompt(20)
    streamer = Collect()
    out = generate(model, ids, max_new_tokens=30, eos_token_id=None, streamer=streamer)
    assert streamer.chunks[0] == ids[0].tolist() and streamer.ended
    assert sum(streamer.chunks[1:], []) == out[0, 20:].tolist()
    assert len(streamer.chunks) > 2  # chunks of accepted tokens, not one at the end


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"num_beams": 2}, "beam"),
        ({"num_return_sequences": 2}, "sequences"),
        ({"use_cache": False}, "cache"),
        ({"prompt_lookup_num_tokens": 5}, "prompt_lookup"),
        # modes generate decodes otherwise (or refuses): never served greedily in their place
        ({"penalty_alpha": 0.6, "top_k": 4}, "contrastive search"),
        ({"dola_layers": "low"}, "dola generation"),
        ({"force_words_ids": [[5]]}, "constrained beam search"),
        ({"token_healing": True}, "token_healing"),
        ({"assistant_early_exit": 1}, "assistant_early_exit"),
    ],
)
def test_unsupported_modes_raise_clearly(kwargs, word):
    with pytest.raises(ValueError, match=word):
        generate(tiny_model("llama"), repetitive_prompt(10), max_new_tokens=5, **kwargs)


@pytest.mark.parametrize(
    "lengths", [{"max_new_tokens": 2.5}, {"max_new_tokens": 5.0}, {"max_new_tokens": True}, {"max_length": 13.5}]
)
def test_lengths_that_are_not_ints_run_as_generate_runs_them(lengths):
    model = tiny_model("llama")
    ids = repetitive_prompt(10)
    ref = vanilla(model, ids, eos_token_id=None, **lengths)  # 2.5 new tokens: 3, as the length reaches 12.5
    assert torch.equal(generate(model, ids, eos_token_id=None, **lengths), ref)


@pytest.mark.parametrize(
    "lengths, error, words",
    [
        ({"max_new_tokens": "5"}, TypeError, "max_new_tokens must be an int, got str"),  # generate: '<=' not supported
        ({"max_length": "50"}, TypeError, "max_length must be an int"),
        ({"max_new_tokens": float("nan")}, ValueError, "max_new_tokens must be finite"),
        ({"max_new_tokens": float("inf")}, ValueError, "max_new_tokens must be finite"),
    ],
)
def test_lengths_that_are_not_numbers_are_refused_by_name(lengths, error, words):
    with pytest.raises(error, match=words):
        generate(tiny_model("llama"), repetitive_prompt(10), **lengths)


def test_bad_input_ids_raise_clearly():
    model = tiny_model("llama")
    with pytest.raises(ValueError, match="shape"):
        generate(model, torch.zeros((0, 4), dtype=torch.long), max_new_tokens=5)
    with pytest.raises(TypeError, match="input_ids"):
        generate(model, [[1, 2, 3]], max_new_tokens=5)
    with pytest.raises(UnsupportedGeneration, match="needs input_ids"):
        generate(model, max_new_tokens=5)


def test_token_ids_outside_the_vocabulary_are_refused():
    model = tiny_model("llama")
    ids = repetitive_prompt(10)
    for bad in (VOCAB, -1):
        ids_bad = ids.clone()
        ids_bad[0, 3] = bad
        with pytest.raises(ValueError, match=f"input_ids holds token id {bad} .* {VOCAB}"):
            generate(model, ids_bad, max_new_tokens=5)


class _StopAtLength(StoppingCriteria):
    def __init__(self, length):
        self.length = length

    def __call__(self, input_ids, scores, **kwargs):
        return torch.full((input_ids.shape[0],), input_ids.shape[1] >= self.length, dtype=torch.bool)


def test_drafts_stay_within_learned_positions():
    """gpt2 has 512 learned positions: a run that stops before them is served as generate serves it, though
    its budget would let a draft reach past them; one that must pass them is refused by name."""
    model = tiny_model("gpt2")  # n_positions 512
    ids = repetitive_prompt(498)
    stop = StoppingCriteriaList([_StopAtLength(510)])
    ref = vanilla(model, ids, max_new_tokens=40, eos_token_id=None, stopping_criteria=stop)
    assert ref.shape[1] == 510
    gen = SpeculativeGenerator(model, proposer=OracleProposer(ref[0].tolist() + [2] * 40))
    out = gen.generate(ids, max_new_tokens=40, eos_token_id=None, stopping_criteria=stop)
    assert torch.equal(out, ref)
    assert max(k for k, _ in gen.last_stats.draft_trace) > 0
    with pytest.raises(ValueError, match="512 learned positions.*max_new_tokens"):
        generate(model, ids, max_new_tokens=40, eos_token_id=None)
    with pytest.raises(ValueError, match="512 learned positions"):
        generate(model, repetitive_prompt(513), max_new_tokens=4, eos_token_id=None)
    # the last pass feeds position 511: the 15th new token is its output and is never fed
    assert torch.equal(
        generate(model, ids, max_new_tokens=15, eos_token_id=None),
        vanilla(model, ids, max_new_tokens=15, eos_token_id=None),
    )
    with pytest.raises(ValueError, match="513 positions"):
        generate(model, ids, max_new_tokens=16, eos_token_id=None)
    # left padding takes no positions, as generate counts them: 492 tokens and 21 new ones fit
    mask = torch.ones_like(ids)
    mask[0, :6] = 0
    padded = vanilla(model, ids, attention_mask=mask, max_new_tokens=21, eos_token_id=None)
    assert torch.equal(generate(model, ids, attention_mask=mask, max_new_tokens=21, eos_token_id=None), padded)
    with pytest.raises(ValueError, match="513 positions"):
        generate(model, ids, attention_mask=mask, max_new_tokens=22, eos_token_id=None)

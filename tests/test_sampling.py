"""Sampling keeps the target's distribution exactly: statistical tests with stated size and power.

Each homogeneity test compares the joint distribution of the first 4 generated tokens over N = 2000
draftless runs against N = 2000 sequences from ``model.generate(do_sample=True)``: Pearson's chi-square on
the 2 x C contingency table (cells whose pooled expected count is below 5 merged into one), rejecting at
alpha = 0.001 with fixed seeds (so the test is deterministic). Power is shown by running the same test, at
the same N and seeds, on two deliberately wrong acceptance rules: both must be rejected.
"""

from collections import Counter

import pytest
import torch
from proposers import GreedyDraftProposer, OracleProposer

from draftless.integration import SpeculativeGenerator, generate
from draftless.lookup import DraftConfig

N = 2000
ALPHA = 1e-3
VOCAB = 12
PROMPT = torch.tensor([[3, 4, 5, 3, 4, 5, 3, 4, 6, 3, 4]])


def peaky_model(seed=0):
    """A 1-layer llama over 12 tokens whose next-token distributions are far from uniform."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=None,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(60.0)
    model.generation_config.pad_token_id = None
    return model


def chi_square_homogeneity(a, b, min_expected=5.0):
    """(statistic, degrees of freedom, p-value) for two Counters of categories."""
    na, nb = sum(a.values()), sum(b.values())
    cells, other = [], [0, 0]
    for key in set(a) | set(b):
        pooled = a[key] + b[key]
        if pooled * min(na, nb) / (na + nb) < min_expected:
            other[0] += a[key]
            other[1] += b[key]
        else:
            cells.append((a[key], b[key]))
    if sum(other):
        cells.append(tuple(other))
    stat = 0.0
    for ca, cb in cells:
        pooled = ca + cb
        for count, total in ((ca, na), (cb, nb)):
            expected = pooled * total / (na + nb)
            stat += (count - expected) ** 2 / expected
    df = max(1, len(cells) - 1)
    p = float(
        torch.special.gammaincc(
            torch.tensor(df / 2.0, dtype=torch.float64), torch.tensor(stat / 2.0, dtype=torch.float64)
        )
    )
    return stat, df, p


def draftless_counts(model, settings, seed=1234):
    """N draftless runs whose every step drafts the target's greedy tokens (often accepted, often not)."""
    gen = SpeculativeGenerator(model, proposer=GreedyDraftProposer(model, length=2))
    rng = torch.Generator().manual_seed(seed)
    counts = Counter()
    drafted = accepted = 0
    for _ in range(N):
        out = gen.generate(PROMPT, do_sample=True, max_new_tokens=4, eos_token_id=None, generator=rng, **settings)
        counts[tuple(out[0, PROMPT.shape[1] :].tolist())] += 1
        drafted += gen.last_stats.drafted
        accepted += gen.last_stats.accepted
    return counts, drafted, accepted


def reference_counts(model, settings, seed=99):
    torch.manual_seed(seed)
    out = model.generate(PROMPT.repeat(N, 1), do_sample=True, max_new_tokens=4, eos_token_id=None, **settings)
    return Counter(tuple(row) for row in out[:, PROMPT.shape[1] :].tolist())


SETTINGS = {
    "temperature_0.7": {"temperature": 0.7, "top_k": 0},
    "temperature_1.3": {"temperature": 1.3, "top_k": 0},
    "top_k_3": {"top_k": 3},
    "top_p_0.8": {"top_p": 0.8, "top_k": 0},
    "repetition_penalty_1.5": {"repetition_penalty": 1.5, "top_k": 0},
    "min_p_0.05": {"min_p": 0.05, "top_k": 0},
    "typical_p_0.9": {"typical_p": 0.9, "top_k": 0},
    "no_repeat_2_and_bad_words": {"no_repeat_ngram_size": 2, "bad_words_ids": [[7], [5, 9]], "top_k": 0},
}


class FavourEvenIds:
    """A caller's own logits processor: +1.5 to every even id (a custom entry of ``logits_processor``)."""

    def __call__(self, input_ids, scores):
        scores = scores.clone()
        scores[:, ::2] += 1.5
        return scores


def test_custom_logits_processor_same_distribution(model):
    from transformers import LogitsProcessorList

    settings = {"logits_processor": LogitsProcessorList([FavourEvenIds()]), "temperature": 1.3, "top_k": 0}
    ours, _, accepted = draftless_counts(model, settings)
    stat, df, p = chi_square_homogeneity(ours, reference_counts(model, settings))
    assert accepted > 0 and p > ALPHA, f"chi2={stat:.1f}, df={df}, p={p:.2e}"


@pytest.fixture(scope="module")
def model():
    return peaky_model()


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_same_distribution_as_generate(model, name):
    settings = SETTINGS[name]
    ours, drafted, accepted = draftless_counts(model, settings)
    stat, df, p = chi_square_homogeneity(ours, reference_counts(model, settings))
    assert drafted >= N and 0.1 * drafted < accepted < 0.9 * drafted  # drafts often accepted and rejected
    assert p > ALPHA, f"chi2={stat:.1f}, df={df}, p={p:.2e}"


def _argmax_rule(logits, draft, prefix_ids, processors, draws):
    """WRONG: accept a draft token exactly when it is the argmax."""
    from draftless.integration.acceptance import sample_accept

    k = draft.shape[0]
    for i in range(k):
        scores = processors(torch.cat([prefix_ids, draft[:i].view(1, -1)], dim=1), logits[i : i + 1].clone())
        if int(scores[0].argmax()) != int(draft[i]):
            n, tokens, _ = sample_accept(
                logits[i:], draft[i:i], torch.cat([prefix_ids, draft[:i].view(1, -1)], 1), processors, draws
            )
            return i, torch.cat([draft[:i], tokens]), None
    n, tokens, _ = sample_accept(
        logits[k:], draft[k:k], torch.cat([prefix_ids, draft.view(1, -1)], 1), processors, draws
    )
    return k, torch.cat([draft, tokens]), None


def _no_removal_rule(logits, draft, prefix_ids, processors, draws):
    """WRONG: on rejection, resample from p_i without removing the rejected token."""
    from draftless.integration.acceptance import draw_token

    for i in range(draft.shape[0] + 1):
        seq = torch.cat([prefix_ids, draft[:i].view(1, -1)], dim=1)
        probs = torch.softmax(processors(seq, logits[i : i + 1].clone())[0], dim=-1)
        position = prefix_ids.shape[1] + i
        if i < draft.shape[0] and draws.uniform(position) < float(probs[draft[i]]):
            continue
        again = draws.uniform(position + 10**6)  # a second uniform for the position
        return i, torch.cat([draft[:i], draft.new_tensor([draw_token(probs, again)])]), None


@pytest.mark.parametrize("wrong_rule", [_argmax_rule, _no_removal_rule])
def test_the_same_test_rejects_wrong_rules(model, monkeypatch, wrong_rule):
    settings = SETTINGS["temperature_1.3"]
    monkeypatch.setattr("draftless.integration.speculative.sample_accept", wrong_rule)
    ours, _, _ = draftless_counts(model, settings)
    stat, df, p = chi_square_homogeneity(ours, reference_counts(model, settings))
    assert p < ALPHA, f"the wrong rule passed: chi2={stat:.1f}, df={df}, p={p:.2e}"


def test_near_greedy_temperature_accepts_oracle_drafts(model):
    ref = model.generate(PROMPT, do_sample=False, max_new_tokens=30, eos_token_id=None)[0].tolist()
    gen = SpeculativeGenerator(model, proposer=OracleProposer(ref, length=8))
    gen.generate(PROMPT, do_sample=True, temperature=0.02, top_k=0, max_new_tokens=30, eos_token_id=None, seed=3)
    assert gen.last_stats.acceptance_rate > 0.95


def test_uniform_target_accepts_about_one_in_vocab():
    model = peaky_model()
    with torch.no_grad():
        model.lm_head.weight.zero_()  # every next-token distribution is uniform
    gen = SpeculativeGenerator(model, config=DraftConfig(min_match=1, max_draft=1))  # each draft token is tried
    drafted = accepted = 0
    for seed in range(40):
        gen.generate(PROMPT, do_sample=True, top_k=0, max_new_tokens=60, eos_token_id=None, seed=seed)
        drafted += gen.last_stats.drafted
        accepted += gen.last_stats.accepted
    assert drafted > 1000
    assert abs(accepted / drafted - 1 / VOCAB) < 0.03  # 1/12 = 0.083; binomial sd below 0.009 here


def test_seed_and_generator_make_runs_repeatable(model):
    run = lambda **kw: generate(model, PROMPT, do_sample=True, max_new_tokens=20, eos_token_id=None, **kw)
    assert torch.equal(run(seed=7), run(seed=7))
    assert torch.equal(run(generator=torch.Generator().manual_seed(5)), run(generator=torch.Generator().manual_seed(5)))
    assert len({tuple(run(seed=s)[0].tolist()) for s in range(6)}) > 1
    torch.manual_seed(11)
    first = run()
    torch.manual_seed(11)
    assert torch.equal(first, run())
    with pytest.raises(ValueError, match="seed or generator"):
        run(seed=1, generator=torch.Generator())
    with pytest.raises(TypeError, match="seed"):
        run(seed="1")
    with pytest.raises(ValueError, match="seed must lie in"):  # not torch's "Overflow when unpacking long long"
        run(seed=2**70)
    assert torch.equal(run(seed=2**64 - 1), run(seed=2**64 - 1)) and run(seed=-(2**63)).shape == first.shape


def test_eos_and_budget_under_sampling(model):
    for seed in range(30):
        out = generate(model, PROMPT, do_sample=True, max_new_tokens=15, eos_token_id=7, seed=seed)
        new = out[0, PROMPT.shape[1] :].tolist()
        assert 1 <= len(new) <= 15
        assert 7 not in new[:-1] and (len(new) == 15 or new[-1] == 7)


def test_streaming_and_stop_criteria_under_sampling(model):
    from transformers import StoppingCriteria, StoppingCriteriaList

    class Collect:
        def __init__(self):
            self.chunks = []

        def put(self, value):
            self.chunks.append(value.view(-1).tolist())

        def end(self):
            pass

    class StopAt(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            return torch.full((input_ids.shape[0],), input_ids.shape[1] >= PROMPT.shape[1] + 9, dtype=torch.bool)

    streamer = Collect()
    out = generate(
        model,
        PROMPT,
        do_sample=True,
        max_new_tokens=30,
        eos_token_id=None,
        seed=4,
        streamer=streamer,
        stopping_criteria=StoppingCriteriaList([StopAt()]),
    )
    assert out.shape[1] == PROMPT.shape[1] + 9
    assert (
        streamer.chunks[0] == PROMPT[0].tolist() and sum(streamer.chunks[1:], []) == out[0, PROMPT.shape[1] :].tolist()
    )

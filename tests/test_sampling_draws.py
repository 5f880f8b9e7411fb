"""Sampling draws each position's token from a uniform fixed by the run's key and the position: the same seed
gives the same text whatever was drafted (forced all-accepted, all-rejected and partly rejected drafts, no
drafts, the adaptive policy, another cost curve), and the draws themselves are exact inverse-CDF draws."""

import pytest
import torch
from proposers import GreedyDraftProposer, OracleProposer, PartlyWrongProposer, WrongProposer
from test_sampling import PROMPT, VOCAB, peaky_model
from tiny_models import VOCAB as TINY_VOCAB
from tiny_models import repetitive_prompt, tiny_model

from draftless.integration import SpeculativeGenerator
from draftless.integration.acceptance import TokenDraws, draw_token
from draftless.lookup import AdaptiveConfig, AdaptiveProposer
from draftless.lookup.cost_model import FLAT

SETTINGS = [
    {"temperature": 1.0, "top_k": 0},
    {"temperature": 0.7, "top_p": 0.9, "top_k": 0},
    {"top_k": 5, "repetition_penalty": 1.3},
]


def sampled(model, proposer, prompt, seed, settings, new=40):
    gen = SpeculativeGenerator(model, proposer=proposer)
    out = gen.generate(prompt, do_sample=True, max_new_tokens=new, eos_token_id=None, seed=seed, **settings)
    return out[0].tolist(), gen.last_stats


@pytest.mark.parametrize("kind", ["peaky", "llama", "gemma3"])
@pytest.mark.parametrize("settings", SETTINGS, ids=["plain", "top_p", "top_k_penalty"])
def test_same_seed_same_text_whatever_is_drafted(kind, settings):
    model = peaky_model() if kind == "peaky" else tiny_model(kind)
    vocab = VOCAB if kind == "peaky" else TINY_VOCAB
    prompt = PROMPT if kind == "peaky" else repetitive_prompt(30)
    for seed in (0, 1, 2):
        plain, stats = sampled(model, OracleProposer([], length=0), prompt, seed, settings)  # plain steps only
        assert stats.drafted == 0
        runs = {
            "all accepted": OracleProposer(plain, length=7),
            "all rejected": WrongProposer(plain, vocab, length=5),
            "partly rejected": PartlyWrongProposer(plain, vocab, length=6),
            "greedy drafts": GreedyDraftProposer(model, length=3),
            "adaptive": AdaptiveProposer(AdaptiveConfig()),
            "adaptive, flat curve": AdaptiveProposer(AdaptiveConfig(), cost=FLAT),
        }
        for name, proposer in runs.items():
            tokens, stats = sampled(model, proposer, prompt, seed, settings)
            assert tokens == plain, (name, seed)
            if name == "all accepted":
                assert stats.drafted > 0 and stats.accepted == stats.drafted
            if name == "all rejected":
                assert stats.drafted > 0 and stats.accepted == 0
            if name == "partly rejected":
                assert 0 < stats.accepted < stats.drafted


def test_a_seed_changes_the_text():
    model = peaky_model()
    texts = {tuple(sampled(model, OracleProposer([], length=0), PROMPT, seed, SETTINGS[0])[0]) for seed in range(6)}
    assert len(texts) > 1


def test_draw_token_is_the_inverse_cdf():
    probs = torch.tensor([0.0, 0.25, 0.0, 0.5, 0.25, 0.0])
    assert draw_token(probs, 0.0) == 1  # the first token that can be drawn, never a zero before it
    assert draw_token(probs, 0.2499) == 1 and draw_token(probs, 0.25) == 3
    assert draw_token(probs, 0.7499) == 3 and draw_token(probs, 0.75) == 4
    assert draw_token(probs, 1.0 - 2.0**-53) == 4  # never the trailing zero
    grid = [draw_token(probs, (i + 0.5) / 1000) for i in range(1000)]
    assert [grid.count(t) for t in range(6)] == [0, 250, 0, 500, 250, 0]
    unnormalised = probs * 3  # a distribution that sums to 3 draws alike
    assert [draw_token(unnormalised, (i + 0.5) / 1000) for i in range(1000)] == grid
    for bad in (torch.zeros(4), torch.tensor([float("nan"), 0.5])):
        with pytest.raises(ValueError, match="no token to sample"):
            draw_token(bad, 0.5)


def test_token_draws_depend_on_key_and_position_only():
    draws = TokenDraws(123)
    values = [draws.uniform(t) for t in range(20000)]
    assert all(0.0 <= u < 1.0 for u in values)
    assert values == [TokenDraws(123).uniform(t) for t in range(20000)]  # no state: the order of calls is free
    assert draws.uniform(7) == draws.uniform(7) and TokenDraws(124).uniform(7) != draws.uniform(7)
    assert abs(sum(values) / len(values) - 0.5) < 0.01  # uniform: sd of the mean ~0.002
    assert abs(sum(u < 0.1 for u in values) / len(values) - 0.1) < 0.01
    assert TokenDraws(-1).key == TokenDraws(2**64 - 1).key  # as torch.manual_seed wraps a negative seed
    with pytest.raises(TypeError, match="key"):
        TokenDraws(1.5)
    with pytest.raises(TypeError, match="generator"):
        TokenDraws.from_seed(generator=3)
    a = TokenDraws.from_seed(generator=torch.Generator().manual_seed(5))
    assert a.key == TokenDraws.from_seed(generator=torch.Generator().manual_seed(5)).key

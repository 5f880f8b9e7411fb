"""Sampled passes through the screen (``screened_sampling``): which processor lists it serves, each row's candidates
holding every token a top-k cut keeps (where bfloat16 alone misorders them), the processed distribution and the
token drawn equal to the whole row's, and sampled generation under the screen token for token the unscreened
run's for the same seed."""

import pytest
import torch
from proposers import OracleProposer, PartlyWrongProposer, WrongProposer
from screen_forms import form  # noqa: F401 (a fixture)
from tiny_models import VOCAB, repetitive_prompt, tiny_model
from transformers import LogitsProcessorList
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from draftless.integration import SpeculativeGenerator
from draftless.integration.acceptance import TokenDraws, sample_accept
from draftless.integration.fastpass import FastPassOptions
from draftless.integration.fastpass.screened_head import ScreenedHead
from draftless.integration.fastpass.screened_sampling import MAX_ROW_CANDIDATES, MAX_TOP_K, ScreenedRows, screened_top_k

PROCESSORS = {
    "top_k": [TopKLogitsWarper(50)],
    "temperature_top_k_top_p": [TemperatureLogitsWarper(0.7), TopKLogitsWarper(40), TopPLogitsWarper(0.9)],
    "top_k_min_p": [TopKLogitsWarper(20), MinPLogitsWarper(0.05)],
}


@pytest.mark.parametrize(
    "processors, expected",
    [
        ([TopKLogitsWarper(50)], 50),
        ([TemperatureLogitsWarper(0.7), TopKLogitsWarper(40), TopPLogitsWarper(0.9)], 40),
        ([TopKLogitsWarper(20), MinPLogitsWarper(0.1)], 20),
        ([TopKLogitsWarper(MAX_TOP_K)], MAX_TOP_K),
        ([], None),  # no cut: every token may be drawn
        ([TopPLogitsWarper(0.9)], None),  # a top-p cut alone needs the whole row's softmax
        ([TopKLogitsWarper(MAX_TOP_K + 1)], None),
        ([TopKLogitsWarper(50), TemperatureLogitsWarper(0.7)], None),  # only what the module doc lists, in its order
        ([RepetitionPenaltyLogitsProcessor(1.3), TopKLogitsWarper(50)], None),  # lifts tokens the cut may keep
        ([TopKLogitsWarper(50), TopKLogitsWarper(20)], None),
        ([TopKLogitsWarper(50, filter_value=-1e4)], None),  # cut tokens keep some probability
    ],
)
def test_screened_top_k_serves_only_cuts_it_can_reproduce(processors, expected):
    assert screened_top_k(LogitsProcessorList(processors)) == expected


def clustered(seed, rows, cluster=300):
    """``(weight, hidden)``: each row's logits hold a cluster of ``cluster`` tokens spread over 0.02 around a value
    of about 12, where bfloat16's step is 0.0625, so that the k-th highest logit lies inside the cluster and
    bfloat16 alone ties or misorders the tokens around it; the other tokens score about 0 to 3."""
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn((4000, 64), generator=g) * 0.005
    hidden = torch.randn((rows, 64), generator=g) * 20
    for i in range(rows):
        x = hidden[i]
        ids = torch.randperm(weight.shape[0], generator=g)[:cluster]
        spread = torch.rand(cluster, generator=g) * 0.02
        weight[ids] = (12 + spread)[:, None] * x / x.norm() ** 2 + torch.randn((cluster, 64), generator=g) * 1e-6
    return weight, hidden


def head(weight, form):
    layer = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    with torch.no_grad():
        layer.weight.copy_(weight)
    return ScreenedHead(layer, form=form)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k", [1, 50, 120])
def test_candidates_hold_every_token_a_top_k_cut_keeps(seed, k, form):
    weight, hidden = clustered(seed, rows=3)
    screened = ScreenedRows(head(weight, form), hidden, k)
    logits = torch.nn.functional.linear(hidden, weight)
    low = (hidden.to(torch.bfloat16) @ weight.to(torch.bfloat16).T).float()
    for i in range(hidden.shape[0]):
        kept = (logits[i] >= torch.topk(logits[i], k).values[-1]).nonzero().flatten()
        ids = screened.candidates(i)
        assert ids is not None and torch.equal(ids, ids.sort().values)
        assert set(kept.tolist()) <= set(ids.tolist())
        assert ids.numel() < weight.shape[0] // 4  # a cut, not the whole row
        if k == 50:  # bfloat16 alone misorders the cut: its own top k is not the fp32 top k
            assert set(torch.topk(low[i], k).indices.tolist()) != set(kept.tolist())


@pytest.mark.parametrize("name", sorted(PROCESSORS))
def test_processed_distribution_and_draws_equal_the_whole_rows(name, form):
    processors = LogitsProcessorList(PROCESSORS[name])
    weight, hidden = clustered(7, rows=6)
    logits = torch.nn.functional.linear(hidden, weight)
    screened = ScreenedRows(head(weight, form), hidden, screened_top_k(processors))
    prefix = torch.tensor([[3, 4, 5]])
    for i in range(hidden.shape[0]):
        whole = torch.softmax(processors(prefix, logits[i : i + 1].clone())[0], dim=-1)
        scores, ids = screened.row(i)
        part = torch.zeros_like(whole).index_copy_(0, ids, torch.softmax(processors(prefix, scores.clone())[0], -1))
        assert torch.equal(whole > 0, part > 0)
        torch.testing.assert_close(part, whole, atol=1e-6, rtol=1e-5)
    # the speculative-sampling rule: the same tokens accepted and drawn, over drafts of likely and unlikely tokens
    g = torch.Generator().manual_seed(1)
    for trial in range(40):
        likely = logits.argmax(dim=-1)[:5]
        unlikely = torch.randint(0, weight.shape[0], (5,), generator=g)
        draft = torch.where(torch.rand(5, generator=g) < 0.7, likely, unlikely)
        draws = TokenDraws(trial)
        n, tokens, _ = sample_accept(logits, draft, prefix, processors, draws)
        got = sample_accept(screened, draft, prefix, processors, draws)
        assert got[0] == n and torch.equal(got[1], tokens) and got[2] is None  # a screened pass keeps no scores


def test_rows_without_a_bound_or_with_a_flat_distribution_are_scored_whole(form):
    weight, hidden = clustered(3, rows=3)
    hidden[1, 0] = float("inf")
    screened = ScreenedRows(head(weight, form), hidden, 50)
    assert screened.row(0)[1] is None and screened.whole == 1  # one row not finite: no bound holds for the pass
    wider = torch.cat([weight, weight])
    assert wider.shape[0] > MAX_ROW_CANDIDATES  # more tokens than ``MAX_ROW_CANDIDATES``
    flat = ScreenedRows(head(wider, form), torch.zeros((2, 64)), 50)  # every logit 0: every token a candidate
    scores, ids = flat.row(0)
    assert ids is None and scores.shape == (1, wider.shape[0]) and flat.candidates(1) is None
    wide = ScreenedRows(head(weight[:40], form), hidden[:1], 50)  # a cut wider than the vocabulary
    assert wide.row(0)[1] is None


@pytest.fixture
def sampled_screens(monkeypatch, cache_dir, form):
    """Every model screened, on any host, in each product form; the sampled passes each screen serves counted."""
    built = []
    forward = ScreenedHead._forward

    def counted(self, hidden):
        self.sampled_passes = getattr(self, "sampled_passes", 0) + (self._top_k is not None)
        return forward(self, hidden)

    def for_model(cls, model, min_weights=None):
        built.append(ScreenedHead(model.get_output_embeddings(), form=form))
        return built[-1]

    monkeypatch.setattr(ScreenedHead, "_forward", counted)
    monkeypatch.setattr(ScreenedHead, "for_model", classmethod(for_model))
    return built


@pytest.mark.parametrize("kind", ["llama", "gemma3", "qwen2", "gpt2"])
@pytest.mark.parametrize(
    "settings", [{"top_k": 20}, {"temperature": 0.7, "top_k": 30, "top_p": 0.9}], ids=["top_k", "top_p"]
)
def test_screened_sampling_draws_the_unscreened_runs_text(kind, settings, sampled_screens):
    model = tiny_model(kind)
    prompt = repetitive_prompt(30, seed=3)

    def sampled(proposer=None, config=None, seed=0, fast_pass=True):
        gen = SpeculativeGenerator(model, proposer=proposer, config=config, fast_pass=fast_pass)
        out = gen.generate(prompt, do_sample=True, max_new_tokens=40, eos_token_id=None, seed=seed, **settings)
        return out[0].tolist(), gen.last_stats

    def screened_passes():
        return sum(getattr(s, "sampled_passes", 0) for s in sampled_screens)

    for seed in (0, 1):
        before = screened_passes()
        reference, _ = sampled(fast_pass=FastPassOptions(screened_head=False), seed=seed)
        assert screened_passes() == before  # the screen turned off
        runs = {
            "adaptive": None,
            "all accepted": OracleProposer(reference, length=9),
            "all rejected": WrongProposer(reference, VOCAB, length=5),
            "partly rejected": PartlyWrongProposer(reference, VOCAB, length=6),
        }
        for name, proposer in runs.items():
            before = screened_passes()
            tokens, stats = sampled(proposer, seed=seed)
            assert tokens == reference, (name, seed)
            assert screened_passes() - before == stats.passes  # every pass screened
            if name == "all accepted":
                assert stats.drafted > 0 and stats.accepted == stats.drafted
            if name == "all rejected":
                assert stats.drafted > 0 and stats.accepted == 0


@pytest.mark.parametrize(
    "settings",
    [
        {"top_k": 0},
        {"top_k": 20, "repetition_penalty": 1.3},
        {"top_k": 20, "output_scores": True, "return_dict_in_generate": True},
    ],
)
def test_sampled_runs_the_screen_cannot_serve_take_the_whole_layer(settings, sampled_screens):
    model = tiny_model("llama")
    SpeculativeGenerator(model).generate(
        repetitive_prompt(30, seed=3), do_sample=True, max_new_tokens=24, eos_token_id=None, seed=0, **settings
    )
    assert sum(getattr(s, "sampled_passes", 0) for s in sampled_screens) == 0


@pytest.mark.parametrize(
    "settings", [{"top_k": 3}, {"temperature": 1.3, "top_k": 6, "top_p": 0.8}], ids=["top_k_3", "top_k_6_top_p"]
)
def test_screened_sampling_keeps_the_distribution_of_generate(settings, monkeypatch, cache_dir):
    """``test_sampling``'s homogeneity test (N runs against N sequences of ``model.generate``) with every pass
    screened, in the rows-major form (``test_processed_distribution_and_draws_equal_the_whole_rows`` takes both)."""
    from test_sampling import ALPHA, N, chi_square_homogeneity, draftless_counts, peaky_model, reference_counts

    model = peaky_model()
    read, row = [], ScreenedRows.row

    def for_model(cls, model, min_weights=None):
        return ScreenedHead(model.get_output_embeddings())

    monkeypatch.setattr(ScreenedHead, "for_model", classmethod(for_model))
    monkeypatch.setattr(ScreenedRows, "row", lambda self, i: read.append(i) or row(self, i))
    ours, drafted, accepted = draftless_counts(model, settings)
    stat, df, p = chi_square_homogeneity(ours, reference_counts(model, settings))
    assert len(read) > N  # the passes' rows read through the screen
    assert drafted >= N and 0.1 * drafted < accepted < 0.9 * drafted
    assert p > ALPHA, f"chi2={stat:.1f}, df={df}, p={p:.2e}"

"""Sampling in a batch keeps each row's distribution: the powered homogeneity test of ``test_sampling`` on rows of
different lengths decoded together, against ``model.generate``'s plain sampling of the same padded rows."""

from collections import Counter

import pytest
import torch
from proposers import GreedyDraftProposer
from test_sampling import ALPHA, PROMPT, N, _no_removal_rule, chi_square_homogeneity, peaky_model

from draftless.integration import SpeculativeGenerator

SHORT = torch.tensor([[7, 8, 9, 7, 8]])
ROWS = 4  # PROMPT, SHORT, PROMPT, SHORT: N samples of each prompt over N / 2 batches


def padded_batch():
    width = PROMPT.shape[1]
    ids = torch.zeros((2, width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    ids[0], mask[0] = PROMPT[0], 1
    ids[1, width - SHORT.shape[1] :], mask[1, width - SHORT.shape[1] :] = SHORT[0], 1
    return ids.repeat(ROWS // 2, 1), mask.repeat(ROWS // 2, 1)


def batch_counts(model, settings, seed=4321):
    ids, mask = padded_batch()
    gen = SpeculativeGenerator(model, proposer=GreedyDraftProposer(model, length=2))
    rng = torch.Generator().manual_seed(seed)
    counts = [Counter(), Counter()]
    drafted = accepted = 0
    for _ in range(N * 2 // ROWS):
        out = gen.generate(
            ids,
            attention_mask=mask,
            do_sample=True,
            max_new_tokens=4,
            eos_token_id=None,
            pad_token_id=0,
            generator=rng,
            **settings,
        )
        for r, row in enumerate(out[:, ids.shape[1] :].tolist()):
            counts[r % 2][tuple(row)] += 1
        drafted += gen.last_stats.drafted
        accepted += gen.last_stats.accepted
    return counts, drafted, accepted


def reference_counts(model, settings, seed=77):
    ids, mask = padded_batch()
    torch.manual_seed(seed)
    out = model.generate(
        ids.repeat(N // 2, 1),
        attention_mask=mask.repeat(N // 2, 1),
        do_sample=True,
        max_new_tokens=4,
        eos_token_id=None,
        pad_token_id=0,
        **settings,
    )
    counts = [Counter(), Counter()]
    for r, row in enumerate(out[:, ids.shape[1] :].tolist()):
        counts[r % 2][tuple(row)] += 1
    return counts


@pytest.fixture(scope="module")
def model():
    return peaky_model()


@pytest.mark.parametrize("settings", [{"temperature": 1.3, "top_k": 0}, {"top_p": 0.8, "top_k": 0}])
def test_each_row_keeps_the_distribution_of_plain_sampling(model, settings):
    ours, drafted, accepted = batch_counts(model, settings)
    theirs = reference_counts(model, settings)
    assert drafted >= N and 0.1 * drafted < accepted < 0.9 * drafted  # drafts often accepted and rejected
    for row in range(2):
        stat, df, p = chi_square_homogeneity(ours[row], theirs[row])
        assert p > ALPHA, f"row {row}: chi2={stat:.1f}, df={df}, p={p:.2e}"


def test_the_same_test_rejects_a_wrong_rule_in_a_batch(model, monkeypatch):
    settings = {"temperature": 1.3, "top_k": 0}
    monkeypatch.setattr("draftless.integration.batch.sample_accept", _no_removal_rule)
    ours, _, _ = batch_counts(model, settings)
    theirs = reference_counts(model, settings)
    assert min(chi_square_homogeneity(ours[row], theirs[row])[2] for row in range(2)) < ALPHA

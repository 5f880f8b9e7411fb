"""How requests start, carried from request to request (``lookup.request_start``, ``integration.kept_state``): one
``RequestStart`` shared by every request of a model and config."""

import pickle

import numpy as np
import pytest
import torch
from proposers import drive
from tiny_models import repetitive_prompt, tiny_model

from benchmarks.replay import replay_one
from draftless.integration import SpeculativeGenerator
from draftless.integration.kept_state import forget_request_starts, request_start
from draftless.lookup import AdaptiveConfig, AdaptiveProposer, RequestStart
from draftless.lookup.acceptance_model import LENGTH_EDGES, ORIGINS, STEPPED
from draftless.lookup.adaptive import cost_model
from draftless.lookup.cost_model import CostCurve

CPU = CostCurve((0, 1, 16, 32, 64), (1.0, 1.05, 2.3, 3.1, 4.8))
OPEN = [7, 8]  # the tokens a copied passage opens with, in the prompt and again at its end
CELLS = 2 * len(ORIGINS) * len(LENGTH_EDGES)  # regimes x origins x lengths
CARRIED = AdaptiveConfig(start_memory=0.8)  # each earlier outcome weighing more than the default 0.5


def request(seed, copies):
    """A prompt holding an 80-token passage after ``OPEN``, ending with ``OPEN`` again, and an output that opens
    as the passage does, then goes on copying it (``copies``) or writes tokens seen nowhere before."""
    rng = np.random.default_rng(seed)
    passage = rng.integers(100, 1000, 80)
    prompt = np.concatenate([rng.integers(1000, 2000, 20), OPEN, passage, rng.integers(2000, 3000, 20), OPEN])
    output = passage if copies else np.concatenate([passage[:1], rng.integers(3000, 4000, 79)])
    return np.concatenate([prompt, output]), prompt.size


def first_draft(start, seed, copies, config=CARRIED):
    """The first draft's length in a request (a fresh proposer sharing ``start``), driven to its end as the loop
    would, so that its first verified draft teaches ``start``."""
    truth, prompt_len = request(seed, copies)
    return drive(AdaptiveProposer(config, cost=CPU, start=start), truth, prompt_len)[0]


def test_requests_that_start_copying_start_longer_and_those_that_do_not_shorter():
    k0 = first_draft(RequestStart(CARRIED), 0, copies=True)  # under the prior alone
    assert 0 < k0 < 64
    start = RequestStart(CARRIED)
    firsts = [first_draft(start, seed, copies=True) for seed in range(6)]
    assert firsts[0] == k0 and firsts[-1] > k0 and firsts[-1] == 64  # learned: copies run long from the start
    start = RequestStart(CARRIED)
    firsts = [first_draft(start, seed, copies=False) for seed in range(6)]
    assert firsts[0] == k0 and firsts[-1] < k0
    for seed in range(6, 20):  # and back, once requests start copying again: older outcomes weigh less
        last = first_draft(start, seed, copies=True)
    assert last == 64


def test_only_each_requests_first_verified_draft_teaches_it():
    start = RequestStart(CARRIED)
    assert not start.learned and start.state() == ((0.0,) * CELLS, (0.0,) * CELLS)
    truth, prompt_len = request(1, copies=True)
    proposer = AdaptiveProposer(CARRIED, cost=CPU, start=start)
    proposer.reset(truth[: prompt_len + 1])
    draft = proposer.propose(64)
    proposer.update(truth[prompt_len + 1 : prompt_len + 2 + draft.size])  # all of it accepted
    after_first = start.state()
    assert start.learned and sum(after_first[1]) == draft.size  # each accepted position judged once
    assert sum(after_first[0]) == draft.size
    while len(proposer.index) < truth.size:  # later drafts teach the request's own model only
        pos = len(proposer.index)
        more = proposer.propose(truth.size - pos - 1)
        proposer.update(truth[pos : pos + more.size + 1])
    assert start.state() == after_first
    assert proposer.acceptance.trials.sum() > sum(after_first[1])


def test_a_plain_step_teaches_nothing_and_the_next_draft_is_still_the_first():
    start = RequestStart(CARRIED)
    proposer = AdaptiveProposer(CARRIED, cost=CPU, start=start)
    proposer.reset(np.array([5, 6, 7]))  # nothing repeats: no draft
    assert proposer.propose(10).size == 0
    proposer.update(np.array([5]))
    assert not start.learned and proposer._starting
    assert proposer.propose(10).size > 0  # "5" matched: a draft, chosen under the start model
    proposer.update(np.array([9]))
    assert start.learned and not proposer._starting


def test_state_round_trips_and_bad_states_are_refused():
    start = RequestStart(CARRIED)
    first_draft(start, 0, copies=True)
    copy = RequestStart(CARRIED, start.state())
    assert copy.state() == start.state() == pickle.loads(pickle.dumps(start)).state()
    assert np.array_equal(copy.expected(3, 1, 64), start.expected(3, 1, 64))
    hits, trials = start.state()
    with pytest.raises(ValueError, match=f"{CELLS} counts"):
        RequestStart(CARRIED, (hits[:5], trials))
    with pytest.raises(ValueError, match="hits <= trials"):
        RequestStart(CARRIED, (tuple(t + 1 for t in trials), trials))
    with pytest.raises(ValueError, match="finite"):
        RequestStart(CARRIED, (hits, (float("nan"),) * CELLS))
    with pytest.raises(ValueError, match="start_memory"):
        RequestStart(AdaptiveConfig(start_memory=0.0))
    assert RequestStart.for_config(AdaptiveConfig(start_memory=0.0)) is None  # nothing carried
    assert RequestStart.for_config(CARRIED, start.state()).state() == start.state()
    with pytest.raises(TypeError, match="config must be an AdaptiveConfig"):
        RequestStart({"start_memory": 0.8})


def test_a_state_recorded_before_the_stepped_cells_is_taken_up_as_it_was():
    start = RequestStart(CARRIED)
    first_draft(start, 0, copies=True)
    hits, trials = (np.asarray(part).reshape(2, len(ORIGINS), -1) for part in start.state())
    legacy = tuple(tuple(part[:, :STEPPED].ravel()) for part in (hits, trials))  # 2 x 4 x 12: 96 counts
    assert len(legacy[0]) == 96
    assert RequestStart(CARRIED, legacy).state() == start.state()  # the stepped cells held nothing yet
    with pytest.raises(TypeError, match="start must be a RequestStart"):
        AdaptiveProposer(start=object())


@pytest.mark.parametrize(
    "value, error",
    [(-0.1, ValueError), (1.5, ValueError), (float("nan"), ValueError), ("0.8", TypeError), (True, TypeError)],
)
def test_start_memory_is_validated(value, error):
    with pytest.raises(error, match="start_memory"):
        AdaptiveConfig(start_memory=value)


def test_generators_of_one_model_and_config_share_it_and_record_where_each_request_started():
    model = tiny_model("llama")
    forget_request_starts()
    config = CARRIED
    assert request_start(model, config) is request_start(model, AdaptiveConfig(start_memory=0.8))
    other = AdaptiveConfig(start_memory=0.8, reflow=False)
    assert request_start(model, other) is not request_start(model, config)
    assert isinstance(request_start(model, config), RequestStart)
    assert isinstance(request_start(model, AdaptiveConfig()), RequestStart)
    assert request_start(model, AdaptiveConfig(start_memory=0.0)) is None
    with pytest.raises(TypeError, match="config"):
        request_start(model, "adaptive")
    ids = repetitive_prompt(model.config.vocab_size)
    stats = []
    for _ in range(3):  # one generator per request, as ``generate`` and the benchmarks build them
        gen = SpeculativeGenerator(model, config=config)
        out = gen.generate(ids, max_new_tokens=24, eos_token_id=None)
        want = model.generate(ids, max_new_tokens=24, do_sample=False, eos_token_id=None)
        assert torch.equal(out, want)  # exact, whatever the first draft
        stats.append(gen.last_stats)
        # a replay started from the recorded state (and shape, told the recorded pass times) drafts as the loop did
        proposer = AdaptiveProposer(
            config,
            cost=cost_model(config, gen.proposer.cost.curve, stats[-1].start_shape, stats[-1].start_evidence or None),
            start=RequestStart(config, stats[-1].start_acceptance or None),
        )
        _, accepted, drafted, _ = replay_one(proposer, out[0].tolist(), ids.shape[1], 24, stats[-1].pass_seconds)
        assert list(zip(drafted, accepted)) == list(stats[-1].draft_trace)
    assert gen.proposer.start is request_start(model, config)
    assert stats[0].start_acceptance == () and sum(stats[1].start_acceptance[1]) > 0
    assert sum(stats[2].start_acceptance[1]) > sum(stats[1].start_acceptance[1]) * config.start_memory
    assert stats[2].start_acceptance != stats[1].start_acceptance
    off = SpeculativeGenerator(model, config=AdaptiveConfig(start_memory=0.0))
    off.generate(ids, max_new_tokens=8, eos_token_id=None)
    assert off.proposer.start is None and off.last_stats.start_acceptance == ()
    forget_request_starts(model)
    assert not request_start(model, config).learned

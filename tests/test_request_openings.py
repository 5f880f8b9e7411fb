"""How requests start, carried only between requests that open alike (``lookup.request_start.RequestStarts``, the
default): each opening's first drafts learned apart, bounded in number, and the loop's runs replayed exactly."""

import pickle

import numpy as np
import pytest
import torch
from proposers import drive
from tiny_models import repetitive_prompt, tiny_model

from benchmarks.recorded_run import recorded_config
from draftless.integration import SpeculativeGenerator
from draftless.integration.kept_state import forget_request_starts, request_start
from draftless.lookup import AdaptiveConfig, AdaptiveProposer, RequestStart, RequestStarts, carried_starts
from draftless.lookup.cost_model import CostCurve

CPU = CostCurve((0, 1, 16, 32, 64), (1.0, 1.05, 2.3, 3.1, 4.8))
KEYED = AdaptiveConfig()  # the default: start_memory 0.5, start_key 2
CODE, PROSE = [50, 51], [60, 61]  # how two kinds of output begin: each opening tokens 7 8 + its own two


def request(seed, opening, copies):
    """A prompt holding an 80-token passage that begins with ``opening`` after the tokens 7 8, ending with 7 8 again,
    and an output that writes ``opening``'s tokens, then copies the rest of the passage (``copies``) or writes
    tokens seen nowhere before."""
    rng = np.random.default_rng(seed)
    passage = np.concatenate([opening, rng.integers(100, 1000, 78)])
    prompt = np.concatenate([rng.integers(1000, 2000, 20), [7, 8], passage, rng.integers(2000, 3000, 20), [7, 8]])
    output = passage if copies else np.concatenate([passage[:2], rng.integers(3000, 4000, 78)])
    return np.concatenate([prompt, output]), prompt.size


def first_draft(starts, seed, opening, copies):
    truth, prompt_len = request(seed, opening, copies)
    return drive(AdaptiveProposer(KEYED, cost=CPU, start=starts), truth, prompt_len)[0]


def test_each_opening_learns_how_its_requests_start():
    prior = first_draft(RequestStarts(KEYED), 0, CODE, copies=True)  # the first request of an opening: the prior
    starts = RequestStarts(KEYED)
    code = [first_draft(starts, seed, CODE, copies=True) for seed in range(6)]
    assert code[0] == prior and code[-1] == 64  # code edits that copy: their first drafts grow
    prose = [first_draft(starts, seed, PROSE, copies=False) for seed in range(6)]
    assert prose[0] == prior and prose[-1] < prior  # another opening that does not copy: its own, shorter
    assert first_draft(starts, 7, CODE, copies=True) == 64  # the prose taught the code edits' opening nothing
    assert len(starts) == 2
    shared = RequestStart(AdaptiveConfig(start_key=0))  # carried to every request alike, the prose undoes the code
    for seed in range(6):
        first_draft(shared, seed, CODE, copies=True)
    for seed in range(6):
        first_draft(shared, seed, PROSE, copies=False)
    assert first_draft(shared, 7, CODE, copies=True) < 64


def test_openings_are_keyed_by_the_first_matchs_last_tokens_and_bounded():
    config = AdaptiveConfig(start_key=2)
    starts = RequestStarts(config, capacity=2)
    a = starts.for_stream(np.array([1, 2, 3, 4]), 3)
    assert starts.for_stream(np.array([9, 9, 3, 4]), 2) is a  # the same last two tokens
    assert starts.for_stream(np.array([9, 9, 3, 4]), 1) is not a  # a 1-token match: keyed by one token
    assert starts.for_stream(np.array([1, 2, 3, 4]), 0) is None  # no match, no draft to choose: the prior
    a.observe(3, 1, 5, 5)
    starts.for_stream(np.array([5, 6]), 2)  # a third opening: the least recently used one (a) is dropped
    assert len(starts) == 2 and not starts.for_stream(np.array([3, 4]), 2).learned
    copy = pickle.loads(pickle.dumps(starts))
    assert len(copy) == 2 and copy.config == config


@pytest.mark.parametrize(
    "kwargs, error, word",
    [
        ({"start_key": -1}, ValueError, "start_key"),
        ({"start_key": True}, TypeError, "start_key"),
        ({"start_key": 2.0}, TypeError, "start_key"),
    ],
)
def test_start_key_is_validated(kwargs, error, word):
    with pytest.raises(error, match=word):
        AdaptiveConfig(**kwargs)


def test_what_each_config_carries():
    assert isinstance(carried_starts(AdaptiveConfig()), RequestStarts)
    assert isinstance(carried_starts(AdaptiveConfig(start_key=0)), RequestStart)
    assert carried_starts(AdaptiveConfig(start_memory=0.0)) is None
    with pytest.raises(ValueError, match="start_key"):
        RequestStarts(AdaptiveConfig(start_key=0))
    with pytest.raises(ValueError, match="capacity"):
        RequestStarts(KEYED, capacity=0)
    with pytest.raises(TypeError, match="config"):
        carried_starts({"start_key": 2})
    numpy_key = AdaptiveConfig(start_key=np.int64(3)).start_key
    assert numpy_key == 3 and type(numpy_key) is int
    # a run recorded before keyed openings replays as it ran: a carried start served every request alike
    assert recorded_config({"draftless_config": {"start_memory": 0.8}}).start_key == 0


def test_the_loop_records_each_requests_own_opening_and_replays_exactly():
    from benchmarks.recorded_run import recorded_request_start
    from benchmarks.replay import replay_one
    from draftless.lookup.adaptive import cost_model

    model = tiny_model("llama")
    forget_request_starts(model)
    stats = []
    vocab = model.config.vocab_size
    for seed in (0, 1, 0):  # the third request opens as the first did (the same prompt), the second otherwise
        # every token id once, then a block said three times: whatever the model writes first was seen before
        every = torch.randperm(vocab - 2, generator=torch.Generator().manual_seed(seed)) + 2
        ids = torch.cat([every.view(1, -1), repetitive_prompt(30, seed=seed, vocab=vocab)], dim=1)
        gen = SpeculativeGenerator(model)
        out = gen.generate(ids, max_new_tokens=24, eos_token_id=None)
        assert torch.equal(out, model.generate(ids, max_new_tokens=24, do_sample=False, eos_token_id=None))
        stats.append(gen.last_stats)
        run = (
            {"start_acceptance": dict(zip(("hits", "trials"), stats[-1].start_acceptance))}
            if stats[-1].start_acceptance
            else {}
        )
        proposer = AdaptiveProposer(
            KEYED,
            cost=cost_model(KEYED, gen.proposer.cost.curve, stats[-1].start_shape, stats[-1].start_evidence or None),
            start=recorded_request_start(KEYED, run),
        )
        _, accepted, drafted, _ = replay_one(proposer, out[0].tolist(), ids.shape[1], 24, stats[-1].pass_seconds)
        assert list(zip(drafted, accepted)) == list(stats[-1].draft_trace)
    assert isinstance(gen.proposer.start, RequestStarts) and gen.proposer.start is request_start(model, KEYED)
    assert len(gen.proposer.start) == 2
    assert [bool(s.start_acceptance) for s in stats] == [False, False, True]  # only the opening seen before
    forget_request_starts(model)

"""The per-request bookkeeping of draftless's serving proposer (``integration.request_drafts``) against a fake
engine batch whose requests join, finish, are aborted, move between rows, are preempted and resume: each keeps
its own index, equal at every step to a fresh index over its tokens, and none outlives its request. Then the vLLM
adapter (``integration.vllm``) over a fake runner, and the plugin's no-op without vLLM."""

import types

import numpy as np
import pytest

from draftless.index import SuffixIndex
from draftless.integration.request_drafts import RequestDrafts
from draftless.integration.vllm import DraftlessProposer
from draftless.integration.vllm_plugin import register
from draftless.lookup.step_cost import StepCost


class FakeEngine:
    """An engine's side: requests in rows of a token buffer. A step gives each running request the prefix of its
    pending draft that matches its true continuation, then its next true token, as verification would."""

    def __init__(self, drafts, rows=8, max_len=2100):
        self.drafts = drafts
        self.buffer = np.zeros((rows, max_len), dtype=np.int32)
        self.rows, self.streams, self.truth, self.prompt, self.pending, self.live = [], {}, {}, {}, {}, set()
        self.drafted = 0

    def add(self, request_id, truth, prompt_length):
        self.truth[request_id] = list(truth)
        self.prompt[request_id] = prompt_length
        self.streams[request_id] = list(truth[:prompt_length])
        self.rows.append(request_id)
        self.live.add(request_id)

    def finish(self, request_id):  # finished and aborted look alike to the proposer: gone from the engine
        self.rows.remove(request_id)
        self.live.discard(request_id)

    def preempt(self, request_id):
        self.rows.remove(request_id)
        self.pending.pop(request_id, None)  # its draft is not verified

    def step(self):
        new_tokens = []
        for i, request_id in enumerate(self.rows):
            stream, truth = self.streams[request_id], self.truth[request_id]
            draft = self.pending.get(request_id, [])
            held = 0
            while held < len(draft) and draft[held] == truth[len(stream) + held]:
                held += 1
            gained = draft[:held] + [truth[len(stream) + held]]
            stream.extend(gained)
            self.buffer[i, : len(stream)] = stream
            new_tokens.append(gained)
        lengths = [len(self.streams[r]) for r in self.rows]
        prompts = [self.prompt[r] for r in self.rows]
        drafts = self.drafts.step(list(self.rows), new_tokens, lengths, self.buffer, prompts, self.live)
        self.pending = dict(zip(self.rows, drafts))
        self.drafted += sum(map(len, drafts))
        return drafts


def repeating(seed, length=2000, period=23):
    base = np.random.default_rng(seed).integers(0, 50, size=period).tolist()
    return (base * (length // period + 1))[:length]


def assert_fresh(engine, drafts):
    assert set(drafts.proposers) <= engine.live  # nothing outlives its request
    for request_id in engine.rows:
        stream = np.array(engine.streams[request_id])
        index = drafts.proposers[request_id].index
        np.testing.assert_array_equal(index.tokens, stream)
        assert index.longest_match() == SuffixIndex(stream).longest_match()


def cheap_steps():
    return RequestDrafts(max_draft=16, max_model_len=4000, step_cost=StepCost(prior_slope=1 / 256))


def test_requests_join_finish_abort_and_move_rows_each_with_its_own_index():
    drafts = cheap_steps()
    engine = FakeEngine(drafts)
    engine.add("a", repeating(0), 30)
    engine.add("b", repeating(1), 40)
    built = {}
    for step in range(40):
        if step == 5:
            engine.add("c", repeating(2), 25)
        if step == 12:
            engine.finish("a")
        if step == 15:
            engine.add("d", repeating(3), 50)
        if step == 20:
            engine.finish("b")  # aborted mid-way
        if step % 3 == 0:
            engine.rows.reverse()  # requests move between rows
        engine.step()
        assert_fresh(engine, drafts)
        for request_id in engine.rows:
            assert built.setdefault(request_id, drafts.proposers[request_id]) is drafts.proposers[request_id]
    assert set(drafts.proposers) == {"c", "d"}
    assert drafts.stats.rebuilt == 0 and drafts.stats.built == 4 and drafts.stats.dropped == 2
    assert engine.drafted > 0  # the repeating text was drafted


def test_a_preempted_request_keeps_its_index_and_resumes_where_it_was():
    drafts = cheap_steps()
    engine = FakeEngine(drafts)
    engine.add("a", repeating(0), 30)
    engine.add("b", repeating(1), 30)
    for _ in range(4):
        engine.step()
    kept = drafts.proposers["b"]
    engine.preempt("b")
    for _ in range(3):
        engine.step()
        assert drafts.proposers["b"] is kept and len(kept.index) == len(engine.streams["b"])
    engine.rows.insert(0, "b")  # resumed, in another row
    for _ in range(3):
        engine.step()
        assert_fresh(engine, drafts)
    assert drafts.proposers["b"] is kept and drafts.stats.rebuilt == 0


def test_a_stream_that_is_not_the_proposers_is_indexed_again():
    drafts = cheap_steps()
    engine = FakeEngine(drafts)
    engine.add("a", repeating(0), 30)
    engine.step()
    engine.streams["a"][5] = 49  # the engine's stream is not what the proposer saw: rebuilt over it
    engine.truth["a"][5] = 49
    drafts.proposers["a"].index.extend([7])  # and one the proposer saw that the engine never had
    engine.step()
    assert drafts.stats.rebuilt == 1
    assert_fresh(engine, drafts)


def test_rows_reading_their_prompt_get_no_draft_and_no_index():
    drafts = cheap_steps()
    tokens = np.zeros((2, 10), dtype=np.int32)
    out = drafts.step(["a", "b"], [[], [3]], [4, 5], tokens, [4, 4], {"a", "b"})
    assert out[0] == [] and "a" not in drafts.proposers and "b" in drafts.proposers


def test_step_times_teach_the_cost_of_a_position():
    now = [0.0]
    drafts = RequestDrafts(max_draft=16, max_model_len=4000, clock=lambda: now[0])
    engine = FakeEngine(drafts)
    rng = np.random.default_rng(5)
    for r in range(3):  # text that repeats in some stretches only: drafts of many lengths
        truth = np.concatenate([repeating(r)[:60], rng.integers(50, 90, 60), repeating(r)[:200]] * 5)
        engine.add(f"r{r}", truth.tolist(), 40)
    engine.step()  # prompts read in this step: not timed
    for _ in range(150):
        now[0] += 0.05 + 0.01 * drafts._last_rows + 0.002 * drafts._last_drafts
        engine.step()
    a, b_row, b_draft = drafts.cost.coefficients()
    assert a + 3 * b_row == pytest.approx(0.08, rel=0.1) and b_draft == pytest.approx(0.002, rel=0.3)
    assert drafts.stats.timed_steps == 150  # all but the step that read the prompts


def test_where_positions_are_dear_an_uncertain_draft_is_not_made():
    stream = np.random.default_rng(0).integers(0, 500, 300)
    stream[-2:] = stream[100:102]  # a two-token match: an uncertain draft
    tokens = stream[None, :].astype(np.int32)
    dear = StepCost()
    for n in (1, 41) * 20:
        dear.observe(1, n - 1, 0.01 * n)  # a step costs in proportion to its positions
    outs = []
    for cost in (StepCost(prior_slope=1 / 4096), dear):
        drafts = RequestDrafts(max_draft=8, max_model_len=4000, step_cost=cost)
        outs.append(drafts.step(["a"], [stream[-1:].tolist()], [300], tokens, [299], {"a"})[0])
    assert len(outs[0]) > 0 and outs[1] == []


@pytest.mark.parametrize(
    "kwargs, match",
    [({"max_draft": 0, "max_model_len": 10}, "max_draft"), ({"max_draft": 4, "max_model_len": 1.5}, "max_model_len")],
)
def test_settings_are_checked(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RequestDrafts(**kwargs)
    with pytest.raises(TypeError, match="config"):
        RequestDrafts(4, 10, config=object())


def test_rows_must_agree():
    with pytest.raises(ValueError, match="one entry a row"):
        cheap_steps().step(["a", "b"], [[1]], [3, 3], np.zeros((2, 4), dtype=np.int32), [2, 2], {"a", "b"})


def fake_vllm_config(k=8):
    model = types.SimpleNamespace(max_model_len=256, get_vocab_size=lambda: 64)
    return types.SimpleNamespace(speculative_config=types.SimpleNamespace(num_speculative_tokens=k), model_config=model)


def test_the_vllm_proposer_reads_request_ids_from_the_runner_it_is_handed():
    proposer = DraftlessProposer(fake_vllm_config())
    tokens = np.zeros((4, 256), dtype=np.int32)
    tokens[0, :60] = repeating(0, length=60)
    with pytest.raises(RuntimeError, match="plugin"):
        proposer.propose([[int(tokens[0, 59])]], np.array([60]), tokens)
    batch = types.SimpleNamespace(req_ids=["r0", None, None], num_prompt_tokens=np.array([59, 0, 0]))
    proposer.bind_runner(types.SimpleNamespace(input_batch=batch, requests={"r0": object()}))
    drafts = proposer.propose([[int(tokens[0, 59])]], np.array([60, 0, 0]), tokens, slot_mappings=None)
    assert len(drafts) == 1 and all(isinstance(t, int) for t in drafts[0])
    assert list(proposer.drafts.proposers) == ["r0"]
    assert proposer.drafts.proposers["r0"].prompt_len == 59
    with pytest.raises(ValueError, match="speculative_config"):
        DraftlessProposer(types.SimpleNamespace(speculative_config=None))


def test_the_plugin_leaves_a_process_without_vllm_as_it_is():
    pytest.importorskip("torch")
    try:
        import vllm  # noqa: F401
    except ImportError:
        assert register() is None
    else:
        pytest.skip("vLLM is installed: the plugin is tested by the vLLM tests")

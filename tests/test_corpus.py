"""``ReferenceCorpus`` and the adaptive proposer drafting from it: matches and continuations against brute force,
documents never run into each other, the oldest documents dropped past ``max_tokens``, saving without pickle,
and the policy's choice between the request's own text and the corpus."""

import naive
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from draftless.lookup import AdaptiveConfig, AdaptiveProposer, ReferenceCorpus
from draftless.lookup.acceptance_model import CORPUS, DEFAULT_PRIOR, PROMPT
from draftless.lookup.adaptive import CPU_SMALL_MODEL
from draftless.lookup.cost_model import CostCurve

documents = st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=12), max_size=5)


def document_end(corpus, end):
    """The last position of the document holding position ``end`` (brute force over the documents)."""
    last = -1
    for doc in corpus.documents():
        last += doc.size
        if end <= last:
            return last
    raise AssertionError(f"position {end} lies past every document")


@settings(max_examples=80, deadline=None)
@given(documents, st.lists(st.integers(0, 5), max_size=30), st.integers(0, 20))
def test_the_match_and_its_continuation_agree_with_brute_force(docs, live, k):
    corpus = ReferenceCorpus(docs)
    corpus.check_invariants()
    flat = [t for doc in docs for t in doc]
    view = corpus.view()
    for i, tok in enumerate(live):
        view.feed([tok])
        length = naive.stream_match(flat, live[: i + 1])[0]
        assert view.length == length
        end = view.source_end()
        if not length:
            assert end == -1 and view.continuation(k).size == 0
            continue
        assert flat[end - length + 1 : end + 1] == live[i + 1 - length : i + 1]  # a real occurrence of the match
        # the drafted occurrence is followed by the token that most often followed the match (ties: latest)
        ranked = naive.ranked_continuations_of(flat, live[i + 1 - length : i + 1])
        if ranked:
            assert flat[end + 1] == ranked[0][0]
        stop = document_end(corpus, end)
        assert view.continuation(k).tolist() == flat[end + 1 : min(stop + 1, end + 1 + k)]  # never past its document


def test_documents_added_during_a_request_are_matched_and_bounded():
    corpus = ReferenceCorpus([[1, 2, 3]])
    view = corpus.view()
    view.feed([7])
    assert view.length == 0
    corpus.add([7, 8, 9, 10])
    corpus.add([11, 12])
    view.feed([8, 9])  # the match grows from where it was: "8 9" (see ``SuffixMatcher``)
    assert view.length == 2 and view.continuation(10).tolist() == [10]  # not into [11, 12]


def test_many_documents_and_drops_keep_the_starts_right():
    rng = np.random.default_rng(0)
    corpus = ReferenceCorpus(max_tokens=400)
    for i in range(300):  # the starts buffer doubles past 16 documents; past 400 tokens the oldest go
        corpus.add(rng.integers(0, 6, rng.integers(1, 9)))
        if i % 37 == 0:
            corpus.check_invariants()
    corpus.check_invariants()
    assert 0.5 * 400 < len(corpus) <= 400


def test_past_max_tokens_the_oldest_documents_go():
    corpus = ReferenceCorpus(max_tokens=10)
    corpus.add([1, 2, 3, 4])
    corpus.add([5, 6, 7, 8])
    old = corpus.view()
    old.feed([3])
    corpus.add([9, 9, 9])  # 11 tokens: drop the oldest until at most 7.5 remain
    corpus.check_invariants()
    assert [d.tolist() for d in corpus.documents()] == [[5, 6, 7, 8], [9, 9, 9]]
    assert old.continuation(5).tolist() == [4]  # a request keeps the index it started with
    view = corpus.view()
    view.feed([3])
    assert view.length == 0
    with pytest.raises(ValueError, match="max_tokens"):
        corpus.add(list(range(11)))


def test_requests_go_on_matching_while_a_rebuild_runs(monkeypatch):
    import threading

    import draftless.lookup.corpus as corpus_module

    corpus = ReferenceCorpus([[1, 2, 3, 4], [5, 6, 7, 8]], max_tokens=10)
    started, release = threading.Event(), threading.Event()
    build = corpus_module._indexed

    def held(docs, vocab_size):  # the rebuild past max_tokens, held until the requests below have run
        started.set()
        assert release.wait(60)
        return build(docs, vocab_size)

    monkeypatch.setattr(corpus_module, "_indexed", held)
    adding = threading.Thread(target=corpus.add, args=([9, 9, 9],))
    adding.start()
    assert started.wait(60)
    seen = []

    def request():  # a request starting and one going on, each taking the corpus's lock, meanwhile
        view = corpus.view()
        view.feed([6, 7])
        seen.append((view.length, view.continuation(5).tolist(), corpus.num_documents, len(corpus)))

    matching = threading.Thread(target=request)
    matching.start()
    matching.join(60)  # a liveness bound: had it waited for the rebuild, it would still be waiting here
    finished = not matching.is_alive()
    release.set()
    adding.join(60)
    matching.join(60)
    assert finished and seen == [(2, [8], 2, 8)]  # the corpus as it was before the add
    assert [d.tolist() for d in corpus.documents()] == [[5, 6, 7, 8], [9, 9, 9]]
    corpus.check_invariants()


@pytest.mark.parametrize(
    "build, error, words",
    [
        (lambda: ReferenceCorpus("abc"), TypeError, "documents"),
        (lambda: ReferenceCorpus([1, 2, 3]), TypeError, "a 1-D sequence of token ids, got int"),  # one flat document
        (lambda: ReferenceCorpus([[1, -2]]), ValueError, "negative token id"),
        (lambda: ReferenceCorpus([[1.5]]), TypeError, "integer token ids"),
        (lambda: ReferenceCorpus([[5]], vocab_size=5), ValueError, "past the vocabulary"),
        (lambda: ReferenceCorpus(max_tokens=0), ValueError, "max_tokens"),
        (lambda: ReferenceCorpus(vocab_size="big"), TypeError, "vocab_size"),
        (lambda: AdaptiveProposer(corpus=[[1, 2]]), TypeError, "corpus"),
    ],
)
def test_bad_input_is_refused_by_name(build, error, words):
    with pytest.raises(error, match=words):
        build()


def test_save_and_load_without_pickle(tmp_path):
    corpus = ReferenceCorpus([[1, 2, 3], [4, 5]], vocab_size=50, max_tokens=100)
    path = tmp_path / "corpus.npz"
    corpus.save(path)
    again = ReferenceCorpus.load(path)
    again.check_invariants()
    assert [d.tolist() for d in again.documents()] == [[1, 2, 3], [4, 5]]
    assert (again.vocab_size, again.max_tokens) == (50, 100)
    data = dict(np.load(path))
    data["starts"] = np.array([0, 7], dtype=np.int64)  # past the tokens
    np.savez(tmp_path / "bad.npz", **data)
    with pytest.raises(ValueError, match="bad.npz.*document starts"):
        ReferenceCorpus.load(tmp_path / "bad.npz")
    np.savez(tmp_path / "pickled.npz", format=np.array([{"x": 1}], dtype=object))
    with pytest.raises(ValueError, match="not a readable draftless corpus"):
        ReferenceCorpus.load(tmp_path / "pickled.npz")


def proposer(corpus, **config):
    return AdaptiveProposer(AdaptiveConfig(**config), cost=CPU_SMALL_MODEL, corpus=corpus)


def test_the_corpus_is_drafted_from_where_the_request_has_no_match():
    phrase = list(range(10, 40))
    p = proposer(ReferenceCorpus([[3, 4] + phrase, [50, 51, 52]]))
    p.reset(np.array([60, 61, 62] + phrase[:8]))  # the prompt quotes the document's first eight tokens
    draft = p.propose(64)
    assert draft.tolist() == phrase[8 : 8 + draft.size] and draft.size >= 8
    assert p._pending[1] == CORPUS
    p.update(np.append(draft, 99))  # all accepted: the corpus cells learn
    assert p.acceptance.trials[:, CORPUS].sum() > 0


def test_rejected_corpus_drafts_fall_back_to_plain_steps():
    p = AdaptiveProposer(cost=CostCurve((0, 1, 64), (1.0, 1.05, 10.0)), corpus=ReferenceCorpus([[5, 6, 7, 8, 9] * 4]))
    p.reset(np.array([5, 6]))
    origins = []
    for step in range(80):  # the stream keeps ending in the corpus's "5 6", and the model never follows it
        p.propose(64)
        origins.append(None if p._pending is None else p._pending[1])
        p.update(np.array([100 + step]))
        p.propose(64)
        p.update(np.array([5]))
        p.propose(64)
        p.update(np.array([6]))
    assert origins[0] == CORPUS and origins[-10:] == [None] * 10


def test_the_request_wins_ties_and_a_longer_corpus_match_wins():
    head = [1, 2, 3, 4, 5, 6, 7, 8]
    corpus = ReferenceCorpus([head + [20, 21, 22, 23]])
    p = proposer(corpus, corpus_prior=DEFAULT_PRIOR)  # both sources at the same rates: an exact tie
    p.reset(np.array(head + [30, 31, 9] + head))  # the same eight tokens in the prompt
    draft = p.propose(8)
    assert p._pending[1] == PROMPT and draft[:2].tolist() == [30, 31]
    p = proposer(corpus)
    p.reset(np.array([9, 7, 8, 30, 9] + head))  # the prompt matches "7 8", the corpus all eight
    draft = p.propose(8)
    assert p._pending[1] == CORPUS and draft.size and draft.tolist() == [20, 21, 22, 23][: draft.size]
    p = proposer(ReferenceCorpus([[4, 5, 6, 7, 8, 40]]))
    p.reset(np.array([9, 7, 8, 30, 9, 4, 5, 6, 7, 8]))  # a five-token corpus match is kept less often than
    assert p.propose(8)[:1].tolist() == [30] and p._pending[1] == PROMPT  # a two-token one within the request


def test_stream_tokens_past_the_corpus_vocabulary_restart_the_match():
    p = AdaptiveProposer(cost=CPU_SMALL_MODEL, corpus=ReferenceCorpus([[1, 2, 3, 4, 5, 6, 7, 8]], vocab_size=10))
    p.reset(np.array([1, 2, 3, 500, 4, 5]))
    draft = p.propose(8)
    assert p.view.length == 2 and draft.size and draft.tolist() == [6, 7, 8][: draft.size]

"""Re-flowed copies (``draftless.lookup.reflow``): the whitespace-blind index against a brute-force reference, its
whitespace substitutions, the adaptive proposer drafting a re-wrapped and a re-indented copy, and the text
classes read from a tokenizer."""

import naive
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from draftless.lookup import AdaptiveConfig, AdaptiveProposer
from draftless.lookup.acceptance_model import REFLOWED
from draftless.lookup.cost_model import CostCurve
from draftless.lookup.reflow import WHITESPACE, ReflowIndex, check_text_classes

# token ids 0-2 are whitespace ("\n", " ", "\n        "); 3-5 are words, 6-8 the same words with a leading space
# (" the" beside "the"); 9-27 are words of their own
CLASSES = np.array([WHITESPACE] * 3 + [0, 1, 2] + [0, 1, 2] + list(range(3, 22)))
NL, SP, INDENT8 = 0, 1, 2
CHEAP = CostCurve((0, 1, 16, 64), (1.0, 1.02, 1.3, 2.0))  # long drafts pay once trusted


def reference_source(stream, exact_length, min_match=2, lead=2):
    """``ReflowIndex.source`` by brute force: the class stream's longest earlier suffix, its latest end, for a
    stream that ends in a word."""
    if not stream or CLASSES[stream[-1]] == WHITESPACE:
        return None
    words = [i for i, t in enumerate(stream) if CLASSES[t] != WHITESPACE]
    length, recent, _ = naive.longest_match([int(CLASSES[stream[i]]) for i in words])
    if length < max(min_match, exact_length + lead):
        return None
    end = words[recent]
    return None if end >= len(stream) - 1 else (length, end)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 15), max_size=80), st.lists(st.integers(1, 9), max_size=12), st.integers(0, 4))
def test_source_matches_brute_force_over_any_chunking(stream, chunks, exact_length):
    index = ReflowIndex(CLASSES)
    cut = min(len(stream), chunks[0]) if chunks else len(stream)
    index.reset(np.array(stream[:cut], dtype=np.int64))
    pos = cut
    for size in chunks[1:] + [len(stream)]:
        index.extend(np.array(stream[pos : pos + size], dtype=np.int64))
        pos += size
        index.check_invariants()
        assert index.source(exact_length) == reference_source(stream[: min(pos, len(stream))], exact_length)


def test_a_token_past_the_classes_is_a_class_of_its_own():
    index = ReflowIndex(CLASSES)
    assert index.class_of([3, 28, 29, 28]).tolist() == [0, 22, 23, 22]  # never one of the tokenizer's classes


def test_whitespace_substitutes_are_learned_only_between_whitespace_tokens():
    index = ReflowIndex(CLASSES)
    index.learn(np.array([3, 4, INDENT8, 5]), np.array([3, 4, NL]), accepted=2)  # re-indented
    index.learn(np.array([3, SP]), np.array([3, 9]), accepted=1)  # a word where a space was: no rule
    index.learn(np.array([3, 4]), np.array([3, 4, 5]), accepted=2)  # every token kept: nothing to learn
    assert index.substitutes == {INDENT8: NL}
    assert index.substituted(np.array([INDENT8, 5, SP, INDENT8])).tolist() == [NL, 5, SP, NL]
    index.learn(np.array([SP, 3]), np.array([NL]), accepted=0)  # a line broken where a space was
    assert index.substitutes == {INDENT8: NL, SP: NL}
    index.learn(np.array([3, SP, 4]), np.array([3, SP]), accepted=1)  # the next space kept: the rule goes
    assert index.substitutes == {INDENT8: NL}
    index.reset(np.array([3]))
    assert index.substitutes == {}  # per request


@pytest.mark.parametrize(
    "bad, error, words",
    [
        ([0, 1], TypeError, "numpy array"),
        (np.zeros((2, 2), dtype=np.int64), ValueError, "1-D"),
        (np.array([0.5]), TypeError, "integer"),
        (np.array([True]), TypeError, "integer"),
        (np.array([0, -2]), ValueError, ">= 0 or -1"),
        (np.array([], dtype=np.int64), ValueError, "non-empty"),
    ],
)
def test_bad_text_classes_are_refused_by_name(bad, error, words):
    with pytest.raises(error, match=words):
        check_text_classes(bad)
    with pytest.raises(error, match="text_classes"):
        AdaptiveProposer(text_classes=bad)


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"reflow": 1}, TypeError),
        ({"reflow_lead": -1}, ValueError),
        ({"reflow_lead": 1.5}, TypeError),
    ],
)
def test_reflow_knobs_are_validated(kwargs, error):
    with pytest.raises(error, match=next(iter(kwargs))):
        AdaptiveConfig(**kwargs)


def _feed(proposer, prompt, output):
    """Replay ``output`` through ``proposer`` as greedy verification would; returns (origin, draft, kept) per pass."""
    proposer.reset(np.array(prompt, dtype=np.int64))
    passes, pos = [], 0
    while pos < len(output):
        draft = proposer.propose(len(output) - pos - 1)
        origin = proposer._pending[1] if proposer._pending else None
        kept = 0
        while kept < draft.size and pos + kept < len(output) - 1 and draft[kept] == output[pos + kept]:
            kept += 1
        proposer.update(np.array(output[pos : pos + kept + 1], dtype=np.int64))
        passes.append((origin, draft.tolist(), kept))
        pos += kept + 1
    return passes


WORDS = [3, 9, 4, 10, 5, 11, 12, 13, 14, 15, 16, 17]  # a paragraph of twelve different words


def test_a_rewrapped_copy_is_drafted_across_the_changed_line_breaks():
    prompt = [w for word in WORDS for w in (word, SP)]  # one line
    output = []
    for i, word in enumerate(WORDS):  # the same words, wrapped every third word
        output += [word, NL if i % 3 == 2 else SP]
    with_texts = _feed(AdaptiveProposer(cost=CHEAP, text_classes=CLASSES), prompt, output)
    without = _feed(AdaptiveProposer(cost=CHEAP), prompt, output)
    assert any(origin == REFLOWED and kept >= 3 for origin, _, kept in with_texts)
    assert len(with_texts) <= len(without)


def test_a_reindented_block_learns_its_new_indentation():
    lines = [[3, 9, 4], [10, 5, 11], [12, 13, 14], [15, 16, 17], [18, 19, 20]]
    prompt = [t for line in lines for t in [INDENT8] + line]
    output = [t for line in lines for t in [NL] + line]  # the block moved one level out: NL for INDENT8
    passes = _feed(AdaptiveProposer(cost=CHEAP, text_classes=CLASSES), prompt, output)
    reflowed = [(draft, kept) for origin, draft, kept in passes if origin == REFLOWED]
    assert reflowed and any(NL in draft and INDENT8 not in draft for draft, _ in reflowed)  # the substitute
    assert any(kept > 4 for _, kept in reflowed)  # drafted across a new line break
    assert len(passes) < len(_feed(AdaptiveProposer(cost=CHEAP), prompt, output))  # 7 passes against 11


def test_reflow_off_or_without_texts_drafts_as_before():
    prompt = [w for word in WORDS for w in (word, SP)]
    output = [w for i, word in enumerate(WORDS) for w in (word, NL if i % 3 == 2 else SP)]
    off = _feed(AdaptiveProposer(AdaptiveConfig(reflow=False), cost=CHEAP, text_classes=CLASSES), prompt, output)
    none = _feed(AdaptiveProposer(cost=CHEAP), prompt, output)
    assert off == none and all(origin != REFLOWED for origin, _, _ in off)


def test_text_classes_from_a_tokenizer():
    from tiny_models import tiny_tokenizer

    from draftless.integration.token_text import text_classes

    tok = tiny_tokenizer()
    classes = text_classes(tok)
    assert classes.shape == (len(tok),) and text_classes(tok) is classes  # kept per tokenizer
    ids = {text: tok.convert_tokens_to_ids(tok.tokenize(text)) for text in ("the", " the", "\n", "    ")}
    assert classes[ids["the"][0]] == classes[ids[" the"][0]] != WHITESPACE  # one text, spaces aside
    assert all(classes[i] == WHITESPACE for i in ids["\n"] + ids["    "])
    byte_ids = [i for i in range(len(tok)) if "\ufffd" in tok.decode([i])]
    assert len({int(classes[i]) for i in byte_ids}) == len(byte_ids)  # partial characters never match each other


def test_the_classes_are_found_with_the_collector_paused_and_leave_it_as_it_was():
    import gc

    from tiny_models import tiny_tokenizer

    from draftless.integration import models, token_text

    seen = []
    texts = token_text.token_texts
    original = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(token_text, "token_texts", lambda *a: seen.append(gc.isenabled()) or texts(*a))
                assert token_text.text_classes(tiny_tokenizer()).dtype == np.int64
            assert gc.isenabled() == enabled
        with pytest.raises(ZeroDivisionError):  # restored after an error too
            gc.enable()
            with models.collection_paused():
                raise ZeroDivisionError
        assert gc.isenabled()
    finally:
        (gc.enable if original else gc.disable)()
    assert seen == [False, False]


def test_token_texts_are_batch_decodes_whichever_path_reads_them():
    from tiny_models import tiny_tokenizer

    from draftless.integration.token_text import token_texts

    tok = tiny_tokenizer()
    ids = [[i] for i in range(len(tok))]
    assert token_texts(tok, len(tok)) == tok.batch_decode(ids)  # the Rust tokenizer's batch decode

    class Shouting(type(tok)):  # a tokenizer class that decodes otherwise: transformers' path, its decode
        def _decode(self, token_ids, **kwargs):
            return super()._decode(token_ids, **kwargs).upper()

    shouting = Shouting(tokenizer_object=tok.backend_tokenizer)
    assert token_texts(shouting, len(tok)) == [t.upper() for t in tok.batch_decode(ids)]
    tok.clean_up_tokenization_spaces = True  # what transformers adds to the Rust decode: its own path
    assert token_texts(tok, len(tok)) == tok.batch_decode(ids)


def test_a_generator_with_a_tokenizer_drafts_reflowed_copies_exactly():
    import torch
    from tiny_models import tiny_model, tiny_tokenizer

    from draftless.integration import SpeculativeGenerator

    tok = tiny_tokenizer()
    model = tiny_model("llama", vocab=len(tok))
    ids = torch.as_tensor([tok("def add(x, y):\n    return x + y\n" * 3).input_ids])
    assert SpeculativeGenerator(model).proposer.reflow is None  # no tokenizer: no texts
    assert SpeculativeGenerator(model, config=AdaptiveConfig(reflow=False), tokenizer=tok).proposer.reflow is None
    gen = SpeculativeGenerator(model, tok)
    assert gen.proposer.reflow is not None
    late = SpeculativeGenerator(model)  # a tokenizer passed to a call (stop strings) gives the texts too
    out = late.generate(ids, max_new_tokens=12, do_sample=False, tokenizer=tok, stop_strings=["@@"])
    assert late.proposer.reflow is not None
    ref = model.generate(ids, max_new_tokens=12, do_sample=False, tokenizer=tok, stop_strings=["@@"])
    assert torch.equal(out, ref) and torch.equal(gen.generate(ids, max_new_tokens=12, do_sample=False), ref)


def test_a_model_loads_with_the_collector_paused_and_leaves_it_as_it_was(tmp_path, monkeypatch):
    import gc

    import transformers
    from tiny_models import tiny_model, tiny_tokenizer

    from draftless.integration import load_model

    tok = tiny_tokenizer()
    tiny_model("llama", vocab=len(tok)).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    seen = []
    loads = transformers.AutoModelForCausalLM.from_pretrained
    monkeypatch.setattr(
        transformers.AutoModelForCausalLM,
        "from_pretrained",
        lambda *a, **k: seen.append(gc.isenabled()) or loads(*a, **k),
    )
    original = gc.isenabled()
    try:
        gc.enable()
        model, tokenizer = load_model(tmp_path)
        assert seen == [False] and gc.isenabled() and len(tokenizer) == len(tok) and not model.training
    finally:
        (gc.enable if original else gc.disable)()

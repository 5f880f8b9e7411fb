"""Stepped copies (``draftless.index.numbered_period``, ``DigitTokens``, ``draftless.lookup.stepped_copy``): the
kernels against the whole-number reference in ``naive`` on random and numbered streams, hand-made edges, the
checked wrapper's refusals, and the adaptive proposer drafting a log's next line with its numbers stepped."""

import naive
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from draftless.index import DigitTokens, SuffixIndex
from draftless.lookup import AdaptiveConfig, AdaptiveProposer
from draftless.lookup.acceptance_model import STEPPED
from draftless.lookup.cost_model import CostCurve
from draftless.lookup.stepped_copy import SteppedCopy

TOP = 262_143  # digits' ids near the top of a 262k vocabulary, as Gemma 3's are
IDS = list(range(TOP - 9, TOP + 1))  # IDS[d]: digit d
WORDS = list(range(20, 26))
DIGITS = DigitTokens(IDS)
CHEAP = CostCurve((0, 1, 16, 64), (1.0, 1.02, 1.3, 2.0))  # long drafts pay once trusted


def digit(token):
    return IDS.index(token) if token in IDS else None


def number(value, width=1):
    return [IDS[int(c)] for c in str(value).zfill(width)]


def log(lines, start=1, step=1, width=2):
    """``lines`` log lines ``w0 hh:MM w1 worker-N w2 batch B w3``: minutes, worker and batch stepped each line."""
    out = []
    for i in range(lines):
        value = start + i * step
        out += [WORDS[0]] + number(12) + [WORDS[1]] + number(value, width) + [WORDS[2]] + number(value)
        out += [WORDS[3]] + number(30 + value) + [WORDS[4]]
    return out


tokens_st = st.lists(st.sampled_from(IDS[:4] + WORDS[:3]), max_size=60)


@st.composite
def numbered_streams(draw):
    """Lines of a few words and numbers, each number moving by its own step (negative, zero, a carry, a reset)."""
    words = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3))
    starts = draw(st.lists(st.integers(0, 120), min_size=1, max_size=3))
    steps = draw(st.lists(st.integers(-3, 7), min_size=len(starts), max_size=len(starts)))
    widths = draw(st.lists(st.integers(1, 3), min_size=len(starts), max_size=len(starts)))
    lines, out = draw(st.integers(1, 6)), []
    for i in range(lines):
        for w in words:
            out.append(w)
        for start, step, width in zip(starts, steps, widths):
            out += number(max(0, start + i * step), width) + [WORDS[5]]
        if draw(st.booleans()) and i == lines - 1:
            out.append(IDS[draw(st.integers(0, 9))])  # a stray digit: numbers that no longer line up
    return out[: len(out) - draw(st.integers(0, 8))]  # cut anywhere, in a number too


def check_against_reference(stream, k=40):
    arr = np.array(stream, dtype=np.int64)
    p = DIGITS.period(arr, 1, 64)
    assert p == naive.numbered_period(stream, digit, 1, 64)
    for period in {p, 1, 3, 4, 7} - {0}:
        assert DIGITS.continuation(arr, period, k).tolist() == naive.stepped_continuation(stream, digit, IDS, period, k)
        assert DIGITS.agreement(arr, period, 20) == naive.stepped_agreement(stream, digit, IDS, period, 20)


@settings(max_examples=150, deadline=None)
@given(tokens_st)
def test_kernels_match_the_reference_on_random_streams(stream):
    check_against_reference(stream)


@settings(max_examples=150, deadline=None)
@given(numbered_streams())
def test_kernels_match_the_reference_on_numbered_streams(stream):
    check_against_reference(stream)


def test_a_long_stream_reads_only_its_window():
    stream = [WORDS[5]] * 3000 + log(40)  # the kernels copy the last periods only: the same answers
    check_against_reference(stream, k=80)


def test_the_next_log_line_is_drafted_with_its_numbers_stepped():
    stream = log(3)
    p = DIGITS.period(stream)
    assert p == len(log(1))
    assert DIGITS.continuation(stream, p, 2 * p).tolist() == log(5)[len(stream) :]  # lines 4 and 5 whole
    # the third line is what the copy would have written, and so is the second's last word (a word reads one
    # period back only; the numbers two)
    assert DIGITS.agreement(stream, p, 64) == p + 1


def lines(values, width=1):
    """Lines ``w0 N w1``, one per value."""
    return [t for v in values for t in [WORDS[0]] + number(v, width) + [WORDS[1]]]


@pytest.mark.parametrize(
    "values, width, expected, why",
    [
        ((8, 9), 1, [WORDS[0]], "9 -> 10 needs a digit more than B has: no guess"),
        ((8, 9), 2, [WORDS[0]] + number(10) + [WORDS[1]], "08, 09 -> 10: B's two digits suffice"),
        ((5, 2), 1, [WORDS[0]] + number(2) + [WORDS[1]], "5, 2 -> -1: below 0, so B's 2 again"),
        ((7, 7), 1, [WORDS[0]] + number(7) + [WORDS[1]], "a number that stayed stays"),
        ((9, 7), 1, [WORDS[0]] + number(5) + [WORDS[1]], "it steps down as well as up"),
        ((1, 3), 3, [WORDS[0]] + number(5, 3) + [WORDS[1]], "001, 003 -> 005, zero-padded"),
    ],
)
def test_hand_made_edges(values, width, expected, why):
    stream = lines(values, width)
    assert DIGITS.period(stream, 2) == width + 2
    assert DIGITS.continuation(stream, width + 2, width + 2).tolist() == expected, why


def test_the_digits_already_written_must_be_the_stepped_numbers():
    line = len(log(1))
    stream = log(3)
    at_worker = stream + log(1)[:4] + number(7, 2)[:1]  # "0" of 04 written: the rest is "4"
    assert DIGITS.continuation(at_worker, line, 1).tolist() == number(4)
    wrong = stream + log(1)[:4] + [IDS[9]]  # "9" cannot begin 04
    assert DIGITS.continuation(wrong, line, 3).tolist() == []
    assert DIGITS.agreement(wrong, line, 64) == 0


def test_numbers_past_18_digits_stop_the_copy():
    big = [WORDS[0]] + [IDS[1]] * 19 + [WORDS[1]]
    stream = big * 3
    assert DIGITS.period(stream) == len(big)
    assert DIGITS.continuation(stream, len(big), 5).tolist() == [WORDS[0]]  # the 19-digit number: no guess


def test_no_period_in_words_alone_or_digits_alone():
    assert DIGITS.period([WORDS[0], WORDS[1]] * 2, 4) == 0  # the period 2 is below min_period 4
    assert DIGITS.period(number(1234567890) * 4) == 0  # digits alone: a long number, not a period
    assert DIGITS.period([]) == 0 and DIGITS.continuation([], 4, 5).size == 0 and DIGITS.agreement([], 4) == 0


def test_a_suffix_index_is_read_as_its_stream():
    index = SuffixIndex(log(3))
    assert DIGITS.period(index) == DIGITS.period(log(3))
    assert DIGITS.continuation(index, len(log(1)), 9).tolist() == DIGITS.continuation(log(3), len(log(1)), 9).tolist()


@pytest.mark.parametrize(
    "ids, error",
    [
        (range(9), ValueError),
        ([1] * 10, ValueError),
        ([-1] + list(range(9)), ValueError),
        ("0123456789", TypeError),
        (5, TypeError),
        ([True] * 10, TypeError),
        ([0.5] * 10, TypeError),
    ],
)
def test_digit_tokens_are_checked(ids, error):
    with pytest.raises(error, match="ids"):
        DigitTokens(ids)


def test_arguments_are_checked_before_a_kernel_sees_them():
    with pytest.raises(ValueError, match="tokens"):
        DIGITS.period([-1, 2])
    with pytest.raises(TypeError, match="tokens"):
        DIGITS.continuation([0.5], 4, 2)
    with pytest.raises(ValueError, match="period"):
        DIGITS.continuation(log(2), 0, 2)
    with pytest.raises(ValueError, match="k"):
        DIGITS.continuation(log(2), 4, -1)
    with pytest.raises(TypeError, match="cap"):
        DIGITS.agreement(log(2), 4, "64")
    with pytest.raises(ValueError, match="min_period"):
        SteppedCopy(IDS, min_period=0)


def test_the_policy_drafts_the_next_line_stepped_and_learns_its_cell():
    config = AdaptiveConfig(start_memory=0.0)
    stepped = AdaptiveProposer(config, cost=CHEAP, digit_tokens=IDS)
    plain = AdaptiveProposer(config, cost=CHEAP)
    stream = log(6)
    for proposer in (stepped, plain):
        proposer.reset(np.array(stream[: len(log(3))], dtype=np.int64))
    line = len(log(1))
    draft = stepped.propose(64)
    assert draft.tolist()[:line] == log(4)[len(log(3)) :]  # the fourth line, numbers stepped
    assert plain.propose(64).tolist()[:line] != log(4)[len(log(3)) :]  # the exact index copies the third as it was
    accepted = min(draft.size, 2 * line)
    stepped.update(np.array(stream[len(log(3)) : len(log(3)) + accepted + 1], dtype=np.int64))
    assert stepped.acceptance.hits[1, STEPPED].sum() > 0  # its own cell learned the outcome
    off = AdaptiveProposer(AdaptiveConfig(stepped_copy=False), cost=CHEAP, digit_tokens=IDS)
    assert off.stepped is None
    with pytest.raises(ValueError, match="ids"):
        AdaptiveProposer(config, digit_tokens=[1, 2, 3])


def test_a_tokenizer_that_writes_numbers_digit_by_digit_gives_its_digits():
    from tiny_models import tiny_tokenizer

    from draftless.integration.token_text import digit_tokens

    tok = tiny_tokenizer()
    ids = digit_tokens(tok)
    assert ids is not None and [tok.decode([i]) for i in ids] == list("0123456789")
    assert digit_tokens(tok) is ids  # kept per tokenizer


def test_a_tokenizer_that_merges_digits_gives_none():
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    from draftless.integration.token_text import digit_tokens

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        ["batch 12 in 34ms, 2024 and 8010 " * 20], vocab_size=300, min_frequency=1, show_progress=False
    )
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer)
    assert tok.convert_ids_to_tokens(tok.encode("12")) != ["1", "2"]  # "12" is one token here
    assert digit_tokens(tok) is None


def test_a_generator_drafts_stepped_copies_exactly():
    import torch
    from tiny_models import tiny_model, tiny_tokenizer

    from draftless.integration import SpeculativeGenerator

    tok = tiny_tokenizer()
    model = tiny_model("llama", vocab=len(tok))
    text = "".join(f"12:0{i} worker-{i} batch 3{i} in 4{i}ms\n" for i in range(1, 5))
    ids = torch.as_tensor([tok(text).input_ids])
    gen = SpeculativeGenerator(model, tok)
    assert gen.proposer.stepped is not None
    off = SpeculativeGenerator(model, config=AdaptiveConfig(stepped_copy=False), tokenizer=tok)
    assert off.proposer.stepped is None and off.proposer.reflow is not None
    no_reflow = SpeculativeGenerator(model, config=AdaptiveConfig(reflow=False), tokenizer=tok)
    assert no_reflow.proposer.stepped is not None and no_reflow.proposer.reflow is None  # each on its own
    late = SpeculativeGenerator(model)  # a tokenizer passed to a call (stop strings) gives the digits too
    assert late.proposer.stepped is None
    late.generate(ids, max_new_tokens=4, do_sample=False, tokenizer=tok, stop_strings=["@@"])
    assert late.proposer.stepped is not None
    out = gen.generate(ids, max_new_tokens=16, do_sample=False)
    assert torch.equal(out, model.generate(ids, max_new_tokens=16, do_sample=False))

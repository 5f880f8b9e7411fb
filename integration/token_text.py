"""Each token id's text class, from a tokenizer: what ``draftless.lookup.reflow`` matches copies by when the
model changes their whitespace; and the digits' token ids, which ``draftless.lookup.stepped_copy`` writes stepped
numbers in (``digit_tokens``).

A token's class is its decoded text with surrounding whitespace stripped (" see" and "see" share one), or
``WHITESPACE`` where nothing is left. A special token, or one that decodes to an incomplete character (a byte of
a longer UTF-8 sequence, shown as U+FFFD), is a class of its own: two different bytes must never match.
Decoding every id takes a second or two for a 262k vocabulary through ``batch_decode`` (Gemma 3's: 1.6 s on a
2-core CPU, in every process that builds a ``SpeculativeGenerator``), 0.2 s through the Rust tokenizer's own batch
decode, which gives the same texts where transformers adds nothing to it (``token_texts``); the classes are kept
per tokenizer object. Both run with Python's cyclic garbage collector paused (``collector.collection_paused``):
their half a million short-lived lists and strings otherwise set off collections that each walk the whole heap,
0.4 s of 0.9 s for Gemma's vocabulary once torch, transformers and the model are loaded (400k objects tracked).
"""

import logging
import weakref

import numpy as np

from draftless.lookup.reflow import WHITESPACE

from .models import collection_paused

logger = logging.getLogger(__name__)
_CLASSES = weakref.WeakKeyDictionary()
_DIGITS = weakref.WeakKeyDictionary()
# numbers as a model writes them: alone, after a word, in a date and a port; every digit of each must come out as
# the token its digit has alone, in order, for the stepped copy to write numbers as the model does
DIGIT_PROBES = ("1234567890", "batch 9876543210 in", "2024-03-01 12:04:00", "port = 8010\n", "x[10] = 2.50")


def token_texts(tokenizer, size):
    """Each of the first ``size`` token ids decoded alone, as ``tokenizer.batch_decode`` decodes it: through the
    Rust tokenizer's batch decode where the tokenizer is transformers' ``TokenizersBackend`` with its decoding
    methods as transformers defines them and no clean-up of spaces (what ``_decode`` adds to the Rust decode),
    else through ``batch_decode`` itself."""
    ids = [[i] for i in range(size)]
    try:
        from transformers.tokenization_utils_tokenizers import TokenizersBackend
    except ImportError:  # another transformers: its own path
        return tokenizer.batch_decode(ids)
    cls = type(tokenizer)
    plain = (
        isinstance(tokenizer, TokenizersBackend)
        and not tokenizer.clean_up_tokenization_spaces
        and all(
            getattr(cls, name) is getattr(TokenizersBackend, name) for name in ("_decode", "decode", "batch_decode")
        )
    )
    if not plain:
        return tokenizer.batch_decode(ids)
    return tokenizer.backend_tokenizer.decode_batch(ids, skip_special_tokens=False)


def text_classes(tokenizer):
    """An int64 array: the text class of each token id of ``tokenizer`` (``len(tokenizer)`` of them)."""
    try:
        return _CLASSES[tokenizer]
    except (KeyError, TypeError):  # TypeError: an object that weak references cannot hold
        pass
    size = len(tokenizer)
    with collection_paused():
        classes = _classes(tokenizer, size)
    try:
        _CLASSES[tokenizer] = classes
    except TypeError:
        pass
    return classes


def _classes(tokenizer, size):
    texts = token_texts(tokenizer, size)
    special = set(getattr(tokenizer, "all_special_ids", ()) or ())
    classes = np.empty(size, dtype=np.int64)
    names = {}
    for i, text in enumerate(texts):
        word = text.strip()
        if i in special or "\ufffd" in text:
            classes[i] = names.setdefault(("token", i), len(names))
        elif word:
            classes[i] = names.setdefault(word, len(names))
        else:
            classes[i] = WHITESPACE
    logger.debug("text classes of %d tokens: %d classes, %d whitespace", size, len(names), int((classes < 0).sum()))
    return classes


def digit_tokens(tokenizer):
    """The ten ASCII digits' token ids, ``ids[d]`` the token that ``tokenizer`` encodes digit ``d`` alone as,
    where it writes every number of ``DIGIT_PROBES`` digit by digit in those tokens (Gemma 3's and SmolLM2's
    do); None where it does not (a tokenizer that merges digits into one token: ``draftless.lookup.stepped_copy``
    then drafts nothing)."""
    try:
        return _DIGITS[tokenizer]
    except (KeyError, TypeError):
        pass
    ids = _digit_ids(tokenizer)
    try:
        _DIGITS[tokenizer] = ids
    except TypeError:
        pass
    return ids


def _digit_ids(tokenizer):
    ids = []
    for digit in "0123456789":
        encoded = list(tokenizer.encode(digit, add_special_tokens=False))
        if len(encoded) != 1:
            return None
        ids.append(int(encoded[0]))
    if len(set(ids)) != 10:
        return None
    for probe in DIGIT_PROBES:
        encoded = [int(t) for t in tokenizer.encode(probe, add_special_tokens=False)]
        if [ids.index(t) for t in encoded if t in ids] != [int(c) for c in probe if c.isdigit()]:
            return None
    return ids

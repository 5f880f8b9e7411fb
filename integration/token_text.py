"""Each token id's text class, from a tokenizer: what ``draftless.lookup.reflow`` matches copies by when the
model changes their whitespace.

A token's class is its decoded text with surrounding whitespace stripped (" see" and "see" share one), or
``WHITESPACE`` where nothing is left. A special token, or one that decodes to an incomplete character (a byte of
a longer UTF-8 sequence, shown as U+FFFD), is a class of its own: two different bytes must never match.
Decoding every id takes a second or two for a 262k vocabulary, so the classes are kept per tokenizer object.
"""

import logging
import weakref

import numpy as np

from draftless.lookup.reflow import WHITESPACE

logger = logging.getLogger(__name__)
_CLASSES = weakref.WeakKeyDictionary()


def text_classes(tokenizer):
    """An int64 array: the text class of each token id of ``tokenizer`` (``len(tokenizer)`` of them)."""
    try:
        return _CLASSES[tokenizer]
    except (KeyError, TypeError):  # TypeError: an object that weak references cannot hold
        pass
    size = len(tokenizer)
    texts = tokenizer.batch_decode([[i] for i in range(size)])
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
    logger.debug("text classes of %d tokens: %d classes, %d whitespace", size, len(names),
                 int((classes < 0).sum()))
    try:
        _CLASSES[tokenizer] = classes
    except TypeError:
        pass
    return classes

"""Re-flowed copies: the longest match of the stream's end with its whitespace ignored.

A model often copies text with its whitespace changed: a docstring re-wrapped at other line breaks, a method
re-indented as a function, a list re-spaced. The exact index then matches only the few tokens written since the
last changed space and drafts short, or from another occurrence. ``ReflowIndex`` indexes the same stream by
each token's *text class* (its text with surrounding whitespace stripped, so that " see" and "see" are one
class; whitespace-only tokens left out), so that its longest match runs back across the changed whitespace to
where the copy began. Its draft is the stream's own continuation after that occurrence, with the whitespace
the model has been seen to write instead (``learn``) put in place of the source's.

It is offered only once the model has written a word after the changed whitespace (a stream that ends in
whitespace is not matched: which word comes next is what the exact index cannot tell either), and only where
it matches at least ``lead`` more words than the exact match has tokens. Replayed on the 62 recorded runs (245
suite columns, ``docs/evidence.md``, "Re-flowed copies"): +1.6 % on average, +6.8 % on code_edit
(50 columns), the worst column -0.6 %.

The text classes come from a tokenizer, which this layer does not import: ``draftless.integration`` builds
them (``token_text.text_classes``) and passes the array.
"""

import numpy as np

from draftless.index import SuffixIndex

WHITESPACE = -1  # the text class of a token whose text is whitespace only
EMPTY = np.empty(0, dtype=np.int64)


def check_text_classes(text_classes):
    """``text_classes`` as a read-only int64 array: one class per token id, >= 0, or ``WHITESPACE``."""
    if not isinstance(text_classes, np.ndarray):
        raise TypeError(f"text_classes must be a numpy array, got {type(text_classes).__name__}")
    if text_classes.ndim != 1 or text_classes.size == 0:
        raise ValueError(f"text_classes must be a non-empty 1-D array, got shape {text_classes.shape}")
    if not np.issubdtype(text_classes.dtype, np.integer) or text_classes.dtype == np.bool_:
        raise TypeError(f"text_classes must hold integer classes, got dtype {text_classes.dtype}")
    if text_classes.min() < WHITESPACE:
        raise ValueError(f"text_classes must hold classes >= 0 or {WHITESPACE} (whitespace), got {text_classes.min()}")
    out = text_classes.astype(np.int64, copy=True)
    out.flags.writeable = False
    return out


class ReflowIndex:
    """The stream's tokens as text classes, whitespace left out: a ``SuffixIndex`` over them, the stream
    position of each (``positions``), and the whitespace substitutions learned in the request.

    Invariant: ``classes.tokens[i] == class_of(stream[positions[i]])`` for every i, and ``positions`` holds,
    in order, exactly the stream positions whose token is not whitespace."""

    def __init__(self, text_classes, min_match=2, lead=2):
        self.text_classes = check_text_classes(text_classes)
        self.min_match, self.lead = int(min_match), int(lead)
        self._outside = int(self.text_classes.max()) + 1  # a token id past the array: a class of its own
        self.reset(EMPTY)

    def class_of(self, tokens):
        """The text class of each token id (an id past ``text_classes`` is a class of its own)."""
        tokens = np.asarray(tokens, dtype=np.int64)
        inside = tokens < self.text_classes.size
        past = self._outside + tokens - self.text_classes.size
        return np.where(inside, self.text_classes[np.where(inside, tokens, 0)], past)

    def reset(self, tokens):
        """Start a request whose stream so far is ``tokens`` (checked token ids)."""
        tokens = np.asarray(tokens, dtype=np.int64)
        classes = self.class_of(tokens)
        words = np.flatnonzero(classes >= 0)
        self.classes = SuffixIndex(classes[words])
        self._positions = np.zeros(max(64, 2 * words.size), dtype=np.int64)  # grown by doubling: O(1) appends
        self._positions[: words.size] = words
        self._length = int(tokens.size)
        self._last_is_word = bool(tokens.size) and classes[-1] >= 0
        self.substitutes = {}  # source whitespace token -> the whitespace token the model wrote in its place

    def extend(self, tokens):
        """Append tokens to the stream."""
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.size == 0:
            return
        classes = self.class_of(tokens)
        words = np.flatnonzero(classes >= 0)
        if words.size:
            count = len(self.classes)
            self.classes.extend(classes[words])
            if count + words.size > self._positions.size:
                grown = np.zeros(2 * (count + words.size), dtype=np.int64)
                grown[:count] = self._positions[:count]
                self._positions = grown
            self._positions[count : count + words.size] = self._length + words
        self._length += int(tokens.size)
        self._last_is_word = classes[-1] >= 0

    @property
    def positions(self):
        """The stream position of each indexed word, in order."""
        return self._positions[: len(self.classes)]

    def source(self, exact_length):
        """``(matched words, end)``: the stream position after which the re-flowed copy goes on, and how many
        words the match spans; None where there is none worth drafting (see the module's rules): the stream must
        end in a word."""
        if not self._last_is_word:
            return None
        match = self.classes.longest_match()
        if match.length < max(self.min_match, exact_length + self.lead):
            return None
        end = int(self.positions[match.recent_end])
        if end >= self._length - 1:  # nothing follows it yet
            return None
        return match.length, end

    def substituted(self, draft):
        """``draft`` (copied from the stream) with each learned whitespace substitute in place."""
        if not self.substitutes or draft.size == 0:
            return draft
        return np.array([self.substitutes.get(int(t), int(t)) for t in draft], dtype=np.int64)

    def learn(self, source, written, accepted):
        """A re-flowed draft whose stream tokens were ``source`` kept ``accepted`` tokens and the target wrote
        ``written[accepted]`` at the first rejected one: where both are whitespace, the model writes that
        whitespace in place of the source's (a re-indented block) from now on; where it wrote the source's own
        whitespace against a substitute, the substitute goes (a re-wrapped paragraph's one line break)."""
        if accepted >= min(source.size, written.size):
            return
        src, out = int(source[accepted]), int(written[accepted])
        if self.class_of(src) != WHITESPACE or self.class_of(out) != WHITESPACE:
            return
        if out == src:  # the draft held a substitute there, and the model kept the source's whitespace
            self.substitutes.pop(src, None)
        else:
            self.substitutes[src] = out

    def check_invariants(self):
        self.classes.check_invariants()
        if self.positions.size != len(self.classes):
            raise AssertionError("one position per indexed word")
        if self.positions.size and (np.any(np.diff(self.positions) <= 0) or self.positions[-1] >= self._length):
            raise AssertionError("positions increase and lie in the stream")

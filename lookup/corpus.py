"""``ReferenceCorpus``: token streams shared across requests, drafted from when the request's own text is not.

A RAG pipeline drafts best from the documents it retrieves, a service from what it answered before (the
global history of SuffixDecoding, REST's datastore, llama.cpp's lookup cache), and neither need be in the
prompt. The corpus holds those documents in one ``SuffixIndex``, in the order they were added, with each
document's start kept so that a draft never runs from the end of one document into the next. A request
follows its own stream against the corpus with a ``SuffixMatcher`` (amortised O(1) a token), and the adaptive
proposer weighs the corpus's longest match against the request's own (``AdaptiveProposer``).

With ``max_tokens``, adding past it drops the oldest documents until at most three quarters of it remain and
builds the index again over the rest (an index cannot forget tokens): amortised, a few appends a token.

Documents may be added between requests and while other threads generate: every read and every change holds
the corpus's lock, and a request keeps the index it started with if a rebuild replaces it. A rebuild runs outside
that lock (adds wait for each other), so that the requests matching meanwhile never wait for it.
"""

from __future__ import annotations

import collections
import numbers
import os
import threading

import numpy as np

from draftless.index import SuffixIndex
from draftless.index.storage import archive_error, read_archive, write_archive
from draftless.index.validation import MAX_VOCAB, as_token_array, check_positive_int, check_vocab_size

from .occurrence import frequent_end

FORMAT_NAME = "draftless.ReferenceCorpus"
FORMAT_VERSION = 1
_KEYS = {"format", "version", "vocab_size", "max_tokens", "tokens", "starts"}
KEEP_AFTER_DROP = 0.75  # the share of max_tokens left at most once the oldest documents are dropped


class ReferenceCorpus:
    """Documents (1-D token id sequences) to draft from across requests.

    >>> corpus = ReferenceCorpus([[1, 2, 3, 4], [2, 3, 9]])
    >>> view = corpus.view(); view.feed([7, 1, 2])
    >>> view.length, view.continuation(3).tolist()   # "1 2" is followed by 3 4, then the document ends
    (2, [3, 4])
    """

    def __init__(self, documents=(), *, vocab_size: int | None = None, max_tokens: int | None = None) -> None:
        self.vocab_size = check_vocab_size(vocab_size)
        self.max_tokens = None if max_tokens is None else check_positive_int(max_tokens, "max_tokens")
        self._lock = threading.RLock()  # every read and change of the index, documents and starts
        self._adding = threading.Lock()  # one add at a time: a rebuild runs outside ``_lock``
        self._docs = collections.deque()
        self.index, self._starts, self._n_docs = _indexed(self._docs, self.vocab_size)
        if isinstance(documents, (str, bytes)) or not hasattr(documents, "__iter__"):
            raise TypeError(f"documents must be a collection of token id sequences, got {type(documents).__name__}")
        for doc in documents:
            self.add(doc)

    @property
    def starts(self):
        """Each document's first position in ``index`` (int64, oldest first)."""
        return self._starts[: self._n_docs]

    def add(self, tokens) -> None:
        """Add one document (a 1-D sequence of token ids; an empty one is ignored)."""
        if isinstance(tokens, numbers.Integral):  # ReferenceCorpus([1, 2, 3]) meant one document, not three
            raise TypeError(
                f"a document must be a 1-D sequence of token ids, got {type(tokens).__name__} (pass "
                f"ReferenceCorpus([tokens]) for one document)"
            )
        doc = as_token_array(tokens, self.vocab_size)
        if self.max_tokens is not None and doc.size > self.max_tokens:
            raise ValueError(f"tokens holds {doc.size} token ids, more than max_tokens={self.max_tokens}")
        if doc.size == 0:
            return
        with self._adding:
            with self._lock:
                if self.max_tokens is None or len(self.index) + doc.size <= self.max_tokens:
                    self._docs.append(doc)
                    self._starts, self._n_docs = _appended(self.index, self._starts, self._n_docs, doc)
                    return
                kept = collections.deque(self._docs)
            kept.append(doc)
            total = sum(d.size for d in kept)
            while total > KEEP_AFTER_DROP * self.max_tokens and len(kept) > 1:
                total -= kept.popleft().size
            # built outside the lock, so that requests go on matching against the old index meanwhile (a rebuild
            # of 1.5M tokens takes about a second); a new index: views taken before keep the old one
            index, starts, n_docs = _indexed(kept, self.vocab_size)
            with self._lock:
                self._docs, self.index, self._starts, self._n_docs = kept, index, starts, n_docs

    def __len__(self):
        return len(self.index)

    @property
    def num_documents(self) -> int:
        return len(self._docs)

    def documents(self) -> list[np.ndarray]:
        """The documents held, oldest first (copies)."""
        with self._lock:
            return [doc.copy() for doc in self._docs]

    def view(self):
        """A ``CorpusView``: one request's matcher over the corpus as it is now."""
        with self._lock:
            return CorpusView(self, self.index, self.starts)

    def save(self, path: str | os.PathLike) -> None:
        """Write the documents to ``path`` as ``.npz`` (plain arrays; ``load`` builds the index again)."""
        with self._lock:
            tokens = np.concatenate(self._docs) if self._docs else np.zeros(0, dtype=np.int32)
            starts = self.starts.copy()
        write_archive(
            path,
            FORMAT_NAME,
            FORMAT_VERSION,
            vocab_size=np.array(self.vocab_size, dtype=np.int64),
            max_tokens=np.array(-1 if self.max_tokens is None else self.max_tokens, dtype=np.int64),
            tokens=tokens.astype(np.int32),
            starts=starts,
        )

    @classmethod
    def load(cls, path: str | os.PathLike) -> ReferenceCorpus:
        """The corpus saved at ``path`` (no pickle); a ``ValueError`` names the file if it is not one."""

        def fail(why):
            archive_error(path, "corpus", why)

        def check_headers(headers):  # before any data is read
            (tokens_shape, tokens_dtype), (starts_shape, starts_dtype) = headers["tokens"], headers["starts"]
            if len(tokens_shape) != 1 or tokens_dtype != np.int32 or len(starts_shape) != 1 or starts_dtype != np.int64:
                fail("array shapes or dtypes do not match the format")
            if starts_shape[0] > tokens_shape[0] + 1:
                fail("it holds more documents than tokens")
            if any(headers[k][0] != () or headers[k][1].kind not in "iu" for k in ("vocab_size", "max_tokens")):
                fail("array shapes or dtypes do not match the format")

        arrays = read_archive(path, "corpus", FORMAT_NAME, FORMAT_VERSION, _KEYS, check_headers)
        tokens, starts = arrays["tokens"], arrays["starts"]
        if tokens.ndim != 1 or tokens.dtype != np.int32 or starts.ndim != 1 or starts.dtype != np.int64:
            fail("array shapes or dtypes do not match the format")
        bounds = np.append(starts, tokens.size)
        if starts.size and (starts[0] != 0 or np.any(np.diff(bounds) <= 0)):
            fail("its document starts are not increasing positions within the tokens")
        if not starts.size and tokens.size:
            fail("it holds tokens but no document")
        max_tokens = int(arrays["max_tokens"])
        try:
            corpus = cls(vocab_size=int(arrays["vocab_size"]), max_tokens=None if max_tokens == -1 else max_tokens)
            for a, b in zip(bounds[:-1], bounds[1:]):
                corpus.add(tokens[a:b])
        except (TypeError, ValueError) as exc:
            fail(str(exc))
        if not np.array_equal(corpus.starts, starts):
            fail("its documents do not fit in its max_tokens")
        return corpus

    def check_invariants(self) -> None:
        """The index holds exactly the documents, concatenated; ``starts`` are their first positions."""
        with self._lock:
            self.index.check_invariants()
            sizes = [doc.size for doc in self._docs]
            expected = np.concatenate(self._docs) if self._docs else np.zeros(0, dtype=np.int32)
            if not np.array_equal(self.index.tokens, expected):
                raise AssertionError("the index does not hold the documents")
            if not np.array_equal(self.starts, np.cumsum([0] + sizes)[:-1]):
                raise AssertionError("document starts disagree with the documents")
            if self.max_tokens is not None and len(self.index) > self.max_tokens:
                raise AssertionError("the corpus holds more than max_tokens")

    def __repr__(self):
        return (
            f"ReferenceCorpus(documents={self.num_documents}, tokens={len(self)}, "
            f"max_tokens={self.max_tokens}, vocab_size={self.vocab_size if self.vocab_size != MAX_VOCAB else None})"
        )


def _indexed(docs, vocab_size):
    """``(index, starts, n)``: a new ``SuffixIndex`` over ``docs`` concatenated, and a new buffer whose first ``n``
    entries are each document's first position (new on every rebuild, so that views taken before keep theirs)."""
    index = SuffixIndex(vocab_size=vocab_size)
    starts, n = np.zeros(max(16, 2 * len(docs)), dtype=np.int64), 0
    for doc in docs:
        starts, n = _appended(index, starts, n, doc)
    return index, starts, n


def _appended(index, starts, n, doc):
    """``doc`` appended to ``index`` and its first position to ``starts`` (doubled when full: amortised O(1) a
    document): the new ``(starts, n)``."""
    if n == starts.size:
        starts = np.concatenate([starts, np.zeros_like(starts)])
    starts[n] = len(index)
    index.extend(doc)
    return starts, n + 1


class CorpusView:
    """One request's longest match against the corpus: ``feed`` the request's tokens, read ``length`` and
    ``continuation``. Documents added later are matched too, unless a rebuild replaced the index (then this
    view keeps the one it started with)."""

    def __init__(self, corpus, index, starts):
        self.corpus, self.index, self.starts = corpus, index, starts
        self.matcher = index.matcher()

    def feed(self, tokens):
        """Advance over the request's next tokens (ids past the corpus's vocabulary occur in none of its
        documents: the match starts again after them)."""
        tokens = np.asarray(tokens, dtype=np.int64).ravel()
        with self.corpus._lock:
            outside = np.flatnonzero(tokens >= self.index.vocab_size)
            if outside.size:
                self.matcher.reset()
                tokens = tokens[outside[-1] + 1 :]
            self.matcher.feed(tokens)

    @property
    def length(self):
        """Length of the longest suffix of the request's stream that occurs in the corpus (0: none)."""
        return self.matcher.length

    def source_end(self):
        """The end of the occurrence whose continuation is drafted: the latest occurrence of the token that
        most often followed the match (the adaptive proposer's "frequent" rule), -1 without a match."""
        if self.length == 0:
            return -1
        with self.corpus._lock:
            return frequent_end(self.matcher.continuations(limit=1), self.matcher.recent_end)

    def available(self, end):
        """How many tokens follow ``end`` in its own document."""
        with self.corpus._lock:
            starts = self.corpus.starts if self.index is self.corpus.index else self.starts
            i = int(np.searchsorted(starts, end, side="right"))
            bound = int(starts[i]) if i < starts.size else len(self.index)
            return max(0, bound - 1 - int(end))

    def continuation(self, k, end=None):
        """Up to ``k`` tokens (int64) that follow the match's drafted occurrence (or ``end``) in its document."""
        end = self.source_end() if end is None else int(end)
        if end < 0:
            return np.zeros(0, dtype=np.int64)
        k = min(check_positive_int(k, "k", minimum=0), self.available(end))
        with self.corpus._lock:
            return self.index.continuation(end, k).astype(np.int64)

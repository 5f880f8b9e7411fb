"""A realistic token stream for index benchmarks: tokenised source code and prose, repeated with edits."""

import importlib
import inspect
import json
from pathlib import Path

import numpy as np

DATA = Path(__file__).parent / "data"
SOURCE_MODULES = [
    "json",
    "textwrap",
    "argparse",
    "dataclasses",
    "pathlib",
    "logging",
    "functools",
    "collections",
    "typing",
    "csv",
    "difflib",
    "string",
    "enum",
    "shutil",
    "tempfile",
]


def source_and_prose():
    """Standard-library source files and Spec-Bench prose (articles, documents, questions)."""
    parts = [inspect.getsource(importlib.import_module(name)) for name in SOURCE_MODULES]
    with open(DATA / "spec_bench" / "question_dev.jsonl") as fh:
        parts += [turn for line in fh for turn in json.loads(line)["turns"]]
    return parts


def tokenised_base(tokenizer):
    ids = []
    for text in source_and_prose():
        ids.extend(tokenizer(text, add_special_tokens=False)["input_ids"])
    return np.asarray(ids, dtype=np.int64)


def repeated_with_edits(base, length, seed=0, copy_share=0.5, edit_rate=0.02):
    """``length`` tokens: fresh text from ``base`` in order, interleaved with copies of earlier spans
    (50-800 tokens) in which ``edit_rate`` of the tokens are replaced, as when code or prose is rewritten."""
    rng = np.random.default_rng(seed)
    out = np.empty(length, dtype=np.int64)
    n = 0
    fresh = 0
    while n < length:
        if n > 1000 and rng.random() < copy_share:
            span = int(rng.integers(50, 800))
            start = int(rng.integers(0, n - span)) if n > span else 0
            chunk = out[start : start + span].copy()
            edits = rng.random(chunk.size) < edit_rate
            chunk[edits] = base[rng.integers(0, base.size, int(edits.sum()))]
        else:
            span = int(rng.integers(100, 1000))
            chunk = np.take(base, np.arange(fresh, fresh + span), mode="wrap")
            fresh += span
        take = min(chunk.size, length - n)
        out[n : n + take] = chunk[:take]
        n += take
    return out

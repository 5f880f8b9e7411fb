"""Generation that drafts from a ``ReferenceCorpus`` (and remembers earlier outputs in it): token for token
``model.generate``, whatever the corpus holds; drafts from it are accepted where the model follows it."""

import numpy as np
import pytest
import torch
from tiny_models import VOCAB, repetitive_prompt, tiny_model

from draftless.integration import SpeculativeGenerator, disable, enable, generate
from draftless.lookup import DraftConfig, ReferenceCorpus

NEW = 40


def reference(model, ids):
    return model.generate(ids, max_new_tokens=NEW, eos_token_id=None, do_sample=False)


@pytest.mark.parametrize("kind", ["llama", "gemma3", "gpt2"])
def test_a_corpus_holding_the_answer_is_drafted_from_exactly(kind):
    model = tiny_model(kind)
    ids = torch.randint(2, VOCAB, (1, 12), generator=torch.Generator().manual_seed(1))  # nothing repeats in it
    want = reference(model, ids)
    answer = want[0, ids.shape[1] :].tolist()
    corpus = ReferenceCorpus([[7, 8, 9], ids[0, -4:].tolist() + answer, [3] * 20])  # the answer, not in the prompt
    generator = SpeculativeGenerator(model, corpus=corpus)
    assert torch.equal(generator.generate(ids, max_new_tokens=NEW, eos_token_id=None), want)
    stats = generator.last_stats
    # drafted from the corpus at once (the prompt holds nothing to copy), and every token it drafted kept: the
    # corpus holds the answer. How long each draft is depends on the curve this machine calibrated
    assert stats.draft_trace[0][0] > 0 and stats.drafted == stats.accepted > 0
    plain = SpeculativeGenerator(model)
    plain.generate(ids, max_new_tokens=NEW, eos_token_id=None)
    # no fewer tokens kept than without it (the tiny models' outputs repeat one token, so the stream alone may
    # draft them as well: a clone saw both keep 36 in 3 passes)
    assert stats.accepted >= plain.last_stats.accepted and stats.passes <= plain.last_stats.passes


def test_a_corpus_the_model_never_follows_changes_no_token():
    model = tiny_model("qwen2")
    ids = repetitive_prompt(24)
    rng = np.random.default_rng(0)
    corpus = ReferenceCorpus([rng.integers(2, VOCAB, 200) for _ in range(5)] + [ids[0].tolist()[::-1]])
    out = SpeculativeGenerator(model, corpus=corpus).generate(ids, max_new_tokens=NEW, eos_token_id=None)
    assert torch.equal(out, reference(model, ids))


def test_remembered_outputs_are_drafted_from_by_later_requests():
    model = tiny_model("llama")
    ids = torch.randint(2, VOCAB, (1, 10), generator=torch.Generator().manual_seed(3))
    corpus = ReferenceCorpus()
    generator = SpeculativeGenerator(model, corpus=corpus, remember=True)
    first = generator.generate(ids, max_new_tokens=NEW, eos_token_id=None)
    assert corpus.num_documents == 1 and corpus.documents()[0].tolist() == first[0, ids.shape[1] :].tolist()
    passes = generator.last_stats.passes
    second = generator.generate(ids, max_new_tokens=NEW, eos_token_id=None)  # the same request again
    assert torch.equal(second, first) and torch.equal(first, reference(model, ids))
    assert generator.last_stats.passes < passes
    assert corpus.num_documents == 2


def test_generate_and_enable_take_a_corpus():
    model = tiny_model("llama")
    ids = torch.randint(2, VOCAB, (1, 10), generator=torch.Generator().manual_seed(4))
    want = reference(model, ids)
    corpus = ReferenceCorpus([want[0, 6:].tolist()])
    assert torch.equal(generate(model, ids, max_new_tokens=NEW, eos_token_id=None, corpus=corpus), want)
    enable(model, corpus=corpus, remember=True)
    try:
        assert torch.equal(model.generate(ids, max_new_tokens=NEW, eos_token_id=None), want)
    finally:
        disable(model)
    assert corpus.num_documents == 2


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(corpus=[[1, 2, 3]]), TypeError, "corpus must be a draftless.lookup.ReferenceCorpus"),
        (dict(remember=True), ValueError, "remember=True needs a corpus"),
        (dict(corpus=ReferenceCorpus(), remember=1), TypeError, "remember must be a bool"),
        (dict(corpus=ReferenceCorpus(), config=DraftConfig()), ValueError, "adaptive proposer only"),
    ],
)
def test_bad_corpus_arguments_are_refused_by_name(kwargs, error, words):
    with pytest.raises(error, match=words):
        SpeculativeGenerator(tiny_model("llama"), **kwargs)


def test_the_cli_drafts_from_reference_files(tmp_path, capsys):
    from tiny_models import tiny_tokenizer

    from draftless.integration.cli import main

    tok = tiny_tokenizer()
    model = tiny_model("llama", vocab=len(tok))
    model.save_pretrained(tmp_path / "tiny")
    tok.save_pretrained(tmp_path / "tiny")
    (tmp_path / "prompt.txt").write_text("def add(x, y):")
    (tmp_path / "doc.txt").write_text("def add(x, y):\n    return x + y\n")
    main(
        [
            "generate",
            "--model",
            str(tmp_path / "tiny"),
            "--prompt-file",
            str(tmp_path / "prompt.txt"),
            "--reference",
            str(tmp_path / "doc.txt"),
            "--max-new-tokens",
            "8",
            "--stats",
        ]
    )
    assert "8 new tokens" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(
            [
                "generate",
                "--model",
                str(tmp_path / "tiny"),
                "--prompt-file",
                str(tmp_path / "prompt.txt"),
                "--reference",
                str(tmp_path / "missing.txt"),
            ]
        )

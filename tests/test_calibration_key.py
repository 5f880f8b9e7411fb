"""What a calibration is keyed by: the architecture, not the checkpoint; the hardware; the versions."""

import os

import torch
import transformers
from tiny_models import tiny_model

from draftless.integration import store as calibration_key


def test_key_names_the_architecture_not_the_checkpoint(monkeypatch):
    # a fine-tune, a checkpoint of a training run, a copy in another directory: one calibration
    base = tiny_model("llama")
    tuned = tiny_model("llama", seed=1)  # other weights
    tuned.config._name_or_path = "/somewhere/else/checkpoint-2000"
    tuned.config.eos_token_id = 7
    tuned.config.transformers_version = "4.0.0"
    tuned.config.architectures = ["LlamaForCausalLM"]
    tuned.config.id2label = {0: "a", 1: "b", 2: "c"}
    assert calibration_key.calibration_key(tuned) == calibration_key.calibration_key(base)
    key = calibration_key.calibration_key(base)
    assert calibration_key.calibration_key(tiny_model("llama", vocab=128)) != key  # another shape
    assert calibration_key.calibration_key(tiny_model("qwen2")) != key  # another architecture
    eager = tiny_model("llama")
    eager.set_attn_implementation("eager")  # another attention kernel: other timings, other exact lengths
    assert calibration_key.calibration_key(eager) != key
    monkeypatch.setattr(transformers, "__version__", "0.0.1")  # another forward's code
    assert calibration_key.calibration_key(base) != key


def test_timing_config_drops_checkpoint_fields_at_every_level():
    config = {
        "hidden_size": 8,
        "_name_or_path": "x",
        "eos_token_id": 1,
        "text_config": {"vocab_size": 9, "pad_token_id": 0, "transformers_version": "5.0"},
    }
    assert calibration_key.timing_config(config) == {"hidden_size": 8, "text_config": {"vocab_size": 9}}


def test_processor_identity_names_the_hardware():
    cpu = calibration_key.processor_identity("cpu")
    assert cpu.endswith(f"|{os.cpu_count()}") and torch.backends.cpu.get_cpu_capability() in cpu
    assert calibration_key.processor_identity(torch.device("meta")) == "meta"

"""The torch/transformers layer: verification, KV-cache rollback, acceptance, model loading, the CLI."""

from draftless.lookup import DraftConfig

from .generation_plan import UnsupportedGeneration
from .models import load_model, load_tokenizer
from .request_starts import forget_request_starts
from .speculative import SpeculativeGenerator, generate
from .stats import GenerationStats
from .switch import disable, enable, is_enabled, stats

__all__ = ["DraftConfig", "GenerationStats", "SpeculativeGenerator", "UnsupportedGeneration", "disable",
           "enable", "forget_request_starts", "generate", "is_enabled", "load_model", "load_tokenizer", "stats"]

"""The torch/transformers layer: verification, KV-cache rollback, acceptance, model loading, the CLI.

Its public names are loaded on first use (PEP 562), so that importing the package, or its command line for
``draftless --help`` or a usage error, does not import torch and transformers (4 s on a 2-core CPU)."""

import importlib

# each public name -> the module that defines it
_EXPORTS = {
    "DraftConfig": "draftless.lookup",
    "FastPassOptions": ".fastpass",
    "GenerationStats": ".generation_stats",
    "SpeculativeGenerator": ".speculative",
    "UnsupportedGeneration": ".generation_plan",
    "disable": ".enabling",
    "enable": ".enabling",
    "forget_request_starts": ".kept_state",
    "generate": ".speculative",
    "is_enabled": ".enabling",
    "load_model": ".models",
    "load_tokenizer": ".models",
    "stats": ".enabling",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    where = _EXPORTS.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value  # found without this function from now on
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))

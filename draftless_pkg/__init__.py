"""draftless: speculative decoding for Hugging Face causal LMs with no draft model.

Three layers, each its own subpackage: ``draftless.index`` (the Numba suffix index), ``draftless.lookup`` (the
drafting policy, numpy only) and ``draftless.integration`` (torch and transformers: verification, acceptance,
the fast pass, the CLI). The public names below load on first use, so that ``import draftless`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# each public name -> the module that defines it
_EXPORTS = {
    "AdaptiveConfig": "draftless.lookup",
    "DraftConfig": "draftless.lookup",
    "FastPassOptions": "draftless.integration.fastpass",
    "GenerationStats": "draftless.integration.generation_stats",
    "ReferenceCorpus": "draftless.lookup",
    "SpeculativeGenerator": "draftless.integration.speculative",
    "SuffixIndex": "draftless.index",
    "UnsupportedGeneration": "draftless.integration.generation_plan",
    "disable": "draftless.integration.enabling",
    "enable": "draftless.integration.enabling",
    "generate": "draftless.integration.speculative",
    "load_model": "draftless.integration.models",
    "load_tokenizer": "draftless.integration.models",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    where = _EXPORTS.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value  # found without this function from now on
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))

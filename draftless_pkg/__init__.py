"""draftless: speculative decoding for Hugging Face causal LMs with no draft model.

The code lives in three layers, each its own subpackage and top-level folder:
``draftless.index`` (Numba suffix index), ``draftless.lookup`` (drafting policy, numpy only)
and ``draftless.integration`` (torch/transformers: verification, acceptance, CLI).
"""

__version__ = "0.1.0"

"""Drafting policy on top of ``draftless.index`` (numpy only): which occurrence, how many tokens,
from the request's own text or a reference corpus shared across requests."""

from .adaptive import AdaptiveConfig, AdaptiveProposer
from .config import DraftConfig
from .corpus import ReferenceCorpus
from .proposer import NullProposer, Proposer, SuffixProposer
from .request_start import RequestStart, carried_starts

__all__ = [
    "AdaptiveConfig",
    "AdaptiveProposer",
    "DraftConfig",
    "NullProposer",
    "Proposer",
    "ReferenceCorpus",
    "RequestStart",
    "SuffixProposer",
    "carried_starts",
]

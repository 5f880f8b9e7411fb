"""Drafting policy on top of ``draftless.index`` (numpy only): which occurrence, how many tokens,
from the request's own text or a reference corpus shared across requests."""

from .adaptive import AdaptiveConfig, AdaptiveProposer
from .config import DraftConfig
from .corpus import ReferenceCorpus
from .peer_rules import NgramRule, PromptLookupRule, SuffixDecodingRule
from .proposer import NullProposer, Proposer, SuffixProposer

__all__ = ["AdaptiveConfig", "AdaptiveProposer", "DraftConfig", "NgramRule", "NullProposer", "PromptLookupRule", "Proposer", "ReferenceCorpus", "SuffixDecodingRule", "SuffixProposer"]
